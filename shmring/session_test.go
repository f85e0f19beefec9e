//go:build linux

package shmring

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/internal/fuzztest"
	"github.com/vig-edge/vig/platform/shmprobe"
	"github.com/vig-edge/vig/platform/sysinfo"
)

var testConfig = Config{
	Requests:  RingConfig{Descriptors: 8, Slots: 4, SlotSize: 64 << 10},
	Responses: RingConfig{Descriptors: 8, Slots: 4, SlotSize: 4096},
}

var addrSeq atomic.Int64

// testAddr is a unique abstract socket per test (tests run in parallel
// processes under go test ./...).
func testAddr(t testing.TB) string {
	return fmt.Sprintf("@vig-shmring-test-%d-%d", os.Getpid(), addrSeq.Add(1))
}

// logSink captures slog records so tests can assert on logged reasons.
type logSink struct {
	mu   sync.Mutex
	msgs []string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value); return true })
	s.mu.Lock()
	s.msgs = append(s.msgs, sb.String())
	s.mu.Unlock()
	return nil
}
func (s *logSink) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrHandler{s, as}
}
func (s *logSink) WithGroup(string) slog.Handler { return s }

func (s *logSink) find(sub string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if strings.Contains(m, sub) {
			return m
		}
	}
	return ""
}

type attrHandler struct {
	s  *logSink
	as []slog.Attr
}

func (h *attrHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h *attrHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(h.as...)
	return h.s.Handle(ctx, r)
}
func (h *attrHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrHandler{h.s, append(append([]slog.Attr{}, h.as...), as...)}
}
func (h *attrHandler) WithGroup(string) slog.Handler { return h }

// requireRing skips where no backend can exist, and fails where the kernel
// has memfd (3.17+) but the ring cannot use it: present but broken.
func requireRing(t testing.TB) {
	t.Helper()
	perr := probeErr()
	if perr == nil {
		return
	}
	if sysinfo.AtLeast(sysinfo.Release(), 3, 17) {
		fd, err := unix.MemfdCreate("vig-test", unix.MFD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
			t.Fatalf("memfd_create works but the probe fails: %v", perr)
		}
		if err != unix.ENOSYS && err != unix.EPERM { // a sandbox may block it
			t.Fatalf("memfd_create fails on kernel %s: %v", sysinfo.Release(), err)
		}
	}
	t.Skipf("no shared-memory backend: %v", perr)
}

func probeErr() error { _, err := Probe(); return err }

func listen(t testing.TB, cfg ServerConfig) (*Listener, *logSink) {
	t.Helper()
	requireRing(t)
	sink := &logSink{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(sink)
	}
	l, err := Listen(testAddr(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, sink
}

// pair returns a connected server Conn and client Session in this process.
func pair(t testing.TB, cfg ServerConfig, opts DialOptions) (*Conn, *Session, *logSink) {
	t.Helper()
	l, sink := listen(t, cfg)
	if opts.Config == (Config{}) {
		opts.Config = testConfig
	}
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	s, err := Dial(l.Addr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { s.Close(); r.c.Close() })
	return r.c, s, sink
}

func TestEndToEnd(t *testing.T) {
	for _, b := range []Backend{BackendMemfd, BackendShmFile} {
		t.Run(b.String(), func(t *testing.T) {
			if b == BackendShmFile {
				if err := probeShmDir(); err != nil {
					t.Skip(err)
				}
			}
			c, s, sink := pair(t, ServerConfig{AllowUnsealed: true}, DialOptions{Backend: b})
			if c.Sealed() != (b == BackendMemfd) || s.Region().Backend() != b {
				t.Fatalf("sealed=%v backend=%v for %v", c.Sealed(), s.Region().Backend(), b)
			}
			if p := c.Peer(); p.PID != int32(os.Getpid()) || p.UID != uint32(os.Getuid()) {
				t.Errorf("server sees peer %+v", p)
			}
			if p := s.Peer(); p.PID != int32(os.Getpid()) {
				t.Errorf("client sees peer %+v", p)
			}
			if m := sink.find("client connected"); !strings.Contains(m, fmt.Sprintf("pid=%d", os.Getpid())) {
				t.Errorf("connect log %q lacks the pid", m)
			}
			const n = 100
			done := make(chan error, 1)
			go func() {
				var req Request
				for i := range n {
					if err := c.Recv(&req); err != nil {
						done <- err
						return
					}
					p := req.Payload()
					want := bytes.Repeat([]byte{byte(i)}, i*100)
					if req.Frame != uint64(i) || req.Stream != "cam" || !bytes.Equal(p, want) {
						done <- fmt.Errorf("request %d: frame %d stream %q payload %d bytes", i, req.Frame, req.Stream, len(p))
						return
					}
					res := Response{Status: StatusOK, Payload: []byte(fmt.Sprintf("result %d", i))}
					if i%7 == 3 {
						res = Response{Status: StatusAborted, Message: "superseded"}
					}
					if err := c.Respond(&req, &res); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			var d Descriptor
			for i := range n {
				slot, buf, err := s.Requests.Loan()
				if err != nil {
					t.Fatal(err)
				}
				nb := copy(buf, bytes.Repeat([]byte{byte(i)}, i*100))
				err = s.Requests.Post(&Descriptor{Tag: uint64(i + 1), Frame: uint64(i), Stream: "cam", Model: "det", Slot: slot, PayloadLen: uint64(nb)})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Responses.Next(&d); err != nil {
					t.Fatal(err)
				}
				if d.Tag != uint64(i+1) || d.Frame != uint64(i) || d.Stream != "cam" || d.Model != "det" {
					t.Fatalf("response %d: %+v", i, d)
				}
				if i%7 == 3 {
					if d.Status != StatusAborted || d.Message != "superseded" || d.Slot != NoSlot {
						t.Fatalf("response %d: %+v", i, d)
					}
				} else if got := string(s.Responses.Payload(&d)); got != fmt.Sprintf("result %d", i) {
					t.Fatalf("response %d payload %q", i, got)
				}
				s.Responses.Release(d.Slot)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if h := c.reqs.Held(); h != 0 {
				t.Errorf("server still holds %d request slots", h)
			}
			// Every slot is free again on both rings.
			for i := range uint32(4) {
				if s.Requests.states[i] != slotFree || s.Responses.states[i] != slotFree {
					t.Errorf("slot %d not returned: req %d resp %d", i, s.Requests.states[i], s.Responses.states[i])
				}
			}
		})
	}
}

func TestCloseWakesSleepers(t *testing.T) {
	c, s, _ := pair(t, ServerConfig{Spin: SpinNever}, DialOptions{Spin: SpinNever})
	errs := make(chan error, 2)
	go func() { var r Request; errs <- c.Recv(&r) }()
	go func() { var d Descriptor; errs <- s.Guard(func() error { return s.Responses.Next(&d) }) }()
	// Both sides are asleep (or about to be); closing the client must end
	// both: the client's own Close wakes it, the socket EOF wakes vig.
	s.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Errorf("sleeper returned %v, want ErrClosed", err)
		}
	}
	<-c.Done()
}

func TestMalformedRequestAnswered(t *testing.T) {
	c, s, sink := pair(t, ServerConfig{}, DialOptions{})
	// Post a descriptor whose payload lies outside its slot, bypassing the
	// Sender's own checks the way a buggy C client could.
	slot, _, err := s.Requests.Loan()
	if err != nil {
		t.Fatal(err)
	}
	raw := s.Requests.descAt(s.Requests.head)
	(&Descriptor{Tag: 42, Slot: slot}).encode(raw)
	raw[dPayloadLen] = 0xff
	raw[dPayloadLen+7] = 0x7f
	s.Requests.head++
	atomicStore64(s.Requests.ring.head, s.Requests.head)
	wake(s.Requests.readyBell, s.Requests.readyWaiters)
	// Then a good one.
	if err := s.Requests.Post(&Descriptor{Tag: 43, Slot: NoSlot, Stream: "ok"}); err != nil {
		t.Fatal(err)
	}
	var req Request
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	if req.Tag != 43 {
		t.Fatalf("Recv returned tag %d, want the good request 43", req.Tag)
	}
	var d Descriptor
	if err := s.Responses.Next(&d); err != nil {
		t.Fatal(err)
	}
	if d.Tag != 42 || d.Status != StatusInvalid || !strings.Contains(d.Message, "payload") {
		t.Fatalf("answer to the malformed request: %+v", d)
	}
	if c.BadMessages() != 1 || sink.find("rejecting malformed request") == "" {
		t.Errorf("bad messages %d, log %q", c.BadMessages(), sink.find("malformed"))
	}
	// The rejected message's slot came back to the client.
	if s.Requests.states[slot] != slotFree {
		t.Errorf("slot %d of the rejected message not returned", slot)
	}
}

func TestVersionMismatchRefused(t *testing.T) {
	l, sink := listen(t, ServerConfig{})
	go l.Accept()
	r, err := CreateRegion(testConfig, BackendAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	uc, err := dialRaw(l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	h := hello{version: ProtocolVersion + 1, kind: handshakeKindM, regionSize: r.layout.RegionSize}
	reply, err := rawHello(uc, h.encode(), r.fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeReply(reply); !errors.Is(err, ErrVersion) {
		t.Fatalf("reply to version %d: %v", ProtocolVersion+1, err)
	}
	if sink.find("version mismatch") == "" {
		t.Error("refusal not logged")
	}
}

// A client of ABI version 1 (a 64-byte hello) or 2 (a 128-byte hello: its
// futex wake-ups are gone in 3) is told which version to speak.
func TestOldVersionHelloRefused(t *testing.T) {
	for _, old := range []struct {
		version uint32
		size    int
	}{{1, 64}, {2, helloSize}} {
		t.Run(fmt.Sprintf("v%d", old.version), func(t *testing.T) {
			l, sink := listen(t, ServerConfig{})
			go l.Accept()
			r, err := CreateRegion(testConfig, BackendAuto)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			uc, err := dialRaw(l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer uc.Close()
			h := make([]byte, old.size) // magic, version, kind, region size, zeros
			binary.LittleEndian.PutUint64(h[0:], HelloMagic)
			binary.LittleEndian.PutUint32(h[8:], old.version)
			binary.LittleEndian.PutUint32(h[12:], handshakeKindM)
			binary.LittleEndian.PutUint64(h[16:], r.layout.RegionSize)
			reply, err := rawHello(uc, h, r.fd)
			if err != nil {
				t.Fatal(err)
			}
			if got := HandshakeStatus(binary.LittleEndian.Uint32(reply[12:])); got != HandshakeVersion {
				t.Errorf("status %v, want %v", got, HandshakeVersion)
			}
			if v := binary.LittleEndian.Uint32(reply[8:]); v != ProtocolVersion {
				t.Errorf("reply says version %d, want %d", v, ProtocolVersion)
			}
			reason := string(reply[replyHeadSize:])
			if !strings.Contains(reason, fmt.Sprintf("version %d,", old.version)) || !strings.Contains(reason, "ABI version 3") {
				t.Errorf("reason %q does not name both versions", reason)
			}
			if sink.find("version mismatch") == "" {
				t.Error("refusal not logged")
			}
		})
	}
}

// A keyed /dev/shm region is accepted with its key once the fd is shown to be
// /dev/shm/<key>; a key naming another object is refused.
func TestKeyedRegion(t *testing.T) {
	requireRing(t)
	if err := probeShmDir(); err != nil {
		t.Skip(err)
	}
	c, s, _ := pair(t, ServerConfig{AllowShmKey: true}, DialOptions{Backend: BackendShmKey})
	key := s.Region().Key()
	if key == "" || c.Key() != key || c.Sealed() || c.ep.region.Backend() != BackendShmKey {
		t.Fatalf("client key %q, server key %q sealed %v", key, c.Key(), c.Sealed())
	}
	if _, err := os.Stat(shmprobe.DevShm + key); err != nil {
		t.Fatalf("keyed file: %v", err)
	}
	s.Close()
	c.Close()
	if _, err := os.Stat(shmprobe.DevShm + key); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keyed file left behind after Close: %v", err)
	}

	// Without AllowShmKey (and AllowUnsealed) the region is refused as unsealed.
	l, _ := listen(t, ServerConfig{})
	go l.Accept()
	if _, err := Dial(l.Addr(), DialOptions{Config: testConfig, Backend: BackendShmKey}); !errors.Is(err, ErrUnsealed) {
		t.Errorf("keyed region without AllowShmKey: %v", err)
	}

	// A key that names another object than the fd.
	l2, sink := listen(t, ServerConfig{AllowShmKey: true})
	go l2.Accept()
	r, err := CreateRegion(testConfig, BackendShmKey)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other, err := CreateRegion(testConfig, BackendShmKey)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	uc, err := dialRaw(l2.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	h := hello{version: ProtocolVersion, kind: handshakeKindK, regionSize: r.layout.RegionSize, key: other.Key()}
	reply, err := rawHello(uc, h.encode(), r.fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeReply(reply); err == nil || !strings.Contains(err.Error(), "another object") {
		t.Errorf("mismatched key: %v", err)
	}
	if sink.find("another object") == "" {
		t.Error("refusal not logged")
	}
}

// A result larger than the client's response slots is still answered: with
// RESOURCE_EXHAUSTED, naming the sizes. Chunks land at their offsets.
func TestRespondChunksAndTooLarge(t *testing.T) {
	c, s, _ := pair(t, ServerConfig{AllowUnsealed: true}, DialOptions{})
	post := func(tag uint64) {
		t.Helper()
		if err := s.Requests.Post(&Descriptor{Tag: tag, Slot: NoSlot, Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	var req Request
	var d Descriptor
	post(1)
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	res := Response{Status: StatusOK, NumTensors: 2, Payload: []byte("ab"),
		Chunks: []Chunk{{Off: 16, Data: []byte("xyz")}, {Off: 19, Data: []byte("w")}}}
	res.Tensors[0] = Tensor{Name: "a", Datatype: "UINT8", Rank: 1, Dims: [MaxRank]int64{2}, Length: 2}
	res.Tensors[1] = Tensor{Name: "b", Datatype: "UINT8", Rank: 1, Dims: [MaxRank]int64{4}, Offset: 16, Length: 4}
	if err := c.Respond(&req, &res); err != nil {
		t.Fatal(err)
	}
	if err := s.Responses.Next(&d); err != nil {
		t.Fatal(err)
	}
	p := s.Responses.Payload(&d)
	if d.NumTensors != 2 || len(p) != 20 || string(p[:2]) != "ab" || string(p[16:20]) != "xyzw" || d.Tensors[1].Name != "b" {
		t.Errorf("chunked answer: %d tensors, payload %q", d.NumTensors, p)
	}
	s.Responses.Release(d.Slot)

	post(2)
	if err := c.Recv(&req); err != nil {
		t.Fatal(err)
	}
	big := Response{Status: StatusOK, Payload: make([]byte, testConfig.Responses.SlotSize+1)}
	if err := c.Respond(&req, &big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
	if err := s.Responses.Next(&d); err != nil {
		t.Fatal(err)
	}
	if d.Tag != 2 || d.Status != StatusExhausted || !strings.Contains(d.Message, "4097") || d.Slot != NoSlot {
		t.Errorf("too large answered %v %q slot %d", d.Status, d.Message, d.Slot)
	}
}

func TestHandshakeCodec(t *testing.T) {
	for _, h := range []hello{
		{version: ProtocolVersion, kind: handshakeKindS, regionSize: 12345},
		{version: ProtocolVersion, kind: handshakeKindK, regionSize: 12345, key: "/vig-ring-00ff"},
	} {
		got, err := decodeHello(h.encode())
		if err != nil || got != h {
			t.Fatalf("decodeHello = %+v, %v", got, err)
		}
	}
	for _, bad := range []hello{
		{version: ProtocolVersion, kind: handshakeKindK, regionSize: 1},                      // no key
		{version: ProtocolVersion, kind: handshakeKindK, regionSize: 1, key: "/a/b"},         // a second '/'
		{version: ProtocolVersion, kind: handshakeKindK, regionSize: 1, key: "no-slash"},     // no leading '/'
		{version: ProtocolVersion, kind: handshakeKindM, regionSize: 1, key: "/vig-ring-00"}, // key on a memfd
	} {
		if _, err := decodeHello(bad.encode()); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	for _, st := range []HandshakeStatus{HandshakeBadHello, HandshakeUnsealed, HandshakeBadRegion, HandshakeNotAllowed} {
		err := decodeReply(encodeReply(st, strings.Repeat("é", 200)))
		if err == nil || !strings.Contains(err.Error(), st.String()) && st != HandshakeUnsealed {
			t.Errorf("status %v: %v", st, err)
		}
		if st == HandshakeUnsealed && !errors.Is(err, ErrUnsealed) {
			t.Errorf("unsealed refusal does not wrap ErrUnsealed: %v", err)
		}
	}
	if err := decodeReply(encodeReply(HandshakeOK, "")); err != nil {
		t.Error(err)
	}
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(hello{version: ProtocolVersion, kind: handshakeKindM, regionSize: 1 << 20}.encode())
	f.Add(make([]byte, helloSize))
	f.Add(hello{version: ProtocolVersion, kind: handshakeKindK, regionSize: 1 << 20, key: "/vig-ring-0011"}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		h, err := decodeHello(b)
		if err == nil && (h.version != ProtocolVersion || h.kind < handshakeKindM || h.kind > handshakeKindK ||
			(h.kind == handshakeKindK) != (h.key != "") || h.key != "" && CheckKey(h.key) != nil) {
			t.Fatalf("accepted %+v", h)
		}
		decodeReply(b) // must not panic
	})
}

// TestStressNoLostWakeups drives both rings through the futex path (no
// spinning) with pipelined bursts; a lost wake-up hangs, which the watchdog
// turns into a failure with a stack dump.
func TestStressNoLostWakeups(t *testing.T) {
	for _, spin := range []Spin{SpinNever, SpinAdaptive} {
		t.Run(fmt.Sprint("spin", int(spin)), func(t *testing.T) {
			c, s, _ := pair(t, ServerConfig{Spin: spin}, DialOptions{Spin: spin})
			n := 20000
			if testing.Short() {
				n = 2000
			}
			wd := time.AfterFunc(45*time.Second, func() { panic("stress test stalled: lost wake-up") })
			defer wd.Stop()
			// At most as many requests in flight as the response ring has
			// payload slots, as shmring/client enforces.
			sem := make(chan struct{}, testConfig.Responses.Slots)
			srvErr := make(chan error, 1)
			go func() {
				var req Request
				for range n {
					if err := c.Recv(&req); err != nil {
						srvErr <- err
						s.Close()
						return
					}
					res := Response{Status: StatusOK}
					if req.Frame%3 == 0 {
						res.Payload = req.Payload()[:8]
					}
					if err := c.Respond(&req, &res); err != nil {
						srvErr <- err
						s.Close()
						return
					}
				}
				srvErr <- nil
			}()
			recvd := make(chan error, 1)
			go func() {
				var d Descriptor
				for i := range n {
					if err := s.Guard(func() error { return s.Responses.Next(&d) }); err != nil {
						recvd <- err
						return
					}
					if d.Tag != uint64(i+1) {
						recvd <- fmt.Errorf("response %d has tag %d", i, d.Tag)
						return
					}
					s.Responses.Release(d.Slot)
					<-sem
				}
				recvd <- nil
			}()
			for i := range n {
				sem <- struct{}{}
				slot, buf, err := s.Requests.Loan()
				if err != nil {
					t.Fatal(<-srvErr, err)
				}
				buf[0] = byte(i)
				if err := s.Requests.Post(&Descriptor{Tag: uint64(i + 1), Frame: uint64(i), Slot: slot, PayloadLen: 64}); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-srvErr; err != nil {
				t.Fatal(err)
			}
			if err := <-recvd; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFilesystemSocket covers the path-socket fallback, including a stale
// socket file left by a listener that died.
func TestFilesystemSocket(t *testing.T) {
	requireRing(t)
	path := t.TempDir() + "/vig.sock"
	l1, err := net.ListenUnix("unixpacket", unixAddr(path))
	if err != nil {
		t.Fatal(err)
	}
	l1.SetUnlinkOnClose(false)
	l1.Close() // leaves a socket file nobody listens on
	l, err := Listen(path, ServerConfig{Logger: slog.New(&logSink{})})
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer l.Close()
	if _, err := Listen(path, ServerConfig{}); err == nil {
		t.Fatal("a live listener's socket was taken over")
	}
	conns := acceptAsync(l)
	s, err := Dial(path, DialOptions{Config: testConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := <-conns
	if c == nil {
		t.Fatal("Accept failed")
	}
	c.Close()
}

// TestHandshakeRefusals: every malformed or unwanted hello is answered with
// a reason, logged, and does not stop the listener from accepting the next
// client.
func TestHandshakeRefusals(t *testing.T) {
	l, sink := listen(t, ServerConfig{HandshakeTimeout: 500 * time.Millisecond})
	conns := acceptAsync(l)
	good, err := CreateRegion(testConfig, BackendAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	goodHello := hello{version: ProtocolVersion, kind: handshakeKindM, regionSize: good.layout.RegionSize}
	if !good.Sealed() {
		goodHello.kind = handshakeKindS
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])

	// A client that says nothing is timed out.
	silent, err := dialRaw(l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, c := range []struct {
		name   string
		msg    []byte
		oob    []byte
		status string
	}{
		{"no fd", goodHello.encode(), nil, "bad hello"},
		{"two fds", goodHello.encode(), unix.UnixRights(good.fd, good.fd), "bad hello"},
		{"pipe fd", goodHello.encode(), unix.UnixRights(pipe[0]), "bad region"},
		{"short hello", goodHello.encode()[:20], unix.UnixRights(good.fd), "bad hello"},
		{"wrong size", hello{version: ProtocolVersion, kind: goodHello.kind, regionSize: 4096}.encode(), unix.UnixRights(good.fd), "bad region"},
	} {
		uc, err := dialRaw(l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		uc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := uc.WriteMsgUnix(c.msg, c.oob, nil); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, replyMaxSize)
		n, err := uc.Read(buf)
		uc.Close()
		if err != nil {
			t.Fatalf("%s: no reply: %v", c.name, err)
		}
		if err := decodeReply(buf[:n]); err == nil || !strings.Contains(err.Error(), c.status) {
			t.Errorf("%s: reply %v, want %q", c.name, err, c.status)
		}
	}
	// The listener still accepts a good client.
	s, err := Dial(l.Addr(), DialOptions{Config: testConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c := <-conns; c == nil {
		t.Fatal("Accept failed after refusals")
	} else {
		c.Close()
	}
	if sink.find("reading hello") == "" {
		t.Error("silent client's timeout not logged")
	}
}

func TestAuthorize(t *testing.T) {
	l, _ := listen(t, ServerConfig{Authorize: func(p PeerCred) error {
		return fmt.Errorf("uid %d is not the camera service", p.UID)
	}})
	go l.Accept()
	_, err := Dial(l.Addr(), DialOptions{Config: testConfig})
	if err == nil || !strings.Contains(err.Error(), "not the camera service") {
		t.Fatalf("Dial by an unauthorized peer: %v", err)
	}
}

func TestTruncUTF8(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"}, {"exactly", 7, "exactly"}, {"abcdef", 3, "abc"},
		{"aé", 2, "a"}, {"aé", 3, "aé"}, {"日本", 4, "日"}, {"a\xffb", 10, "a\uFFFDb"}, {"", 0, ""},
	} {
		got := truncUTF8(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) || len(got) > max(c.n, len(c.want)) {
			t.Errorf("truncUTF8(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
