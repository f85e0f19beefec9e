package shmring

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ServerConfig controls what vig accepts from ring clients.
type ServerConfig struct {
	// AllowUnsealed accepts /dev/shm regions, which cannot be sealed. Accesses
	// to them are fault-guarded; a truncated one is quarantined.
	AllowUnsealed bool
	// AllowShmKey accepts /dev/shm regions that stay linked under a key (hello
	// kind 3), even where AllowUnsealed is off: a backend that maps Triton system
	// shared memory can then read the client's frames in place (Conn.Key). They
	// are unsealed, so they are fault-guarded like any /dev/shm region, and the
	// key is trusted only once the passed fd is verified to be /dev/shm/<key>.
	AllowShmKey bool
	// MaxRegionSize bounds a client's region; 0 means 2 GiB.
	MaxRegionSize uint64
	// Spin is how Recv spins before sleeping (SpinAdaptive by default).
	Spin Spin
	// HandshakeTimeout bounds a client's hello; 0 means 2 s.
	HandshakeTimeout time.Duration
	// Authorize, if set, may refuse a peer by its credentials.
	Authorize func(PeerCred) error
	// Logger receives connection events and protocol violations; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Listener accepts ring clients on a SOCK_SEQPACKET Unix socket.
type Listener struct {
	ln  *net.UnixListener
	cfg ServerConfig
	log *slog.Logger
}

// Listen listens on addr: "@name" is the abstract namespace, anything else a
// filesystem path. An empty addr tries DefaultAddress and falls back to
// FallbackAddress() where the abstract namespace is refused.
func Listen(addr string, cfg ServerConfig) (*Listener, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	try := []string{addr}
	if addr == "" {
		try = []string{DefaultAddress, FallbackAddress()}
	}
	var errs []error
	for _, a := range try {
		ln, err := listenUnix(a)
		if err == nil {
			return &Listener{ln: ln, cfg: cfg, log: cfg.Logger}, nil
		}
		errs = append(errs, wrapOp("listen", a, err))
	}
	return nil, errors.Join(errs...)
}

// listenUnix listens on a; a filesystem socket left behind by a vig that died
// (nobody accepts on it) is replaced.
func listenUnix(a string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unixpacket", unixAddr(a))
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || strings.HasPrefix(a, "@") {
		return ln, err
	}
	c, derr := net.DialUnix("unixpacket", nil, unixAddr(a))
	if derr == nil {
		c.Close()
		return nil, err // a live listener owns it
	}
	if st, serr := os.Lstat(a); serr != nil || st.Mode()&os.ModeSocket == 0 {
		return nil, err // not a socket: leave it alone
	}
	os.Remove(a)
	return net.ListenUnix("unixpacket", unixAddr(a))
}

// Addr is the address clients dial.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops accepting; established connections are unaffected.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits for a client and completes its handshake. Clients that fail
// the handshake are answered, logged and skipped; Accept returns an error
// only when the listener itself fails.
func (l *Listener) Accept() (*Conn, error) {
	for {
		uc, err := l.ln.AcceptUnix()
		if err != nil {
			return nil, err
		}
		c, err := l.handshake(uc)
		if err != nil {
			uc.Close()
			continue
		}
		return c, nil
	}
}

func (l *Listener) handshake(uc *net.UnixConn) (*Conn, error) {
	peer, err := peerCred(uc)
	log := l.log.With("pid", peer.PID, "uid", peer.UID)
	if err != nil {
		log.Warn("shmring: refusing client: SO_PEERCRED", "err", err)
		return nil, err
	}
	refuse := func(st HandshakeStatus, err error) (*Conn, error) {
		log.Warn("shmring: refusing client", "status", st.String(), "err", err)
		uc.SetWriteDeadline(time.Now().Add(l.cfg.HandshakeTimeout))
		uc.Write(encodeReply(st, err.Error())) // best effort: the peer may be gone
		return nil, err
	}
	uc.SetReadDeadline(time.Now().Add(l.cfg.HandshakeTimeout))
	buf := make([]byte, helloSize+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		log.Warn("shmring: refusing client: reading hello", "err", err)
		return nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	// Policy is applied after the hello is read, so the refused client gets
	// the reason instead of a broken pipe.
	if l.cfg.Authorize != nil {
		if err := l.cfg.Authorize(peer); err != nil {
			return refuse(HandshakeNotAllowed, err)
		}
	}
	switch {
	case flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0:
		return refuse(HandshakeBadHello, errors.New("hello or its control data truncated"))
	case ferr != nil:
		return refuse(HandshakeBadHello, ferr)
	}
	h, err := decodeHello(buf[:n])
	switch {
	case errors.Is(err, ErrVersion):
		return refuse(HandshakeVersion, err)
	case err != nil:
		return refuse(HandshakeBadHello, err)
	case len(fds) != 1:
		return refuse(HandshakeBadHello, fmt.Errorf("hello carries %d file descriptors, want 1", len(fds)))
	}
	fd := fds[0]
	fds[0] = -1 // OpenRegion owns it now
	allow := l.cfg.AllowUnsealed || h.kind == handshakeKindK && l.cfg.AllowShmKey
	region, err := OpenRegion(fd, OpenOptions{AllowUnsealed: allow, MaxSize: l.cfg.MaxRegionSize})
	if err == nil && h.kind == handshakeKindK {
		// The key is the client's claim; the fd is what it handed over. Only when
		// both are the same object may a backend be told to open the key.
		if kerr := sameObject(region.Fd(), h.key); kerr != nil {
			region.Close()
			return refuse(HandshakeBadRegion, kerr)
		}
		region.key, region.backend = h.key, BackendShmKey
	}
	switch {
	case errors.Is(err, ErrUnsealed):
		return refuse(HandshakeUnsealed, err)
	case err != nil:
		return refuse(HandshakeBadRegion, err)
	case h.kind == handshakeKindM && !region.Sealed():
		region.Close()
		return refuse(HandshakeUnsealed, fmt.Errorf("%w: announced as a sealed memfd", ErrUnsealed))
	case h.regionSize != region.layout.RegionSize:
		region.Close()
		return refuse(HandshakeBadRegion, fmt.Errorf("hello says %d bytes, header %d", h.regionSize, region.layout.RegionSize))
	}
	bellFds, err := newBellFds()
	if err != nil {
		region.Close()
		return refuse(HandshakeBadRegion, err) // not the client's fault, but it is told
	}
	uc.SetReadDeadline(time.Time{})
	uc.SetWriteDeadline(time.Now().Add(l.cfg.HandshakeTimeout))
	// The kernel puts copies of the doorbells into the client; vig keeps its own.
	if _, _, err := uc.WriteMsgUnix(encodeReply(HandshakeOK, ""), unix.UnixRights(bellFds[:]...), nil); err != nil {
		for _, fd := range bellFds {
			unix.Close(fd)
		}
		region.Close()
		log.Warn("shmring: client left during handshake", "err", err)
		return nil, err
	}
	uc.SetWriteDeadline(time.Time{})
	bells, err := adoptBells(bellFds[:], vigWaits)
	if err != nil {
		region.Close()
		log.Warn("shmring: doorbells", "err", err)
		return nil, err
	}
	c := newConn(region, uc, peer, log, l.cfg.Spin, bells)
	log.Info("shmring: client connected", "gid", peer.GID, "backend", region.Backend().String(),
		"sealed", region.Sealed(), "key", region.key, "region_bytes", region.layout.RegionSize,
		"request_slots", region.layout.Rings[RequestRing].Slots, "slot_bytes", region.layout.Rings[RequestRing].SlotSize)
	return c, nil
}

// parseRights extracts every SCM_RIGHTS descriptor so that all of them get
// closed, even ones the protocol does not want.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		f, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("SCM_RIGHTS: %w", err)
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// Conn is vig's side of one client session: requests come in on the request
// ring, responses go out on the response ring.
//
// Recv must be called from one goroutine at a time; Respond and Release may be
// called from any goroutine.
type Conn struct {
	ep   *endpoint
	reqs *Receiver
	resp *Sender
	mu   sync.Mutex // serializes the response Sender
	// extra holds the regions the client added (AddRegion); the socket
	// watcher fills it.
	extra extraRegions

	badMsgs atomic.Uint64
}

func newConn(region *Region, uc *net.UnixConn, peer PeerCred, log *slog.Logger, spin Spin, bells [numBells]*bell) *Conn {
	c := &Conn{ep: newEndpoint(region, uc, peer, log, bells)}
	c.reqs = newReceiver(region, RequestRing, &c.ep.closed, bells[bellRequestReady], bells[bellRequestSpace])
	c.resp = newSender(region, ResponseRing, &c.ep.closed, bells[bellResponseReady], nil)
	c.reqs.SetSpin(spin)
	c.extra.init()
	go c.ep.watch(func() { c.Close() }, c.extra.handle)
	return c
}

// Peer is the client's pid/uid/gid from SO_PEERCRED.
func (c *Conn) Peer() PeerCred { return c.ep.peer }

// Sealed reports whether the client's region is sealed. Payload views of an
// unsealed (/dev/shm) region may fault if the client truncates it; read them
// only under Guard or copy them with CopyPayload.
func (c *Conn) Sealed() bool { return c.ep.region.Sealed() }

// Key is the /dev/shm key under which the client's region can be opened by
// another process (shm_open(key)), verified at the handshake to name the very
// object the client handed over; "" for memfd and unlinked regions.
func (c *Conn) Key() string { return c.ep.region.key }

// Done is closed when the session ends.
func (c *Conn) Done() <-chan struct{} { return c.ep.done }

// RegionFd is the descriptor of the client's region, valid while the session
// or a held request keeps the mapping; with Sealed, a peer may be handed it
// (Session.AddRegion) to read requests' payloads in place.
func (c *Conn) RegionFd() int { return c.ep.region.Fd() }

// Layout is the client's region geometry.
func (c *Conn) Layout() Layout { return c.ep.region.layout }

// Guard runs f with faults on this client's mapping turned into ErrQuarantined.
func (c *Conn) Guard(f func() error) error { return c.ep.guard(f) }

// BadMessages counts descriptors that failed validation.
func (c *Conn) BadMessages() uint64 { return c.badMsgs.Load() }

// Request is one request received from a ring. Its payload is a view into the
// client's region, valid until the request is responded to or released.
// Request values are reused by Recv to avoid allocation.
type Request struct {
	Descriptor
	c    *Conn
	held atomic.Bool
	x    *extraRegion // the extra region its payload lies in, while held
}

// Payload is the request's bytes, in place in the client's region.
func (r *Request) Payload() []byte {
	if !r.held.Load() {
		return nil
	}
	if r.x != nil {
		return r.x.mem[r.PayloadOff : r.PayloadOff+r.PayloadLen : r.PayloadOff+r.PayloadLen]
	}
	return r.c.reqs.Payload(&r.Descriptor)
}

// CopyPayload copies the payload into dst under the fault guard, for
// unsealed regions; it returns the number of bytes copied.
func (r *Request) CopyPayload(dst []byte) (n int, err error) {
	if !r.held.Load() {
		return 0, nil
	}
	if r.x != nil { // a sealed memfd: nothing to guard
		return copy(dst, r.Payload()), nil
	}
	err = r.c.ep.guard(func() error { n = copy(dst, r.c.reqs.Payload(&r.Descriptor)); return nil })
	return n, err
}

// Recv waits for the next valid request. Malformed descriptors are answered
// with StatusInvalid and logged; they are not returned. Recv returns
// ErrClosed when the session ends, ErrCorrupt or ErrQuarantined when the
// client broke the ring (the session is then closed).
func (c *Conn) Recv(req *Request) error {
	if req.held.Load() {
		return errors.New("shmring: Recv into a Request whose payload is still held; Respond or Release it first")
	}
	if err := c.ep.acquire(); err != nil {
		return err
	}
	defer c.ep.release()
	for {
		err := c.ep.guard(func() error { return c.reqs.Next(&req.Descriptor) })
		switch {
		case err == nil && req.Region != 0:
			x, xerr := c.extra.get(req.Region, req.RegionGen, c.ep.done)
			if errors.Is(xerr, ErrClosed) {
				return ErrClosed
			}
			if xerr == nil && (req.PayloadOff > uint64(len(x.mem)) || req.PayloadLen > uint64(len(x.mem))-req.PayloadOff) {
				x.release()
				xerr = badDesc("payload %d+%d past extra region %d (%d B)", req.PayloadOff, req.PayloadLen, req.Region, len(x.mem))
			}
			if xerr != nil {
				req.Region, req.RegionGen, req.PayloadOff, req.PayloadLen, req.NumTensors = 0, 0, 0, 0, 0
				c.reject(req, xerr)
				continue
			}
			req.c, req.x = c, x
			c.ep.pin()
			req.held.Store(true)
			return nil
		case err == nil:
			req.c = c
			if req.Slot != NoSlot {
				c.ep.pin() // the payload view keeps the mapping alive
				req.held.Store(true)
			}
			return nil
		case errors.Is(err, ErrBadDescriptor):
			c.reject(req, err)
			continue
		case errors.Is(err, ErrClosed):
			return ErrClosed
		}
		c.disconnect(err)
		return err
	}
}

// reject answers a malformed request; logging is bounded so a hostile client
// cannot flood the log.
func (c *Conn) reject(req *Request, err error) {
	n := c.badMsgs.Add(1)
	if n <= 10 || n%1000 == 0 {
		c.ep.log.Warn("shmring: rejecting malformed request", "pid", c.ep.peer.PID, "uid", c.ep.peer.UID,
			"tag", req.Tag, "count", n, "reason", err)
	}
	d := Descriptor{Tag: req.Tag, Slot: NoSlot, Status: StatusInvalid, Message: truncUTF8(err.Error(), MaxMessageLen)}
	c.mu.Lock()
	perr := c.ep.guard(func() error { return c.resp.TryPost(&d) })
	c.mu.Unlock()
	if perr != nil && !errors.Is(perr, ErrClosed) {
		c.ep.log.Warn("shmring: cannot answer malformed request", "pid", c.ep.peer.PID, "err", perr)
	}
}

// Release returns the request's payload slot to the client early, once vig
// no longer needs the bytes. Respond releases it too; releasing twice is a
// no-op.
func (c *Conn) Release(req *Request) {
	if req.c != c || !req.held.CompareAndSwap(true, false) {
		return
	}
	if x := req.x; x != nil { // nothing to return to the client's ring
		req.x = nil
		x.release()
	} else {
		c.ep.guard(func() error { c.reqs.Release(req.Slot); return nil })
	}
	c.ep.release()
}

// Response is what vig answers to a request.
type Response struct {
	Status     Status
	Message    string // truncated to MaxMessageLen
	NumTensors int
	// Tensors describe the payload: one record per output tensor (name,
	// datatype, shape, and where its bytes lie in the payload).
	Tensors [MaxTensors]Tensor
	// Payload is copied into a response slot at offset 0 (results arrive from
	// the backend in vig's heap, so this is their one copy).
	Payload []byte
	// Chunks are copied into the same slot at their offsets, after Payload: a
	// result whose tensors lie in several of the backend's buffers is written
	// without being joined first.
	Chunks []Chunk
}

// Chunk is Data to be written at Off in a response payload.
type Chunk struct {
	Off  uint64
	Data []byte
}

// payloadLen is the size of the response payload: the end of its last byte.
func (res *Response) payloadLen() uint64 {
	n := uint64(len(res.Payload))
	for _, c := range res.Chunks {
		n = max(n, c.Off+uint64(len(c.Data)))
	}
	return n
}

// ErrTooLarge is wrapped by Respond when a result does not fit the client's
// response slots; the client is then answered StatusExhausted instead.
var ErrTooLarge = errors.New("shmring: result larger than a response slot")

// Respond posts the response to req without waiting and releases req's
// payload. It returns ErrFull when the client has left no response
// descriptor or slot free (a client that does not consume its responses);
// the response is then dropped. A result larger than the client's response
// slots is answered StatusExhausted, naming the sizes, and reported as
// ErrTooLarge.
func (c *Conn) Respond(req *Request, res *Response) error {
	defer c.Release(req)
	if err := c.ep.acquire(); err != nil {
		return err
	}
	defer c.ep.release()
	d := Descriptor{
		Tag: req.Tag, Frame: req.Frame, CaptureNs: req.CaptureNs, Slot: NoSlot, Status: res.Status,
		Stream: req.Stream, Model: req.Model, Message: truncUTF8(res.Message, MaxMessageLen),
		NumTensors: res.NumTensors, Tensors: res.Tensors,
	}
	n := res.payloadLen()
	var tooLarge error
	if n > uint64(c.resp.SlotSize()) {
		tooLarge = fmt.Errorf("%w: %d bytes, the client's response slots hold %d", ErrTooLarge, n, c.resp.SlotSize())
		d = Descriptor{Tag: req.Tag, Frame: req.Frame, CaptureNs: req.CaptureNs, Slot: NoSlot, Status: StatusExhausted,
			Stream: req.Stream, Model: req.Model,
			Message: truncUTF8(fmt.Sprintf("result of %d bytes > %d-byte response slots: raise Responses.SlotSize", n, c.resp.SlotSize()), MaxMessageLen)}
		n = 0
	}
	c.mu.Lock()
	err := c.ep.guard(func() error {
		// Check the ring before taking a slot, so a corrupt consumer counter
		// is reported as such rather than as a full ring.
		if ok, err := c.resp.space(); err != nil || !ok {
			if err == nil {
				err = ErrFull
			}
			return err
		}
		if n > 0 {
			slot, buf, err := c.resp.TryLoan()
			if err != nil {
				return err
			}
			copy(buf, res.Payload)
			for _, ch := range res.Chunks {
				copy(buf[ch.Off:], ch.Data)
			}
			d.Slot, d.PayloadLen = slot, n
			if err := c.resp.TryPost(&d); err != nil {
				c.resp.Unloan(slot)
				return err
			}
			return nil
		}
		return c.resp.TryPost(&d)
	})
	c.mu.Unlock()
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrQuarantined) {
		c.disconnect(err)
	}
	if err == nil {
		err = tooLarge
	}
	return err
}

// disconnect ends a session whose client broke the protocol, saying why.
func (c *Conn) disconnect(reason error) {
	c.ep.log.Warn("shmring: disconnecting client", "pid", c.ep.peer.PID, "uid", c.ep.peer.UID,
		"reason", reason, "fault_addr", fmt.Sprintf("%#x", c.ep.region.FaultAddr()))
	c.Close()
}

// Close ends the session. Payload views of requests not yet released stay
// mapped until they are released.
func (c *Conn) Close() error {
	err := c.ep.shutdown()
	c.extra.close()
	return err
}
