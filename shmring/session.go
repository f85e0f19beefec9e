package shmring

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// DialOptions configures the client side of a session.
type DialOptions struct {
	Config  Config  // ring sizes; zero value means DefaultConfig
	Backend Backend // BackendAuto by default
	Spin    Spin    // how Next and Loan spin before sleeping
	Timeout time.Duration
	Logger  *slog.Logger
}

// Session is the client side of a ring session: it produces requests and
// consumes responses. The Sender and Receiver are exported for clients that
// manage slots themselves; shmring/client wraps them in a smaller API.
type Session struct {
	ep        *endpoint
	Requests  *Sender
	Responses *Receiver

	xgen  atomic.Uint32                      // the last extra-region generation handed out
	xgens [MaxExtraRegions + 1]atomic.Uint32 // each id's current generation
}

// Dial creates a region, connects to vig at addr (DefaultAddress when empty)
// and hands the region over.
func Dial(addr string, opts DialOptions) (*Session, error) {
	addr = addrString(addr)
	if opts.Config == (Config{}) {
		opts.Config = DefaultConfig
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultHandshakeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	region, err := CreateRegion(opts.Config, opts.Backend)
	if err != nil {
		return nil, err
	}
	s, err := handover(addr, region, opts)
	if err != nil {
		region.Close()
		return nil, err
	}
	return s, nil
}

// DialRegion is Dial with a region the caller created (for tests and for
// clients that size or back their region themselves). The session owns the
// region afterwards.
func DialRegion(addr string, region *Region, opts DialOptions) (*Session, error) {
	if opts.Timeout == 0 {
		opts.Timeout = defaultHandshakeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return handover(addrString(addr), region, opts)
}

func handover(addr string, region *Region, opts DialOptions) (*Session, error) {
	uc, err := net.DialUnix("unixpacket", nil, unixAddr(addr))
	if err != nil && addr == DefaultAddress {
		// vig falls back to a filesystem socket where the abstract
		// namespace is refused; follow it there.
		if fc, ferr := net.DialUnix("unixpacket", nil, unixAddr(FallbackAddress())); ferr == nil {
			uc, err = fc, nil
		}
	}
	if err != nil {
		return nil, wrapOp("dial", addr, err)
	}
	peer, err := peerCred(uc)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("shmring: SO_PEERCRED: %w", err)
	}
	kind := uint32(handshakeKindS)
	switch {
	case region.Sealed():
		kind = handshakeKindM
	case region.key != "":
		kind = handshakeKindK
	}
	uc.SetDeadline(time.Now().Add(opts.Timeout))
	h := hello{version: ProtocolVersion, kind: kind, regionSize: region.layout.RegionSize, key: region.key}
	if _, _, err := uc.WriteMsgUnix(h.encode(), unix.UnixRights(region.fd), nil); err != nil {
		uc.Close()
		return nil, wrapOp("hello to", addr, err)
	}
	buf := make([]byte, replyMaxSize+1)
	oob := make([]byte, unix.CmsgSpace(4*(numBells+1)))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		uc.Close()
		return nil, wrapOp("handshake reply from", addr, err)
	}
	fds, ferr := parseRights(oob[:oobn])
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if err := decodeReply(buf[:n]); err != nil {
		closeFds()
		uc.Close()
		return nil, err
	}
	if ferr == nil && (flags&unix.MSG_CTRUNC != 0 || len(fds) != numBells) {
		ferr = fmt.Errorf("the accepted reply carries %d file descriptors, want %d doorbells", len(fds), numBells)
	}
	if ferr != nil {
		closeFds()
		uc.Close()
		return nil, fmt.Errorf("shmring: handshake reply from %s: %w", addr, ferr)
	}
	bells, err := adoptBells(fds, clientWaits)
	if err != nil {
		uc.Close()
		return nil, err
	}
	uc.SetDeadline(time.Time{})
	ep := newEndpoint(region, uc, peer, opts.Logger, bells)
	s := &Session{ep: ep,
		Requests:  newSender(region, RequestRing, &ep.closed, bells[bellRequestReady], bells[bellRequestSpace]),
		Responses: newReceiver(region, ResponseRing, &ep.closed, bells[bellResponseReady], nil)}
	s.Requests.SetSpin(opts.Spin)
	s.Responses.SetSpin(opts.Spin)
	go ep.watch(func() { s.Close() }, nil)
	return s, nil
}

// Peer is vig's pid/uid/gid from SO_PEERCRED.
func (s *Session) Peer() PeerCred { return s.ep.peer }

// Region is the session's region.
func (s *Session) Region() *Region { return s.ep.region }

// Done is closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.ep.done }

// Closed reports whether the session has ended.
func (s *Session) Closed() bool { return s.ep.closed.Load() }

// Guard runs f with faults on the mapping turned into ErrQuarantined (only
// matters for /dev/shm regions).
func (s *Session) Guard(f func() error) error {
	if err := s.ep.acquire(); err != nil {
		return err
	}
	defer s.ep.release()
	return s.ep.guard(f)
}

// Close ends the session, wakes local sleepers and unmaps the region once no
// call is in progress.
func (s *Session) Close() error {
	return s.ep.shutdown()
}

// IsSessionEnd reports whether err means the session is over (as opposed to
// one failed message).
func IsSessionEnd(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrQuarantined)
}
