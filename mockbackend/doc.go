// Package mockbackend is a Triton-protocol inference server whose models hold an
// accelerator slot for a chosen time instead of computing. vig's tests, benchmarks
// and demo run against it, and `vig serve` embeds it when the config says
// `backend: {embedded: true}`. It is a real gRPC server on a real socket (TCP with
// TCP_NODELAY verified, or a Unix socket), not an in-process fake.
//
// # Work
//
// Each request names a frame of a stream. A request whose id has the form
// "<stream>#<frame>" (e.g. "detector#42"; the frame a decimal uint64) names them
// explicitly; any other id gets stream = model name and frame = a per-model counter
// of such requests (0, 1, 2, … in order of arrival). vig strips its own vig_* parameters
// before forwarding, so the mock does not read them: the benchmark driver sets the
// id on both the direct and the governed path, and both paths do the same work.
//
// The frame's execution time is ExecTime(seed, stream, frame, base): base × f with f
// in [0.9, 1.3] from a hash, a pure function. At most Config.Slots jobs execute at
// once; the others wait in FIFO order (the "direct" baseline, a FIFO in the backend).
// Each slot keeps its own timeline: a job starts at max(arrival, scheduled end of
// the previous job on that slot), and waits by sleeping to shortly before its end and
// spinning the rest (the split is calibrated once per process), so timer overshoot
// neither lengthens a job nor accumulates behind it. A request whose context ends
// while it waits for a slot leaves the queue; a job that started runs to its end, as
// on an accelerator that cannot be preempted.
//
// With Config.Timeline the server records every job (id, stream, frame, slot,
// when it queued, started and ended on its slot's timeline) for
// Server.Timeline: the wire benchmark reads from it how long the accelerator sat
// idle while work was waiting.
//
// # Model interface
//
// Every model accepts any number of input tensors of any name, type and shape, and
// produces one output: OUTPUT0, INT64, shape [2] = [Digest(inputs), frame], little
// endian in raw_output_contents. ModelMetadata describes the inputs as INPUT0 UINT8
// [-1]; ModelConfig returns ModelConfigOf, encoded (wire.AppendModelConfig): name,
// platform, max_batch_size, its instance group (below) and the dynamic batcher.
// Each model has the single version "1" (a request for version "" or "1" runs it;
// the response names version "1").
//
// # Instance groups, DLA cores and interference
//
// A model's accelerator (Model.On) and instance count (Model.Instances) are
// what its ModelConfig's instance_group reports, as Triton binds a model: on
// "dla<N>" a TensorRT engine on DLA core N (KIND_GPU, secondary_devices
// KIND_NVDLA device_id N), on "cpu" KIND_CPU, elsewhere KIND_GPU; count
// Instances (1 when 0). At most Instances executions of a model run at once:
// a request whose model has every instance busy stays queued while the
// requests behind it in its accelerator's FIFO go first. A Repository (a YAML
// file, or `vig mock-backend --instance`) places models so and derives the
// device: the GPU with its slots (default 1: one job at a time without MPS),
// one accelerator of one slot per DLA core (a core runs one engine at a
// time) and the CPU. With Config.Interference a job that starts while another
// accelerator runs a job takes its length × its accelerator's factor (the GPU
// and DLA cores share DRAM bandwidth); Job.Interference records it.
//
// # Batching
//
// A model with Model.MaxBatch above 0 has a batch dimension, as a Triton model
// with max_batch_size > 0: every input's first dimension is the request's batch
// size b, 1 ≤ b ≤ MaxBatch (else INVALID_ARGUMENT in Triton's words, "inference
// request batch-size must be <= 8 for 'detector'"), and OUTPUT0 is UINT8 [b, 16]
// whose row i is RowOutput of the inputs' row i alone (fixed-size datatypes split
// by bytes, BYTES by elements; `contents` is refused), so a client can tell
// whose row it got. With Model.Batcher the model has Triton's dynamic batcher:
// when a slot frees, the oldest queued request takes the queued requests of its
// model with it in arrival order, up to MaxBatch rows (the largest preferred
// batch size it can form, if any); with a queue delay an incomplete batch waits
// up to that long from its oldest request's arrival, and other models' requests
// run meanwhile. The batch runs as one execution (Job.Execution) and every
// request gets its own rows back. An execution of b rows lasts the mean of its
// rows' times × (1 + BatchGain·(b − 1)): a one-row request's row takes ExecTime,
// a row of a request that came with several Exec × 1.1.
//
// Request checks follow Triton: an unknown model or version is NOT_FOUND;
// raw_input_contents[i] belongs to inputs[i] and is given for all inputs or none;
// `contents` together with raw_input_contents, or with a shared-memory region, is
// INVALID_ARGUMENT; so is a tensor of a fixed-size datatype (BOOL, [U]INT8…64,
// FP16/BF16/FP32/FP64) whose byte size differs from its shape's, and an output
// other than OUTPUT0. BYTES tensors and unknown datatypes are not checked.
// Request parameters (priority, timeout, …) are accepted and ignored.
//
// # Sequences and queue timeouts
//
// With Model.Sequence the model is behind an emulation of Triton's sequence
// batcher (sequence.go): START required for an unknown sequence (Triton's
// INVALID_ARGUMENT text), one slot per sequence freed by END or the idle
// timeout, a START waiting for a free slot; Server.Sequences records each
// sequence's requests in order. A model whose dynamic batcher (Model.Batcher,
// or Model.Queue for the queue policy alone) has a default queue policy
// applies a request's timeout as Triton does (queuetimeout.go): still queued
// at its timeout, it is answered UNAVAILABLE "Request timeout expired";
// Server.QueueRecords has every request's arrival, start and timeout.
// ModelConfig reports both. `vig mock-backend` takes them as --sequence and
// --queue-timeout, a config as backend.sequence_batching.
//
// # System shared memory
//
// SystemSharedMemoryRegister opens the object /dev/shm/<key> (what shm_open does on
// Linux; the key starts with '/' and has no other '/'), checks that offset+byte_size
// lies within it and maps those bytes. Tensors reference a region with the parameters
// shared_memory_region (string), shared_memory_byte_size (int64, required with a
// region) and shared_memory_offset (int64, optional). An input is read from the
// region; an output is written into it and answered with an outputs[] entry and an
// empty raw_output_contents entry. Error codes are Triton's: unknown region
// NOT_FOUND; a bad key, offset ≥ region size, offset+size overflowing or beyond the
// region, a size or offset without a region INVALID_ARGUMENT; a duplicate name
// ALREADY_EXISTS; a key that cannot be opened INTERNAL. Unregister of an unknown name
// succeeds and "" unregisters all. A region unregistered while a request uses it is
// unmapped when that request ends; a region whose object its owner shrinks yields an
// INTERNAL error for the request instead of a crash.
//
// # Statistics
//
// ModelStatistics reports, per model: inference_count (rows) and execution_count
// (executions: a batch counts once), last_inference (ms since the epoch), success and fail (count and
// total ns from arrival to answer), queue (waiting for a slot), compute_input
// (resolving and hashing the inputs, before queueing), compute_infer (start of the
// slot's timeline to the job's end) and compute_output. Cancelled or invalid
// requests for a known model count as fail. Server.BatchSizes counts the
// executions of each batch size (Triton's batch_stats, which vig's protocol omits).
//
// # Features the mock lacks
//
// It answers like a Triton built without them: CudaSharedMemoryStatus lists no
// regions (NOT_FOUND for a name), CudaSharedMemoryRegister is UNIMPLEMENTED,
// CudaSharedMemoryUnregister succeeds; RepositoryIndex lists the models as READY and
// RepositoryModelLoad/Unload are UNIMPLEMENTED (the models come from the config);
// TraceSetting and LogSettings are UNIMPLEMENTED. grpc.health.v1 reports SERVING for
// "" and "inference.GRPCInferenceService" until the server stops.
package mockbackend
