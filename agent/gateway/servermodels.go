package gateway

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/servermodel"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// methodModelConfig is Triton's ModelConfig RPC.
const methodModelConfig = "/" + wire.Service + "/ModelConfig"

// serverModels is vig's one record of how the backend configured the models vig
// governs (Triton's ModelConfig: max_batch_size, the batchers, the instance
// groups), read through servermodel each time vig connects to the backend.
// Batching takes a model's max batch from it when the config gives none; the
// layout check compares it with the layout vig runs. A backend without
// ModelConfig (a ring runtime, a minimal server) leaves the config as the only
// source.
type serverModels struct {
	mu     sync.RWMutex
	models map[string]*wire.ModelConfig
	reads  atomic.Uint64 // reads of every model's configuration finished
}

// ServerModelReads counts the times vig finished reading the backend's model
// configuration (once per connection), for tests that must not count its
// calls as theirs.
func (g *Gateway) ServerModelReads() uint64 { return g.server.reads.Load() }

// ServerModel returns the backend's configuration of model as last read, if
// vig could read it.
func (g *Gateway) ServerModel(model string) (*wire.ModelConfig, bool) {
	g.server.mu.RLock()
	defer g.server.mu.RUnlock()
	mc, ok := g.server.models[model]
	return mc, ok
}

// backendConfigs answers ModelConfig over the gateway's own connection to
// the backend.
func (g *Gateway) backendConfigs(ctx context.Context, in *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	req, _ := proto.Marshal(in) // cannot fail for this message
	b, err := g.Invoke(ctx, methodModelConfig, req)
	if err != nil {
		return nil, err
	}
	var r pb.ModelConfigResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: ModelConfigResponse: %w", servermodel.ErrBadModelConfig, err)
	}
	return &r, nil
}

// readServerModels reads the configuration of every model in vig's config from
// the backend and applies what batching needs of it. It runs on its own
// goroutine after each connection to the backend.
func (g *Gateway) readServerModels() {
	if g.gov == nil || g.relay == nil {
		return
	}
	defer g.server.reads.Add(1)
	defer g.checkLayout()
	for _, name := range g.opts.Config.ServedModelNames() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r := servermodel.Read(ctx, servermodel.Func(g.backendConfigs), name)
		cancel()
		g.server.mu.Lock()
		if g.server.models == nil {
			g.server.models = map[string]*wire.ModelConfig{}
		}
		if r.Outcome == servermodel.Described {
			g.server.models[name] = r.Config
		} else {
			delete(g.server.models, name)
		}
		g.server.mu.Unlock()
		switch {
		case r.Outcome == servermodel.Described:
			g.applyServerModel(name, r.Config)
		case r.Outcome == servermodel.NoModelConfig || status.Code(r.Err) == codes.NotFound:
			g.log.Info("server model configuration unavailable: vig's config is the only source for it",
				"model", name, "err", r.Err)
		default:
			g.log.Warn("cannot read the model's configuration from the backend; vig's config is the only source for it",
				"model", name, "err", r.Err)
		}
	}
}

// applyServerModel sets a model's max batch from the server's configuration:
// the server's max_batch_size when the config gives no max_batch, never above
// it (the server refuses a larger batch), and 1 for a model with a sequence
// batcher (its requests must reach the model one by one, in order). Where the
// config and the server disagree vig says so, with the fix.
func (g *Gateway) applyServerModel(name string, mc *wire.ModelConfig) {
	n, why := config.BatchFromServer(g.opts.Config.Models[name].MaxBatch, mc.MaxBatchSize, mc.SequenceBatching)
	if why != "" {
		g.log.Warn(why, "model", name, "server_max_batch_size", mc.MaxBatchSize, "sequence_batching", mc.SequenceBatching)
	}
	if g.gov.setMaxBatch(name, n) && n > 1 {
		g.log.Info("batching the model's frames", "model", name, "max_batch", n)
	}
	g.noteHandOff(name, mc)
}

// setMaxBatch sets model's max batch in the scheduler and for the batch keys;
// false if the scheduler does not know the model.
func (g *Governor) setMaxBatch(model string, n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.s.SetMaxBatch(model, n) {
		return false
	}
	if p := g.maxBatch[model]; p != nil {
		p.Store(int32(n))
	}
	return true
}

// checkLayout compares the layout the server now describes with the one vig
// runs, after a reconnect: the scheduler is not rebuilt live, so a change is
// said, with the fix.
func (g *Gateway) checkLayout() {
	cfg := g.opts.Config
	if cfg.Backend.Embedded {
		return // the embedded mock serves the config's models: nothing to compare
	}
	g.server.mu.RLock()
	srv := maps.Clone(g.server.models)
	g.server.mu.RUnlock()
	if !cfg.DerivesLayout() {
		// The config declares the layout: where the server binds a model
		// elsewhere, say so with the fix.
		_, notes, _ := config.Derive(cfg, srv)
		for _, n := range notes {
			g.log.Warn("layout: "+n.String(), "model", n.Model)
		}
		return
	}
	running, ok := cfg.Resolved()
	if !ok {
		return
	}
	now, _, err := config.Derive(cfg, srv)
	if err != nil {
		g.log.Warn("the server's layout no longer resolves: vig keeps scheduling the layout it started with; fix the server's model configuration, then restart vig",
			"err", err)
		return
	}
	if same, diff := config.SameLayout(running, now); !same {
		g.log.Warn("the server's layout differs from the one vig schedules (read at start): vig keeps the old one; restart vig to take the new",
			"differences", diff)
	}
}
