# vig — build, test and run. `make help` lists the targets.

GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(HOME)/go/bin:$(PATH)
VERSION ?= $(shell ./build/version.sh 2>/dev/null || cat build/version/VERSION)
LDFLAGS := -X github.com/vig-edge/vig/build/version.version=$(VERSION)
BIN     := bin
CONFIG  ?= examples/demo.yaml
# grpcnotrace: grpc-go without golang.org/x/net/trace, which vig never enables and
# which costs 2.6 MB (html/template's reflection keeps every exported method alive).
GOTAGS  ?= grpcnotrace

# The C ring client (shmring/c): built with the flags its tests use.
CC           ?= cc
RING_CFLAGS  ?= -std=c99 -O2 -Wall -Wextra -Werror
AARCH64_CC   ?= aarch64-linux-gnu-gcc

# Pinned protoc plugins for `make proto`.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0

.PHONY: help build run test fuzz h2spec lint arm64 android-push release proto bench bench-link demo ring-c ring-c-arm64 clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/vig for this machine
	CGO_ENABLED=0 $(GO) build -trimpath -tags "$(GOTAGS)" -ldflags "$(LDFLAGS)" -o $(BIN)/vig ./cmd/vig

run: build ## build and serve examples/demo.yaml (embedded mock backend)
	$(BIN)/vig serve -c $(CONFIG)

test: ## gofmt, vet, all tests with -race (fuzz corpora replayed), static arm64 build, arm64 tests under qemu
	./build/test.sh

fuzz: ## exploratory fuzzing of every target, FUZZTIME each (default 60s; FUZZ=regexp picks targets)
	./build/fuzz.sh

h2spec: build ## h2spec (pinned) against vig serve, grpc-go's server and nginx grpc_pass: passed/failed of each
	GO="$(GO)" ./build/h2spec.sh -v $(BIN)/vig

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

arm64: ## static linux/arm64 binary for phones and Jetsons (bin/vig-linux-arm64)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -tags "$(GOTAGS)" -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/vig-linux-arm64 ./cmd/vig
	@echo "$(BIN)/vig-linux-arm64: $$(stat -c %s $(BIN)/vig-linux-arm64) bytes ($$(du -h $(BIN)/vig-linux-arm64 | cut -f1))"

release: ## dist/: static linux/arm64 + amd64 binaries, SHA256SUMS, size report; fails above the size budget
	GO="$(GO)" VERSION="$(VERSION)" GOTAGS="$(GOTAGS)" ./build/release.sh dist

android-push: arm64 ## push bin/vig-linux-arm64 and examples/android.yaml (ANDROID_CONFIG=FILE, FORCE=1) to the phone adb sees
	./android/vig-adb.sh push --binary $(BIN)/vig-linux-arm64 $(if $(ANDROID_CONFIG),--config $(ANDROID_CONFIG)) $(if $(FORCE),--force)

proto: ## regenerate proto/inference from proto/inference.proto (protoc from Debian's protobuf-compiler)
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	$(GO) install $(PROTOC_GEN_GO)
	$(GO) install $(PROTOC_GEN_GO_GRPC)
	protoc -I proto --go_out=proto/inference --go_opt=paths=source_relative \
		--go-grpc_out=proto/inference --go-grpc_opt=paths=source_relative proto/inference.proto

bench: build ## vig bench all --quick (a few minutes; results in vig-bench-results/)
	$(BIN)/vig bench all --quick

bench-link: ## (root) gzip vs identity for a 1.2 MB frame over a veth shaped like a USB 2.0 tether
	$(GO) test -run '^$$' -bench BackendLink -benchtime 20x -count 3 ./netopt

demo: build ## the scenario-B sensors against vig, with a live per-stream table
	$(BIN)/vig demo

ring-c: shmring/c/example ## the C sensor example (shmring/c/example); the Python one needs no build

shmring/c/example: shmring/c/example.c shmring/c/vigring.h
	$(CC) $(RING_CFLAGS) -o $@ shmring/c/example.c

ring-c-arm64: ## the C sensor example for arm64, static (shmring/c/example-arm64; apt-get install -y gcc-aarch64-linux-gnu)
	@command -v $(AARCH64_CC) >/dev/null || { echo "$(AARCH64_CC) missing: apt-get install -y gcc-aarch64-linux-gnu"; exit 1; }
	$(AARCH64_CC) $(RING_CFLAGS) -static -o shmring/c/example-arm64 shmring/c/example.c

clean: ## remove build outputs
	rm -rf $(BIN) dist shmring/c/example shmring/c/example-arm64
