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
// vig's side (the ring frontend of vig serve):
//
//	l, err := shmring.Listen("", shmring.ServerConfig{AllowUnsealed: !memfdOK})
//	for {
//		c, err := l.Accept()          // handshake done, peer credentials logged
//		go func() {
//			var req shmring.Request     // reused: Recv does not allocate
//			for c.Recv(&req) == nil {   // spins briefly, then sleeps on the futex
//				// req.Stream, req.Model, req.Frame, req.CaptureNs, req.Tensors,
//				// req.Payload(): the frame, in place in the client's memory.
//				c.Respond(&req, &shmring.Response{Status: shmring.StatusOK, Payload: out})
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
// shmring/client.
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
// only when its options allow them, touches them only from code running under
// debug.SetPanicOnFault, and quarantines a region that faulted. The payload
// bytes themselves stay writable by the client while vig reads them; a client
// that overwrites a frame it has posted only corrupts its own result.
//
// # Handshake
//
// The client connects to vig's SOCK_SEQPACKET Unix socket (abstract namespace
// "@name" where allowed, a filesystem path otherwise) and sends one 64-byte hello
// message carrying the region's file descriptor in SCM_RIGHTS:
//
//	off size field
//	  0    8 magic       0x4f4c4c4548474956 ("VIGHELLO" little-endian)
//	  8    4 version     ProtocolVersion (1)
//	 12    4 kind        1 = sealed memfd, 2 = /dev/shm file
//	 16    8 region size bytes, equal to the header's region size
//	 24   40 reserved    zero
//
// vig reads the peer's pid/uid/gid with SO_PEERCRED, validates the fd and the
// region header, and answers with one message:
//
//	 0    8 magic       0x5945524748474956 ("VIGHGREY" little-endian)
//	 8    4 version     vig's ProtocolVersion
//	12    4 status      0 = accepted, otherwise a HandshakeStatus code
//	16    n reason      UTF-8 text, at most 240 bytes, explaining a refusal
//
// After an accepted handshake the socket carries no data; it stays open as the
// liveness signal of both sides. Either side closing it (or dying) ends the
// session: the other side wakes from any futex wait and sees ErrClosed.
//
// # Region layout (ABI version 1)
//
// All integers are little-endian (vig runs on amd64 and arm64, both little
// endian). All offsets are from the start of the region. Every atomic word is
// naturally aligned (8-byte words at offsets ≡ 0 mod 8), and the layout does not
// depend on the architecture. Sizes: HeaderSize = 4096, DescriptorSize = 1024,
// CacheLine = 128 (the largest destructive-interference size of the supported
// CPUs; Apple and some ARM cores use 128-byte lines).
//
// Header, at offset 0 (the rest of the 4096-byte header page is reserved, zero):
//
//	off size field
//	  0    8 magic          0x31474e4952474956 ("VIGRING1" little-endian)
//	  8    4 version        ProtocolVersion (1)
//	 12    4 flags          bit 0: memfd-backed (informational); other bits zero
//	 16    8 region size    total bytes; the fd must be at least this large
//	 24    4 header size    4096
//	 28    4 desc size      1024
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
//	256    4 ready seq      futex word the consumer sleeps on (line 2)
//	260    4 ready waiters  number of consumers asleep or about to sleep on it
//	384    4 space seq      futex word the producer sleeps on when the ring is
//	                        full or no payload slot is free (line 3)
//	388    4 space waiters  number of producers asleep or about to sleep on it
//	512  4*n slot state     one uint32 per payload slot: 0 = free (the producer
//	                        may loan it), 1 = in use (loaned, posted, or held by
//	                        the consumer); padded to a multiple of 128 bytes
//	  D 1024*m descriptors  m = desc count; D = 512 + roundup(4*slot count, 128)
//
// The control block's size is rounded up to 4096. The layout is:
// header | ring[0] control | ring[1] control | ring[0] arena | ring[1] arena, each
// arena being slot count × slot size bytes. Region size is the end of ring[1]'s
// arena.
//
// Counters are 64-bit and never wrap in practice; descriptor i lives at index
// i mod desc count. The producer may post only while head - tail < desc count;
// the consumer may read only while tail < head. A consumer that observes
// head - tail > desc count, or a producer that observes tail > head or
// head - tail > desc count, has met a corrupt peer and disconnects it.
//
// Posting (producer): write the descriptor at head mod desc count; atomically
// store head+1 (release); then, only if ready waiters is non-zero, atomically
// add 1 to ready seq and FUTEX_WAKE it (shared futex, no FUTEX_PRIVATE_FLAG).
// Consuming: load head (acquire); copy the descriptor out; atomically store
// tail+1; then, only if space waiters is non-zero, add 1 to space seq and wake
// it. Returning a payload slot: atomically store 0 into its state word, then wake
// space waiters the same way. Sleeping (either side): atomically increment the
// waiters word; load the seq word; re-check the condition (head for a consumer,
// tail and the slot states for a producer); if still unmet, FUTEX_WAIT on seq
// with the loaded value; on wake-up, re-check; finally decrement waiters. All of
// these atomics must be sequentially consistent (C11 memory_order_seq_cst; Go's
// sync/atomic): that is what makes the "skip the wake when waiters is zero"
// rule free of lost wake-ups, since either the sleeper sees the new counter or
// the waker sees the sleeper. A side that closes the session bumps every seq
// word and wakes it unconditionally.
//
// Descriptor, 1024 bytes (at ring offset + D + 1024*(i mod desc count)):
//
//	off size field
//	  0    8 tag           chosen by the client, echoed in the response
//	  8    8 frame         frame number
//	 16    8 capture ns    capture time of the frame, int64 nanoseconds
//	 24    4 payload slot  index into the ring's arena, or 0xffffffff: no payload
//	 28    4 status        requests: 0; responses: a Status code
//	 32    8 payload off   offset of the payload inside its slot
//	 40    8 payload len   payload length; off+len ≤ slot size
//	 48    1 stream len    ≤ 56
//	 49    1 model len     ≤ 64
//	 50    1 tensor count  ≤ 6
//	 51    1 message len   ≤ 80
//	 52    4 flags         reserved, zero
//	 56   56 stream        stream name (UTF-8, not terminated)
//	112   64 model         model name
//	176   80 message       responses: error text for a non-OK status
//	256  768 tensors       6 tensor records of 128 bytes
//
// Tensor record, 128 bytes:
//
//	off size field
//	  0    8 data off      offset of the tensor's bytes inside the payload
//	  8    8 data len      length; data off + data len ≤ payload len
//	 16    1 name len      ≤ 32
//	 17    1 datatype len  ≤ 8 (Triton datatype, e.g. "UINT8", "FP32")
//	 18    1 rank          ≤ 8
//	 19    5 reserved      zero
//	 24   32 name
//	 56    8 datatype
//	 64   64 shape         8 int64 dimensions, each ≥ 0; the first rank are used
//
// A request's payload slot stays in use until vig has answered it: vig returns
// the slot (stores 0 into its state word) after the response descriptor is
// posted, or earlier when it has finished reading the payload. A response's
// payload slot is returned by the client after it has read the result.
package shmring
