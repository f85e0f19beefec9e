// Package shmring is vig's lock-free shared-memory ring: the zero-copy data path
// between co-located sensor processes and vig.
//
// A client (a sensor program) creates one region per connection, maps it, seals
// it and hands its file descriptor to vig over a Unix socket. The region holds two
// single-producer/single-consumer rings: requests (client → vig) and responses
// (vig → client). Each ring is a power-of-two array of fixed-size descriptors plus
// an arena of fixed-size payload slots. The producer of a ring loans a payload
// slot, writes the frame into it once, and posts a descriptor that points at it;
// the consumer reads the frame in place and returns the slot when done. Nothing
// is copied, so the cost of a message does not grow with its size.
//
// # Using it
//
// vig's side (the ring frontend of vig serve, package agent/gateway/ringfront,
// and the ring runtime side of package agent/gateway/ringback's peer):
//
//	l, err := shmring.Listen("", shmring.ServerConfig{AllowUnsealed: !memfdOK})
//	for {
//		c, err := l.Accept()          // handshake done, peer credentials logged
//		go func() {
//			var req shmring.Request     // reused: Recv does not allocate
//			for c.Recv(&req) == nil {   // spins briefly, then sleeps on its doorbell
//				// req.Stream, req.Model, req.Frame, req.CaptureNs, req.Tensors,
//				// req.Payload(): the frame, in place in the client's memory.
//				res := shmring.Response{Status: shmring.StatusOK, NumTensors: 1, Payload: out}
//				res.Tensors[0] = shmring.Tensor{Name: "OUTPUT0", Datatype: "UINT8", Rank: 1, Dims: [8]int64{int64(len(out))}, Length: uint64(len(out))}
//				c.Respond(&req, &res)
//			}
//		}()
//	}
//
// A Request holds its payload slot until it is answered, and Recv refuses a
// Request that still holds one: to answer asynchronously (through the
// scheduler), Recv into Requests taken from a pool sized by the client's slot
// and descriptor counts (Conn.Layout).
//
// Respond never blocks the caller (a client that does not consume its results
// gets ErrFull); it may be called from any goroutine, e.g. the one completing
// the backend call. A request that is dropped without an answer must still be
// released (Conn.Release) so its slot returns to the client. Probe reports
// which backend this machine supports (for doctor). The sensor side is package
// shmring/client in Go, the single header shmring/c/vigring.h in C and C++, and
// shmring/python/vigring.py (standard library only) in Python. This package is the protocol only; it imports nothing of vig's
// gateway.
//
// # Trust
//
// vig does not trust the client. Every counter, index, offset and length read
// from the shared mapping is bounds-checked before use; descriptors are copied out
// of the mapping before they are decoded, so the peer cannot change a field
// between its check and its use. A violation fails the message (a bad
// descriptor: the client gets StatusInvalid) or disconnects the peer (a counter
// out of range), with the reason logged. Memfd regions must carry the seals
// F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL (checked with F_GET_SEALS); an unsealed
// memfd is refused. A /dev/shm file cannot be sealed and can be truncated by its
// owner at any time, which turns accesses into SIGBUS: vig accepts such regions
// only when its options allow them (AllowUnsealed; AllowShmKey for keyed ones),
// touches them only from code running under debug.SetPanicOnFault, and
// quarantines a region that faulted. A key in the hello is trusted only after
// vig has checked that /dev/shm/<key> is the very file the client handed over. The payload
// bytes themselves stay writable by the client while vig reads them; a client
// that overwrites a frame it has posted only corrupts its own result.
//
// # Handshake (ABI version 3)
//
// The client connects to vig's SOCK_SEQPACKET Unix socket (abstract namespace
// "@name" where allowed, a filesystem path otherwise) and sends one 128-byte hello
// message carrying the region's file descriptor in SCM_RIGHTS. An abstract name
// is sun_path = a zero byte followed by the bytes after '@', and the address
// length covers exactly those bytes (offsetof(sun_path) + 1 + len(name)): no
// terminating zero, no padding, as Go and Python pass it. A C client that passes
// sizeof(struct sockaddr_un) names another socket (ECONNREFUSED).
//
//	off size field
//	  0    8 magic       0x4f4c4c4548474956 ("VIGHELLO" little-endian)
//	  8    4 version     ProtocolVersion (3)
//	 12    4 kind        1 = sealed memfd
//	                     2 = /dev/shm file, unlinked
//	                     3 = /dev/shm file that stays linked under key
//	 16    8 region size bytes, equal to the header's region size
//	 24    1 key length  0 for kinds 1 and 2; 2..96 for kind 3
//	 25    7 reserved    zero
//	 32   96 key         kind 3: the file's shm_open name, e.g. "/vig-ring-0123abcd",
//	                     not terminated; the bytes after it are zero
//
// A key is '/' followed by 1 to 95 bytes of [A-Za-z0-9._-] ("/." and "/.." are
// refused): what shm_open and Triton's system shared memory accept. vig opens
// nothing by the key; it checks that /dev/shm/<key without the '/'> is a regular
// file (lstat: no symlink followed) with the same device and inode as the passed
// fd, and refuses the hello (status 4) otherwise. A kind-3 region is an unsealed
// /dev/shm region in every other respect. The client unlinks the file when it
// closes the region.
//
// vig reads the peer's pid/uid/gid with SO_PEERCRED, validates the fd and the
// region header, and answers with one message:
//
//	 0    8 magic       0x5945524748474956 ("VIGHGREY" little-endian)
//	 8    4 version     vig's ProtocolVersion (3)
//	12    4 status      0 = accepted, otherwise a HandshakeStatus code:
//	                    1 bad hello, 2 version mismatch, 3 unsealed region,
//	                    4 bad region, 5 not allowed
//	16    n reason      UTF-8 text, at most 240 bytes, explaining a refusal
//
// An accepted reply (status 0) carries, in one SCM_RIGHTS control message,
// exactly three file descriptors: the session's doorbells, eventfds vig created
// for it (counting, not EFD_SEMAPHORE), in this order:
//
//	fd 0  request ready   the client rings it; vig waits on it (request ring, ready waiters)
//	fd 1  request space   vig rings it; the client waits on it (request ring, space waiters)
//	fd 2  response ready  vig rings it; the client waits on it (response ring, ready waiters)
//
// A refusal carries none. A client closes any descriptors that came with a
// refusal, and refuses an acceptance without exactly three (the Go, C and
// Python clients say "not a ring ABI version 3 vig"). Nobody waits for room in
// the response ring (vig never does, see below), so it has no doorbell and its
// space waiters word stays zero.
//
// vig reads the magic and the version before anything else: a hello of another
// version (a version-1 client sends 64 bytes, a version-2 one 128) is answered
// with status 2, vig's version in the version field, and a reason naming both
// versions ("the client speaks ring ABI version 2, vig speaks version 3: update
// the client library to ABI version 3").
//
// After an accepted handshake the socket carries no data; it stays open as the
// liveness signal of both sides. Either side closing it (or dying) ends the
// session. A sleeping side waits for its doorbell and the socket together (the
// C and Python clients in one poll(2) on both; the Go sides park each in Go's
// netpoller), so the peer's end wakes it without the peer's help: a dead
// process rings nobody.
//
// # Region layout (ABI version 3, the same bytes as version 2)
//
// All integers are little-endian (vig runs on amd64 and arm64, both little
// endian). All offsets are from the start of the region. Every atomic word is
// naturally aligned (8-byte words at offsets ≡ 0 mod 8), and the layout does not
// depend on the architecture. Sizes: HeaderSize = 4096, DescriptorSize = 4096,
// CacheLine = 128 (the largest destructive-interference size of the supported
// CPUs; Apple and some ARM cores use 128-byte lines).
//
// Header, at offset 0 (the rest of the 4096-byte header page is reserved, zero):
//
//	off size field
//	  0    8 magic          0x31474e4952474956 ("VIGRING1" little-endian)
//	  8    4 version        ProtocolVersion (3)
//	 12    4 flags          bit 0: memfd-backed (informational); other bits zero
//	 16    8 region size    total bytes; the fd must be at least this large
//	 24    4 header size    4096
//	 28    4 desc size      4096
//	 32   32 ring[0]        the request ring (client produces, vig consumes)
//	 64   32 ring[1]        the response ring (vig produces, client consumes)
//
// Each ring entry of the header:
//
//	off size field
//	  0    4 desc count     number of descriptors, a power of two in [2, 4096]
//	  4    4 slot count     number of payload slots, in [1, 1024]
//	  8    8 slot size      bytes per payload slot, a multiple of 4096, ≤ 1 GiB
//	 16    8 ring offset    where the ring's control block starts
//	 24    8 arena offset   where the ring's payload arena starts
//
// The offsets are not free: a receiver recomputes them from the counts and sizes
// (see below) and refuses a header whose offsets or region size differ.
//
// Ring control block, at ring offset (each line 128 bytes):
//
//	off size field
//	  0    8 head           producer counter: descriptors posted so far (line 0)
//	128    8 tail           consumer counter: descriptors consumed so far (line 1)
//	256    4 reserved       zero (version 2's futex word) (line 2)
//	260    4 ready waiters  number of consumers asleep or about to sleep on
//	                        the ring's ready doorbell
//	384    4 reserved       zero (version 2's futex word) (line 3)
//	388    4 space waiters  number of producers asleep or about to sleep on
//	                        the ring's space doorbell (the ring is full or no
//	                        payload slot is free)
//	512  4*n slot state     one uint32 per payload slot: 0 = free (the producer
//	                        may loan it), 1 = in use (loaned, posted, or held by
//	                        the consumer); padded to a multiple of 128 bytes
//	  D 4096*m descriptors  m = desc count; D = 512 + roundup(4*slot count, 128)
//
// The control block's size is rounded up to 4096. The layout is:
// header | ring[0] control | ring[1] control | ring[0] arena | ring[1] arena, each
// arena being slot count × slot size bytes, slot i at arena offset + i × slot
// size. Region size is the end of ring[1]'s arena. Example (ring[0]: 16
// descriptors, 4 slots of 4096; ring[1]: 8 descriptors, 40 slots of 8192):
// ring offsets 4096 and 73728, descriptors at 4736 and 74496, arenas at 110592
// and 126976, region size 454656.
//
// Counters are 64-bit and never wrap in practice; descriptor i lives at index
// i mod desc count. The producer may post only while head - tail < desc count;
// the consumer may read only while tail < head. A consumer that observes
// head - tail > desc count, or a producer that observes tail > head or
// head - tail > desc count, has met a corrupt peer and disconnects it.
//
// Ringing a doorbell is writing the 8-byte little-endian integer 1 to its
// eventfd (EAGAIN, a full counter, means it is readable already: ignore it).
// Posting (producer): write the descriptor at head mod desc count; atomically
// store head+1 (release); then, only if ready waiters is non-zero, ring the
// ring's ready doorbell. Consuming: load head (acquire); copy the descriptor
// out; atomically store tail+1; then, only if space waiters is non-zero, ring
// the ring's space doorbell. Returning a payload slot: atomically store 0 into
// its state word, then ring space the same way (the response ring has no space
// doorbell: nothing to ring). Sleeping (either side): atomically increment the
// waiters word; re-check the condition (head for a consumer, tail and the slot
// states for a producer); if still unmet, wait until the doorbell is readable
// (poll/epoll, together with the session socket), read its 8 bytes to reset it
// (EAGAIN: someone else did), re-check, and so on; finally decrement waiters.
// An eventfd keeps a ring until it is read, so a ring that comes between the
// re-check and the wait is not lost; a stale ring costs one spurious re-check.
// A waiter on an edge-triggered poller (vig and shmring/client, in Go's
// netpoller) may skip the read: eventfd signals every write as a new edge, so
// it re-checks after the poller has forgotten earlier edges and then waits
// for the next one, and the counter just grows (2^64 rings). Each side
// registers with its poller only the doorbells it waits on: a peer's read
// of a doorbell this side rings makes it writable (EPOLLOUT), which would
// wake a poller that asked for that for nothing.
// All of these atomics must be sequentially consistent (C11
// memory_order_seq_cst or GCC's __atomic builtins with __ATOMIC_SEQ_CST; Go's
// sync/atomic): that is what makes the "skip the ring when waiters is zero"
// rule free of lost wake-ups, since either the sleeper sees the new counter or
// the waker sees the sleeper. A language without atomic instructions (Python)
// can do the read-modify-writes in the kernel (FUTEX_WAKE_OP with FUTEX_OP_ADD
// is a fully ordered atomic add on a 32-bit word, used for the add alone) and
// needs a full barrier between a store of head, tail or a slot state and its
// load of the waiters word. At most one thread (goroutine) of a process waits
// on one doorbell at a time: that is what the clients' threading rules
// (loan/submit from one thread, next from one thread) give, since a reset by
// one sleeper would be a lost ring for another.
//
// Why doorbells and not futexes (version 2): a futex wait is a blocking
// system call, and in Go a blocking call wakes the runtime's monitor thread,
// which then polls in 20 µs naps until the process is idle again — a futex
// wake, nanosleeps and their context switches for every message, more than a
// gRPC request over TCP cost vig. An eventfd is waited on in the netpoller,
// where vig's sockets already wait, and rung with a non-blocking write. In one
// run on a loaded 2-vCPU VM (vig bench datapath, 64 B, docs/benchmarks.md), a ring request
// cost vig 382 µs and 26.6 context switches with futexes (memfd, version 2).
// With doorbells (docs/benchmarks.md's ring run, 2026-12-03, another host), a request
// by reference costs vig 452 µs, 2.8 context switches and 8 syscalls, where a
// gRPC request over TCP costs 510 µs, 2.9 and 10 (0.89×): what is left is the
// backend leg, gRPC over TCP on both rows, and the two wake-ups both share.
// With a ring on both legs (a memfd sensor, vig, a runtime behind it through
// package ringback, the frame read in place), a request costs vig 299 µs, 2.5
// context switches and 6 syscalls, 0.59× gRPC over TCP in the same run
// (bench/results/2026-12-03c-vm-datapath-ring).
//
// Descriptor, 4096 bytes (at ring offset + D + 4096*(i mod desc count)):
//
//	 off size field
//	   0    8 tag           chosen by the client, echoed in the response
//	   8    8 frame         frame number
//	  16    8 capture ns    capture time of the frame, int64 nanoseconds (0: none)
//	  24    4 payload slot  index into the ring's arena, or 0xffffffff: no payload;
//	                        with flags bit 0: the extra region's id (1..64) in
//	                        bits 0..7, its registration's generation in 8..31
//	  28    4 status        requests: 0; responses: a Status code
//	  32    8 payload off   offset of the payload inside its slot (flags bit 0:
//	                        inside the extra region)
//	  40    8 payload len   payload length; off+len ≤ slot size (region size);
//	                        both 0 without a slot
//	  48    1 stream len    ≤ 56
//	  49    1 model len     ≤ 64
//	  50    1 tensor count  ≤ 16
//	  51    1 message len   ≤ 80
//	  52    4 flags         bit 0: the payload lies in an extra region (see
//	                        Extra regions); other bits zero
//	  56   56 stream        stream name (UTF-8, not terminated)
//	 112   64 model         model name (UTF-8)
//	 176   80 message       responses: error text for a non-OK status (UTF-8)
//	 256 3072 tensors       16 tensor records of 192 bytes; those past the tensor
//	                        count are zero
//	3328  768 reserved      zero
//
// Tensor record, 192 bytes (record k at descriptor offset 256 + 192k):
//
//	off size field
//	  0    8 data off      offset of the tensor's bytes inside the payload
//	  8    8 data len      length; data off + data len ≤ payload len
//	 16    1 name len      ≤ 96
//	 17    1 datatype len  ≤ 8 (Triton datatype, e.g. "UINT8", "FP32", "INT32")
//	 18    1 rank          ≤ 8
//	 19    5 reserved      zero
//	 24    8 datatype      (UTF-8, not terminated)
//	 32   96 name          (UTF-8, not terminated)
//	128   64 shape         8 int64 dimensions, each ≥ 0; the first rank are used,
//	                       the others zero
//
// A receiver refuses a descriptor whose lengths exceed their fields, whose
// reserved bytes or flags are not zero, whose strings are not UTF-8, whose
// dimensions are negative, or whose tensors lie outside the payload; vig answers
// such a request with status 3 and a message, and the client skips such an answer.
//
// Status codes (the gRPC codes of the same number): 0 OK, 3 INVALID_ARGUMENT,
// 4 DEADLINE_EXCEEDED (the result would have been stale), 5 NOT_FOUND, 8
// RESOURCE_EXHAUSTED, 10 ABORTED (superseded by a newer frame of the stream), 12
// UNIMPLEMENTED, 13 INTERNAL, 14 UNAVAILABLE; any other gRPC code the backend
// answered with passes through with its number.
//
// # Extra regions (ABI version 3, optional)
//
// A client may hand the server further sealed memfds on the session socket
// and post request descriptors whose payload lies in one of them, by
// reference: flags bit 0 set, payload slot = the region's id, payload off and
// len inside that region, tensor records relative to the payload as usual.
// vig does this as the client of a ring runtime (package
// agent/gateway/ringback): a frame a sensor wrote into its own sealed memfd
// reaches the runtime without being copied into vig's region. The message,
// client to server, is one 64-byte SOCK_SEQPACKET message:
//
//	off size field
//	  0    8 magic       0x4e47455258474956 ("VIGXREGN" little-endian)
//	  8    4 op          1 = add (one fd in SCM_RIGHTS), 2 = drop (none)
//	 12    4 id          1..64, chosen by the client
//	 16    8 size        add: bytes to map from offset 0 (≥ 1); drop: 0
//	 24    4 generation  < 2^24, chosen by the client: add: the registration's;
//	                     drop: the one it ends
//	 28   36 reserved    zero
//
// The server maps an added region read-only. It must be a memfd carrying
// F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL and at least size bytes long; one that
// is not is kept as refused, and each descriptor naming it is answered status
// 3 with the reason. A malformed message, an add of an id in use (drop it
// first), a drop of an id not added or of another generation ends the
// session. The client sends an add before it posts any descriptor naming the
// registration, and a drop only once every descriptor naming it has been
// answered; the server unmaps a dropped region when its last request is
// released. Ids are the client's to reuse after a drop, each add with a new
// generation (vig counts them up, modulo 2^24). The server reads these
// messages and the ring's descriptors on two channels, so a descriptor may
// reach it before the add it follows, even before the drop of the id's
// previous registration: the server, meeting a generation it has not seen,
// waits for the socket's messages before judging it, and refuses (status 3) a
// generation older than the registered one. A descriptor naming an extra
// region uses no payload slot, so nothing returns to the ring's slot states
// when it is consumed or answered; the bytes stay the client's, and must not change until
// the answer, as with a slot. The server answers nothing on the socket; a
// server that does not know this extension refuses such descriptors (flags
// not zero: status 3).
//
// # Requests and results through vig
//
// A request names its model; its stream (empty: the model's name), frame number
// and capture time go to vig's scheduler, and the backend sees the request id
// "<stream>#<frame>". Its tensor records are the model's inputs, in order; a
// request with none has one input "INPUT0", "UINT8", shape [payload len], over
// the whole payload. A negative capture time or an empty model is refused with
// status 3.
//
// An OK result carries one tensor record per output of the model, in the order
// the backend answered them, with its name, datatype and shape; each output's
// bytes start at a payload offset that is a multiple of 64, and the payload ends
// with the last output's bytes (payload len = last data off + last data len). An
// output the backend answered without raw bytes (e.g. into its own shared memory)
// has data len 0. A non-OK result has no payload (slot 0xffffffff) and the reason
// in its message. A result larger than the client's response slots is answered
// with status 8 and the two sizes in the message: size the response slots for
// the model's largest answer.
//
// vig never waits for room in the response ring: an answer that finds no free
// response descriptor or payload slot is dropped (and logged), and its request is
// never answered. A client therefore keeps at most min(response desc count,
// response slot count) requests unanswered, and releases each result's slot
// promptly (shmring/client refuses a Submit beyond that with
// ErrTooManyOutstanding; the C and Python clients with VIGRING_EBUSY / Busy).
//
// # By reference (kind 3 regions)
//
// When the client's region is kind 3 and vig's backend speaks Triton's gRPC
// protocol, vig registers the request ring's payload arena with the backend once
// per session, as system shared memory: name "vig-ring-<vig's pid>-<n>", key the
// hello's key, offset the request ring's arena offset, byte_size slot count ×
// slot size. Each input k of a request is then forwarded as the parameters
// shared_memory_region = that name, shared_memory_offset = payload slot × slot
// size + payload off + data off, shared_memory_byte_size = data len: the backend
// reads the frame in place and no socket carries it. The region is bound to the
// client's uid in vig's registry (no other uid can use it through vig) and is
// unregistered when the session ends. A backend that refuses the registration,
// a ring runtime backend, or a region of kind 1 or 2 keeps the copy path; vig logs
// each session's path ("ring session" path=by_reference|copy, with the reason) and
// counts open sessions in the metric vig_ring_sessions{path}.
//
// A request's payload slot stays in use until vig has answered it: vig returns
// the slot (stores 0 into its state word) after the response descriptor is
// posted, or earlier when it has finished reading the payload. A response's
// payload slot is returned by the client after it has read the result. The
// client must not write into a slot it has posted until the slot is free again:
// on the by-reference path the backend reads it while the request runs.
package shmring
