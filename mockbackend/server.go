package mockbackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // Triton accepts gzip; so does the mock (backend.compression)
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// Model is one model the mock serves.
type Model struct {
	Name string
	// Exec is the base execution time; each frame takes ExecTime(seed, stream,
	// frame, Exec), between 0.9 and 1.3 × Exec.
	Exec time.Duration
	// On names the accelerator the model runs on, one of Config.Accelerators;
	// empty without accelerators.
	On string
	// Sequence, when set, puts the model behind Triton's sequence batcher
	// (sequence.go).
	Sequence *SequenceBatching
	// Queue, when set, is the model's dynamic batcher as far as its queue
	// policy and priority levels go: request timeouts are applied as Triton
	// does (queuetimeout.go) and its ModelConfig says so.
	Queue *wire.DynamicBatching
}

// Accelerator is one kind of accelerator: Slots jobs at once, and its own FIFO.
type Accelerator struct {
	Name  string
	Slots int
}

// Config configures a Server.
type Config struct {
	Models []Model
	Slots  int // jobs that execute at once (default 1), on one accelerator
	// Accelerators, instead of Slots, models a device with several kinds of
	// accelerator (a Jetson's GPU and DLA cores): each has its own slots and its
	// own FIFO, and a model runs only on its own (Model.On). Job.Slot numbers
	// the slots of all of them in this order.
	Accelerators []Accelerator
	Seed         uint64 // seed of the execution times
	// Name and Version are what ServerMetadata reports (default "vig-mock-backend", "1").
	Name, Version string
	// Spin is how long before the end of a job the server stops sleeping and spins
	// (see waitUntil). 0 calibrates it once per process; negative never spins.
	Spin time.Duration
	// Timeline records every job's slot, queueing, start and end for
	// Server.Timeline (benchmarks); off, nothing is kept.
	Timeline bool
}

// FromConfig takes the models, slots and seed from a vig configuration: what the
// embedded backend of `vig serve` and `vig mock-backend -c` serve.
func FromConfig(c *config.Config) Config {
	cfg := Config{Slots: c.Backend.Slots, Seed: c.Backend.Seed}
	if len(c.Accelerators) > 0 {
		cfg.Slots = 0
		for _, a := range c.AcceleratorList() {
			cfg.Accelerators = append(cfg.Accelerators, Accelerator{Name: a.Name, Slots: a.Slots})
		}
	}
	for name, m := range c.Models {
		cfg.Models = append(cfg.Models, Model{Name: name, Exec: m.Exec(), On: c.AcceleratorOf(name)})
	}
	sort.Slice(cfg.Models, func(i, j int) bool { return cfg.Models[i].Name < cfg.Models[j].Name })
	sequencesFromConfig(cfg.Models, c)
	return cfg
}

// The mock's fixed model interface, reported by ModelMetadata and ModelConfig. Any
// inputs are accepted (see the package doc); OUTPUT0 is the only output.
const (
	modelVersion   = "1"
	platform       = "vig_mock"
	inputName      = "INPUT0"
	inputDatatype  = "UINT8"
	OutputName     = "OUTPUT0"
	outputDatatype = "INT64"
	outputBytes    = 16 // two int64
)

// Server is a Triton-protocol inference server whose models sleep instead of
// computing. Its methods are safe for concurrent use.
type Server struct {
	inference.UnimplementedGRPCInferenceServiceServer

	cfg    Config
	spin   time.Duration
	models map[string]*model
	names  []string // model names, sorted
	slots  *slots   // the first accelerator's
	pools  []*slots // one per accelerator
	accels []string // their names
	shm    registry
	health *health.Server
	qlog   queueLog // requests of models with a queue policy (queuetimeout.go)

	timeline *timeline // nil unless Config.Timeline

	closed atomic.Bool

	grantHook atomic.Pointer[func(id string, g grant)] // tests: observe slot grants
}

// model holds one model's identity and statistics.
type model struct {
	Model
	arrivals atomic.Uint64 // frame counter for requests whose id names no frame
	pool     *slots        // its accelerator
	seq      *seqBatcher   // its sequence batcher, nil without (sequence.go)
	base     int           // the global number of its accelerator's slot 0
	accel    string

	mu sync.Mutex
	st stats
}

type stats struct {
	last                              time.Time
	inferences, executions            uint64
	success, fail, queue, input, comp duration
	output                            duration
}

type duration struct{ count, ns uint64 }

func (d *duration) add(v time.Duration) {
	d.count++
	d.ns += uint64(max(v, 0))
}

func (d duration) pb() *inference.StatisticDuration {
	return &inference.StatisticDuration{Count: d.count, Ns: d.ns}
}

// New checks cfg and builds a server. It calibrates the sleep/spin split on first use
// in a process (~20 ms) unless cfg.Spin is set.
func New(cfg Config) (*Server, error) {
	accels := cfg.Accelerators
	if len(accels) > 0 && cfg.Slots != 0 {
		return nil, fmt.Errorf("mockbackend: both slots (%d) and accelerators given: slots is the shorthand for one accelerator", cfg.Slots)
	}
	if len(accels) == 0 {
		if cfg.Slots == 0 {
			cfg.Slots = 1
		}
		accels = []Accelerator{{Slots: cfg.Slots}}
	}
	for _, a := range accels {
		if a.Slots < 1 {
			return nil, fmt.Errorf("mockbackend: accelerator %q: slots %d: need at least 1", a.Name, a.Slots)
		}
	}
	if cfg.Name == "" {
		cfg.Name = "vig-mock-backend"
	}
	if cfg.Version == "" {
		cfg.Version = "1"
	}
	s := &Server{cfg: cfg, models: map[string]*model{}, health: health.NewServer()}
	bases := map[string]int{}
	base := 0
	for _, a := range accels {
		if _, dup := bases[a.Name]; dup {
			return nil, fmt.Errorf("mockbackend: accelerator %q listed twice", a.Name)
		}
		bases[a.Name] = base
		base += a.Slots
		s.pools = append(s.pools, newSlots(a.Slots))
		s.accels = append(s.accels, a.Name)
	}
	s.slots = s.pools[0]
	if cfg.Timeline {
		s.timeline = &timeline{}
	}
	for _, m := range cfg.Models {
		switch {
		case m.Name == "":
			return nil, errors.New("mockbackend: a model has no name")
		case m.Exec < 0:
			return nil, fmt.Errorf("mockbackend: model %q: negative execution time %v", m.Name, m.Exec)
		}
		if _, dup := s.models[m.Name]; dup {
			return nil, fmt.Errorf("mockbackend: model %q listed twice", m.Name)
		}
		p := 0
		if len(cfg.Accelerators) > 0 || m.On != "" {
			p = slices.Index(s.accels, m.On)
			if p < 0 {
				return nil, fmt.Errorf("mockbackend: model %q: accelerator %q is not configured (have %v)", m.Name, m.On, s.accels)
			}
		}
		s.models[m.Name] = &model{Model: m, pool: s.pools[p], base: bases[s.accels[p]], accel: s.accels[p]}
		if m.Sequence != nil {
			s.models[m.Name].seq = newSeqBatcher(*m.Sequence)
		}
		s.names = append(s.names, m.Name)
	}
	sort.Strings(s.names)
	switch {
	case cfg.Spin > 0:
		s.spin = cfg.Spin
	case cfg.Spin == 0:
		s.spin = calibratedSpin()
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(inference.GRPCInferenceService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Register adds the inference service and grpc.health.v1 to g.
func (s *Server) Register(g *grpc.Server) {
	inference.RegisterGRPCInferenceServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Close reports NOT_SERVING and unmaps every shared-memory region (a region still
// used by a request in flight is unmapped when that request ends).
func (s *Server) Close() error {
	s.closed.Store(true)
	s.health.Shutdown()
	s.shm.closeAll()
	return nil
}

// modelList names the models served, sorted, for error messages.
func (s *Server) modelList() string {
	names := make([]string, 0, len(s.models))
	for n := range s.models {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Spin is the sleep/spin split in use (see Config.Spin).
func (s *Server) Spin() time.Duration { return s.spin }

// lookup finds a model; version "" and "1" name its only version.
func (s *Server) lookup(name, version string) (*model, error) {
	m, ok := s.models[name]
	if !ok {
		// Triton's words, then what a user of vig's mock needs to know.
		return nil, status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found (this is vig's mock backend: it serves only the models under models: in its config: %s)", name, s.modelList())
	}
	if version != "" && version != modelVersion {
		return nil, status.Errorf(codes.NotFound, "Request for unknown model: '%s' version %s is not found", name, version)
	}
	return m, nil
}

func (s *Server) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (s *Server) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: !s.closed.Load()}, nil
}

// ModelReady answers ready=false for an unknown model or version, as Triton does.
func (s *Server) ModelReady(_ context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	_, err := s.lookup(req.Name, req.Version)
	return &inference.ModelReadyResponse{Ready: err == nil && !s.closed.Load()}, nil
}

func (s *Server) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{
		Name:       s.cfg.Name,
		Version:    s.cfg.Version,
		Extensions: []string{"model_configuration", "system_shared_memory", "statistics"},
	}, nil
}

func (s *Server) ModelMetadata(_ context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	m, err := s.lookup(req.Name, req.Version)
	if err != nil {
		return nil, err
	}
	return &inference.ModelMetadataResponse{
		Name:     m.Name,
		Versions: []string{modelVersion},
		Platform: platform,
		Inputs:   []*inference.ModelMetadataResponse_TensorMetadata{{Name: inputName, Datatype: inputDatatype, Shape: []int64{-1}}},
		Outputs:  []*inference.ModelMetadataResponse_TensorMetadata{{Name: OutputName, Datatype: outputDatatype, Shape: []int64{2}}},
	}, nil
}

// ModelConfig returns the model's configuration encoded as Triton's ModelConfig
// message (see EncodeModelConfig).
func (s *Server) ModelConfig(_ context.Context, req *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	m, err := s.lookup(req.Name, req.Version)
	if err != nil {
		return nil, err
	}
	return &inference.ModelConfigResponse{Config: modelConfigExtra(m, EncodeModelConfig(m.Name))}, nil
}

// Triton's model_config.proto: ModelConfig{name=1, platform=2, max_batch_size=4,
// input=5, output=6}, ModelInput{name=1, data_type=2, dims=4},
// ModelOutput{name=1, data_type=2, dims=3}; DataType TYPE_UINT8=2, TYPE_INT64=9.
const (
	typeUINT8 = 2
	typeINT64 = 9
)

// EncodeModelConfig is the ModelConfig the mock reports for a model: deterministic
// bytes in Triton's model_config.proto encoding (name, platform, max_batch_size 0,
// one UINT8 input INPUT0 of dims [-1], one INT64 output OUTPUT0 of dims [2]).
func EncodeModelConfig(name string) []byte {
	var in, out, b []byte
	in = protowire.AppendTag(in, 1, protowire.BytesType)
	in = protowire.AppendString(in, inputName)
	in = protowire.AppendTag(in, 2, protowire.VarintType)
	in = protowire.AppendVarint(in, typeUINT8)
	in = protowire.AppendTag(in, 4, protowire.BytesType)
	in = protowire.AppendBytes(in, protowire.AppendVarint(nil, ^uint64(0))) // packed [-1]: int64 -1 as a varint

	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendString(out, OutputName)
	out = protowire.AppendTag(out, 2, protowire.VarintType)
	out = protowire.AppendVarint(out, typeINT64)
	out = protowire.AppendTag(out, 3, protowire.BytesType)
	out = protowire.AppendBytes(out, protowire.AppendVarint(nil, 2))

	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, platform)
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendBytes(b, in)
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendBytes(b, out)
	return b
}

// ModelStatistics reports one model (by name) or all of them (empty name).
func (s *Server) ModelStatistics(_ context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	names := s.names
	if req.Name != "" {
		if _, err := s.lookup(req.Name, req.Version); err != nil {
			return nil, err
		}
		names = []string{req.Name}
	}
	resp := &inference.ModelStatisticsResponse{}
	for _, n := range names {
		m := s.models[n]
		m.mu.Lock()
		st := m.st
		m.mu.Unlock()
		var last uint64
		if !st.last.IsZero() {
			last = uint64(st.last.UnixMilli())
		}
		resp.ModelStats = append(resp.ModelStats, &inference.ModelStatistics{
			Name:           n,
			Version:        modelVersion,
			LastInference:  last,
			InferenceCount: st.inferences,
			ExecutionCount: st.executions,
			InferenceStats: &inference.InferStatistics{
				Success:       st.success.pb(),
				Fail:          st.fail.pb(),
				Queue:         st.queue.pb(),
				ComputeInput:  st.input.pb(),
				ComputeInfer:  st.comp.pb(),
				ComputeOutput: st.output.pb(),
				CacheHit:      &inference.StatisticDuration{},
				CacheMiss:     &inference.StatisticDuration{},
			},
		})
	}
	return resp, nil
}

func (s *Server) SystemSharedMemoryRegister(_ context.Context, req *inference.SystemSharedMemoryRegisterRequest) (*inference.SystemSharedMemoryRegisterResponse, error) {
	if err := s.shm.register(req); err != nil {
		return nil, err
	}
	return &inference.SystemSharedMemoryRegisterResponse{}, nil
}

func (s *Server) SystemSharedMemoryStatus(_ context.Context, req *inference.SystemSharedMemoryStatusRequest) (*inference.SystemSharedMemoryStatusResponse, error) {
	regions, err := s.shm.status(req.Name)
	if err != nil {
		return nil, err
	}
	return &inference.SystemSharedMemoryStatusResponse{Regions: regions}, nil
}

func (s *Server) SystemSharedMemoryUnregister(_ context.Context, req *inference.SystemSharedMemoryUnregisterRequest) (*inference.SystemSharedMemoryUnregisterResponse, error) {
	s.shm.unregister(req.Name)
	return &inference.SystemSharedMemoryUnregisterResponse{}, nil
}

// The mock answers the features it lacks like a Triton built without them: CUDA
// shared memory has no regions and refuses registration; the repository is fixed;
// tracing and log settings are not available.

func (s *Server) CudaSharedMemoryStatus(_ context.Context, req *inference.CudaSharedMemoryStatusRequest) (*inference.CudaSharedMemoryStatusResponse, error) {
	if req.Name != "" {
		return nil, status.Errorf(codes.NotFound, "Unable to find cuda shared memory region: '%s'", req.Name)
	}
	return &inference.CudaSharedMemoryStatusResponse{}, nil
}

func (s *Server) CudaSharedMemoryRegister(_ context.Context, req *inference.CudaSharedMemoryRegisterRequest) (*inference.CudaSharedMemoryRegisterResponse, error) {
	return nil, status.Errorf(codes.Unimplemented,
		"failed to register CUDA shared memory region '%s': GPUs not supported (vig's mock backend has no CUDA; use system shared memory)", req.Name)
}

func (s *Server) CudaSharedMemoryUnregister(context.Context, *inference.CudaSharedMemoryUnregisterRequest) (*inference.CudaSharedMemoryUnregisterResponse, error) {
	return &inference.CudaSharedMemoryUnregisterResponse{}, nil // no region can exist
}

// RepositoryIndex lists the configured models, each READY, encoded as Triton's
// RepositoryIndexResponse.ModelIndex{name=1, version=2, state=3, reason=4}.
func (s *Server) RepositoryIndex(context.Context, *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	resp := &inference.RepositoryIndexResponse{}
	for _, n := range s.names {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, n)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, modelVersion)
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, "READY")
		resp.Models = append(resp.Models, b)
	}
	return resp, nil
}

func (s *Server) RepositoryModelLoad(_ context.Context, req *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	return nil, status.Errorf(codes.Unimplemented,
		"explicit model load / unload is not allowed: vig's mock backend serves a fixed set of models from its configuration (model '%s')", req.ModelName)
}

func (s *Server) RepositoryModelUnload(_ context.Context, req *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	return nil, status.Errorf(codes.Unimplemented,
		"explicit model load / unload is not allowed: vig's mock backend serves a fixed set of models from its configuration (model '%s')", req.ModelName)
}

func (s *Server) TraceSetting(context.Context, *inference.TraceSettingRequest) (*inference.TraceSettingResponse, error) {
	return nil, status.Error(codes.Unimplemented, "tracing is not supported by vig's mock backend")
}

func (s *Server) LogSettings(context.Context, *inference.LogSettingsRequest) (*inference.LogSettingsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "log settings are not supported by vig's mock backend")
}
