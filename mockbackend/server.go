package mockbackend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
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
	// empty without accelerators. Its ModelConfig's instance group follows it:
	// "dla<N>" is a TensorRT engine bound to DLA core N (KIND_GPU with
	// secondary device KIND_NVDLA N), "cpu" KIND_CPU, any other KIND_GPU.
	On string
	// Instances is the count of the model's instance group: at most this many
	// executions of the model run at once, whatever its accelerator's slots
	// (a request whose model has every instance busy lets the requests behind
	// it in the FIFO go first). 0: no bound but the slots, reported as count 1.
	Instances int
	// MaxBatch is the model's max_batch_size. Above 0 every input's first
	// dimension is the request's batch size b (1 ≤ b ≤ MaxBatch) and OUTPUT0 has
	// one row per input row (see RowOutput); 0 keeps the batch-free interface.
	MaxBatch int
	// Batcher, with MaxBatch above 0, is Triton's dynamic batcher for the model
	// (preferred_batch_size and max_queue_delay_microseconds are used): queued
	// requests of the model run together as one execution. nil: every request
	// runs as it came.
	Batcher *wire.DynamicBatching
	// BatchGain g prices an execution of b rows: the mean of its rows' times ×
	// (1 + g·(b − 1)). A row of a one-row request takes ExecTime; a row of a
	// request that came with b > 1 rows takes Exec × 1.1 (the mean factor).
	// 1 is no gain (b rows cost b single runs); 0 a batch costs one row.
	BatchGain float64
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
	// Interference slows co-running accelerators (shared DRAM bandwidth on a
	// Jetson): a job that starts while another accelerator runs a job takes
	// its length × the factor of its own accelerator, by name ("dla" for
	// every DLA core without an entry of its own). Factors are 1 or more;
	// none: accelerators do not affect each other.
	Interference map[string]float64
}

// FromConfig takes the device and the models from a vig configuration: what the
// embedded backend of `vig serve` and `vig mock-backend -c` serve. The device
// is the one vig schedules: the accelerators with their slots, each model on
// its accelerator with its instances (instances:, the count of its instance
// group) and the interference between accelerators (interference:; with
// the backend.slots shorthand there is one accelerator, and nothing to slow).
func FromConfig(c *config.Config) Config {
	cfg := Config{Slots: c.Backend.Slots, Seed: c.Backend.Seed}
	if len(c.Accelerators) > 0 {
		cfg.Slots = 0
		for _, a := range c.AcceleratorList() {
			cfg.Accelerators = append(cfg.Accelerators, Accelerator{Name: a.Name, Slots: a.Slots})
		}
		if len(c.Interference) > 0 {
			cfg.Interference = maps.Clone(c.Interference)
		}
	}
	for name, m := range c.Models {
		if m.Logical() {
			continue // its frames reach the server as its variants
		}
		mm := Model{Name: name, Exec: m.Exec(), On: c.AcceleratorOf(name), Instances: c.InstancesOf(name)}
		if m.MaxBatch != nil && *m.MaxBatch > 1 {
			mm.MaxBatch = *m.MaxBatch
			mm.Batcher = &wire.DynamicBatching{}
			mm.BatchGain = gainOf(m)
		}
		cfg.Models = append(cfg.Models, mm)
	}
	sort.Slice(cfg.Models, func(i, j int) bool { return cfg.Models[i].Name < cfg.Models[j].Name })
	sequencesFromConfig(cfg.Models, c)
	return cfg
}

// gainOf is the batch gain that reproduces a model's batch_exec_ms: from the cost
// of one row (batch_exec_ms[1], else exec_ms) to that of the largest batch given,
// linearly. Without batch_exec_ms a batch costs its rows' single runs (gain 1).
func gainOf(m config.Model) float64 {
	one, big := m.ExecMs, 0
	if v, ok := m.BatchExecMs[1]; ok {
		one = v
	}
	for size := range m.BatchExecMs {
		big = max(big, size)
	}
	if big < 2 || one <= 0 {
		return 1
	}
	return max((m.BatchExecMs[big]/one-1)/float64(big-1), 0)
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
	// A batching model's OUTPUT0 is UINT8 [b, RowBytes] (see RowOutput).
	rowDatatype = "UINT8"
	RowBytes    = 16
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
	policy   *batchPolicy  // nil unless MaxBatch > 0
	seq      *seqBatcher   // its sequence batcher, nil without (sequence.go)
	base     int           // the global number of its accelerator's slot 0
	accel    string
	limit    *instances // nil unless Instances > 0

	mu sync.Mutex
	st stats
}

type stats struct {
	last                              time.Time
	inferences, executions            uint64
	batches                           map[int]uint64 // executions by batch size
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
	if len(cfg.Interference) > 0 {
		if len(cfg.Accelerators) == 0 {
			return nil, errors.New("mockbackend: interference needs two accelerators or more (a job slows while another accelerator runs one), and there is one: " +
				"give Config.Accelerators (e.g. gpu and dla0) and each Model.On, or drop Config.Interference")
		}
		factors, err := interferenceOf(cfg.Interference, s.accels)
		if err != nil {
			return nil, err
		}
		dev := &device{}
		for i, p := range s.pools {
			p.dev, p.idx, p.factor = dev, i, factors[i]
		}
	}
	if cfg.Timeline {
		s.timeline = &timeline{}
	}
	for _, m := range cfg.Models {
		switch {
		case m.Name == "":
			return nil, errors.New("mockbackend: a model has no name")
		case m.Exec < 0:
			return nil, fmt.Errorf("mockbackend: model %q: negative execution time %v", m.Name, m.Exec)
		case m.Instances < 0:
			return nil, fmt.Errorf("mockbackend: model %q: instances %d: give the instance group's count, 1 or more (0: bounded by the slots alone)", m.Name, m.Instances)
		}
		if _, dup := s.models[m.Name]; dup {
			return nil, fmt.Errorf("mockbackend: model %q listed twice", m.Name)
		}
		policy, err := policyOf(m)
		if err != nil {
			return nil, err
		}
		p := 0
		if len(cfg.Accelerators) > 0 || m.On != "" {
			p = slices.Index(s.accels, m.On)
			if p < 0 {
				return nil, fmt.Errorf("mockbackend: model %q: accelerator %q is not configured (have %v)", m.Name, m.On, s.accels)
			}
		}
		s.models[m.Name] = &model{Model: m, pool: s.pools[p], base: bases[s.accels[p]], accel: s.accels[p], policy: policy}
		if m.Instances > 0 {
			s.models[m.Name].limit = newInstances(m.Instances)
		}
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

// policyOf checks a model's batching options and returns its policy (nil for a
// model without a batch dimension).
func policyOf(m Model) (*batchPolicy, error) {
	switch {
	case m.MaxBatch < 0:
		return nil, fmt.Errorf("mockbackend: model %q: max batch %d: give 0 (no batch dimension) or the most rows one execution takes", m.Name, m.MaxBatch)
	case m.MaxBatch == 0 && m.Batcher != nil:
		return nil, fmt.Errorf("mockbackend: model %q: a dynamic batcher needs a max batch size above 0, as in Triton", m.Name)
	case m.MaxBatch == 0:
		return nil, nil
	case IsDetector(m.Name):
		return nil, fmt.Errorf("mockbackend: model %q: the mock's %s models do not batch; drop its max batch", m.Name, DetectorSuffix)
	case m.BatchGain < 0 || math.IsNaN(m.BatchGain) || math.IsInf(m.BatchGain, 0):
		return nil, fmt.Errorf("mockbackend: model %q: batch gain %g: give 0 or more (1: a batch costs its rows' single runs)", m.Name, m.BatchGain)
	}
	p := &batchPolicy{max: m.MaxBatch, gain: m.BatchGain}
	if b := m.Batcher; b != nil {
		p.merge = true
		p.delay = time.Duration(min(b.MaxQueueDelayMicroseconds, uint64(time.Hour/time.Microsecond))) * time.Microsecond
		for _, v := range b.PreferredBatchSize {
			if v < 1 || int(v) > m.MaxBatch {
				return nil, fmt.Errorf("mockbackend: model %q: preferred batch size %d: sizes run from 1 to the max batch size %d", m.Name, v, m.MaxBatch)
			}
			p.preferred = append(p.preferred, int(v))
		}
		slices.Sort(p.preferred)
		p.preferred = slices.Compact(p.preferred)
	}
	return p, nil
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
	if m.MaxBatch > 0 {
		return &inference.ModelMetadataResponse{
			Name:     m.Name,
			Versions: []string{modelVersion},
			Platform: platform,
			Inputs:   []*inference.ModelMetadataResponse_TensorMetadata{{Name: inputName, Datatype: inputDatatype, Shape: []int64{-1, -1}}},
			Outputs:  []*inference.ModelMetadataResponse_TensorMetadata{{Name: OutputName, Datatype: rowDatatype, Shape: []int64{-1, RowBytes}}},
		}, nil
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
// message (see ModelConfigOf); a model without Instances reports its
// accelerator's slots as its count.
func (s *Server) ModelConfig(_ context.Context, req *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	m, err := s.lookup(req.Name, req.Version)
	if err != nil {
		return nil, err
	}
	mm := m.Model
	if mm.Instances == 0 {
		// No count given: the mock runs as many of the model at once as its
		// accelerator's slots, and says so, so that a governor reading the
		// count does not run it one at a time.
		mm.Instances = len(m.pool.end)
	}
	return &inference.ModelConfigResponse{Config: wire.AppendModelConfig(nil, m.withTritonRules(ModelConfigOf(mm)))}, nil
}

// ModelConfigOf is the configuration the mock reports for a model: name,
// platform, max_batch_size, one instance group (KIND_GPU with count 1 unless
// the model's On and Instances say otherwise: see Model.On), the dynamic
// batcher if it has one, and its tensors: without a batch dimension one
// UINT8 input INPUT0 of dims [-1] and one INT64 output OUTPUT0 of dims [2];
// with one (MaxBatch > 0) INPUT0 UINT8 [-1] and OUTPUT0 UINT8 [16] per row.
func ModelConfigOf(m Model) *wire.ModelConfig {
	c := &wire.ModelConfig{
		Name:           m.Name,
		Platform:       platform,
		MaxBatchSize:   int32(m.MaxBatch),
		Inputs:         []wire.TensorConfig{{Name: inputName, DataType: wire.TypeUint8, Dims: []int64{-1}}},
		Outputs:        []wire.TensorConfig{{Name: OutputName, DataType: wire.TypeInt64, Dims: []int64{2}}},
		InstanceGroups: []wire.InstanceGroup{instanceGroupOf(m)},
	}
	if m.MaxBatch > 0 {
		c.Outputs = []wire.TensorConfig{{Name: OutputName, DataType: wire.TypeUint8, Dims: []int64{RowBytes}}}
		if m.Batcher != nil {
			b := *m.Batcher
			c.DynamicBatching = &b
		}
	}
	return c
}

// EncodeModelConfig is the ModelConfig the mock reports for a model of that
// name without a batch dimension (ModelConfigOf, encoded).
func EncodeModelConfig(name string) []byte {
	return wire.AppendModelConfig(nil, ModelConfigOf(Model{Name: name}))
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

// BatchSizes reports, per model that ran, how many executions ran each batch
// size (rows). Triton reports this as ModelStatistics.batch_stats, which vig's
// protocol omits.
func (s *Server) BatchSizes() map[string]map[int]uint64 {
	out := map[string]map[int]uint64{}
	for _, n := range s.names {
		m := s.models[n]
		m.mu.Lock()
		if len(m.st.batches) > 0 {
			out[n] = maps.Clone(m.st.batches)
		}
		m.mu.Unlock()
	}
	return out
}
