module github.com/vig-edge/vig

go 1.26.0
