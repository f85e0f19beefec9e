//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/shmring"
)

// fakeVig plays vig's side of one ring session by hand, writing the shared
// mapping directly, so that it can post what no correct vig posts: the clients
// must bounds-check what they read from shared memory as vig does.
type fakeVig struct {
	mem   []byte
	lay   shmring.Layout
	uc    *net.UnixConn
	bells [3]int // the doorbells handed over: request ready, request space, response ready
}

func (f *fakeVig) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&f.mem[off])) }
func (f *fakeVig) u32(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&f.mem[off])) }

// wake rings doorbell i whatever the waiters word says.
func (f *fakeVig) wake(i int) {
	unix.Write(f.bells[i], []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

// Close ends the session.
func (f *fakeVig) Close() {
	for _, fd := range f.bells {
		unix.Close(fd)
	}
	f.uc.Close()
}

// accept completes the handshake of the next client on ln.
func acceptFake(ln *net.UnixListener) (*fakeVig, error) {
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	uc, err := ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("hello's control data: %v (%d messages)", err, len(msgs))
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 || n != 128 {
		return nil, fmt.Errorf("hello of %d bytes with fds %v: %v", n, fds, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fds[0], 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, shmring.HeaderSize)
	copy(hdr, mem)
	lay, err := shmring.DecodeHeader(hdr, uint64(st.Size))
	if err != nil {
		return nil, err
	}
	reply := make([]byte, 16)
	binary.LittleEndian.PutUint64(reply, shmring.ReplyMagic)
	binary.LittleEndian.PutUint32(reply[8:], shmring.ProtocolVersion)
	f := &fakeVig{mem: mem, lay: lay, uc: uc}
	for i := range f.bells {
		if f.bells[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
			return nil, err
		}
	}
	if _, _, err := uc.WriteMsgUnix(reply, unix.UnixRights(f.bells[:]...), nil); err != nil {
		return nil, err
	}
	return f, nil
}

// awaitRequests waits until the client has posted n requests.
func (f *fakeVig) awaitRequests(n uint64) error {
	q := f.lay.Rings[shmring.RequestRing]
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if atomic.LoadUint64(f.u64(q.RingOff)) >= n {
			return nil
		}
	}
	return fmt.Errorf("the client posted %d requests, want %d", atomic.LoadUint64(f.u64(q.RingOff)), n)
}

// consume takes the next request and returns its payload slot.
func (f *fakeVig) consume(seq uint64) {
	q := f.lay.Rings[shmring.RequestRing]
	d := make([]byte, shmring.DescriptorSize)
	copy(d, f.mem[q.DescOff+(seq%uint64(q.Descriptors))*shmring.DescriptorSize:])
	atomic.StoreUint64(f.u64(q.RingOff+128), seq+1)
	if slot := binary.LittleEndian.Uint32(d[24:]); slot < q.Slots {
		atomic.StoreUint32(f.u32(q.RingOff+512+4*uint64(slot)), 0)
	}
	f.wake(1)
}

// take marks a response slot in use and writes a 16-byte payload into it.
func (f *fakeVig) take(slot uint32) {
	p := f.lay.Rings[shmring.ResponseRing]
	atomic.StoreUint32(f.u32(p.RingOff+512+4*uint64(slot)), 1)
	off := p.ArenaOff + uint64(slot)*p.SlotSize
	binary.LittleEndian.PutUint64(f.mem[off:], 0x1122334455667788)
	binary.LittleEndian.PutUint64(f.mem[off+8:], 0)
}

// post writes response descriptor d at seq and publishes it.
func (f *fakeVig) post(seq uint64, d []byte) {
	p := f.lay.Rings[shmring.ResponseRing]
	copy(f.mem[p.DescOff+(seq%uint64(p.Descriptors))*shmring.DescriptorSize:], d)
	atomic.StoreUint64(f.u64(p.RingOff), seq+1)
	f.wake(2)
}

// goodResponse is a correct answer to frame 0: OUTPUT0, INT64 [2], 16 bytes in slot.
func goodResponse(slot uint32) []byte {
	d := shmring.Descriptor{Tag: 1, Frame: 0, Slot: slot, PayloadLen: 16, Stream: "cam", Model: "det", NumTensors: 1}
	d.Tensors[0] = shmring.Tensor{Name: "OUTPUT0", Datatype: "INT64", Rank: 1, Dims: [shmring.MaxRank]int64{2}, Length: 16}
	b := make([]byte, shmring.DescriptorSize)
	d.Encode(b)
	return b
}

// The malformed answers, each a good one with fields the ABI forbids; byte
// offsets from shmring/doc.go.
var malformed = []struct {
	name   string
	mangle func(d []byte)
}{
	{"slot out of range", func(d []byte) { binary.LittleEndian.PutUint32(d[24:], 1000) }},
	{"payload past the slot", func(d []byte) { binary.LittleEndian.PutUint64(d[32:], 1<<40) }},
	{"tensor past the payload", func(d []byte) { binary.LittleEndian.PutUint64(d[256+8:], 1<<50) }},
	{"tensor count > 16", func(d []byte) { d[50] = 200 }},
	{"stream length > 56", func(d []byte) { d[48] = 255 }},
	{"tensor name length > 96", func(d []byte) { d[256+16] = 250 }},
	{"rank > 8", func(d []byte) { d[256+18] = 100 }},
	{"negative dimension", func(d []byte) { binary.LittleEndian.PutUint64(d[256+128:], 1<<63) }},
	{"stream not UTF-8", func(d []byte) { d[56] = 0xff }},
	{"reserved flags", func(d []byte) { d[52] = 2 }}, // bit 0 is FlagExtraRegion (requests naming an extra region)
	{"reserved bytes", func(d []byte) { d[4000] = 1 }},
	{"payload without a slot", func(d []byte) { binary.LittleEndian.PutUint32(d[24:], shmring.NoSlot) }},
}

// A malicious vig: to the client's first frame it answers every malformed
// descriptor above (each naming response slot 1) and then a good answer in
// slot 0; to the second it writes an impossible producer counter. The client
// must skip the malformed answers (giving back the slot they named), deliver
// the good one, and end the session on the counter with an error, without
// reading outside what it mapped (the C client runs under ASan/UBSan).
func TestClientsRefuseMalformedAnswers(t *testing.T) {
	clients := []struct {
		name string
		argv func(t *testing.T) []string
		env  []string
	}{
		{"c", func(t *testing.T) []string {
			return []string{buildC(t, needGCC(t), srcDir(t, "c", "example.c"), "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")}
		}, []string{"ASAN_OPTIONS=abort_on_error=1", "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"}},
		{"python", func(t *testing.T) []string {
			return []string{needPython(t), srcDir(t, "python", "example.py")}
		}, nil},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			argv := c.argv(t)
			addr := fmt.Sprintf("@vig-clients-fake-%d-%d", os.Getpid(), clientSeq.Add(1))
			ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: addr, Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			fake := make(chan error, 1)
			var returned atomic.Bool
			go func() {
				f, err := acceptFake(ln)
				if err != nil {
					fake <- err
					return
				}
				defer unix.Munmap(f.mem)
				defer f.Close()
				if err := f.awaitRequests(1); err != nil {
					fake <- err
					return
				}
				f.consume(0)
				seq := uint64(0)
				f.take(1) // once: the client gives it back on the first malformed answer naming it
				for _, m := range malformed {
					d := goodResponse(1)
					m.mangle(d)
					f.post(seq, d)
					seq++
				}
				f.take(0)
				f.post(seq, goodResponse(0))
				seq++
				if err := f.awaitRequests(2); err != nil {
					fake <- err
					return
				}
				p := f.lay.Rings[shmring.ResponseRing]
				// The malformed answers named slot 1, which the client did not
				// hold: it must have given it back.
				returned.Store(atomic.LoadUint32(f.u32(p.RingOff+512+4)) == 0)
				atomic.StoreUint64(f.u64(p.RingOff), 1<<62)
				f.wake(2)
				f.uc.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, err = f.uc.Read(make([]byte, 1)) // the client leaves
				if errors.Is(err, os.ErrDeadlineExceeded) {
					fake <- errors.New("the client stayed connected after the corrupt counter")
					return
				}
				fake <- nil
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], addr, "cam", "det", "100", "2", "--outputs")...)
			cmd.Env = append(os.Environ(), c.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			if err := <-fake; err != nil {
				t.Fatalf("fake vig: %v; client stderr:\n%s", err, stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("client: %v, want exit status 1 (a ring error)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			want := "frame=0 status=OK bytes=16\noutput name=OUTPUT0 datatype=INT64 shape=[2] hex=88776655443322110000000000000000\n"
			if stdout.String() != want {
				t.Errorf("client printed\n%s\nwant only the good answer\n%s", stdout.String(), want)
			}
			for _, s := range []string{fmt.Sprintf("%d malformed results skipped", len(malformed)), "corrupt ring"} {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("client stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if !returned.Load() {
				t.Error("the client kept response slot 1, named only by malformed answers")
			}
		})
	}
}

// Each answer of TestClientsRefuseMalformedAnswers is one vig's own decoder
// refuses, so the clients are held to the Go side's rules, not looser ones.
func TestMalformedAnswersAreMalformed(t *testing.T) {
	lay, err := shmring.ComputeLayout(shmring.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := shmring.DecodeDescriptor(goodResponse(1)); err != nil || d.CheckPayload(lay.Rings[shmring.ResponseRing]) != nil {
		t.Fatalf("the good answer is refused: %v", err)
	}
	for _, m := range malformed {
		b := goodResponse(1)
		m.mangle(b)
		d, err := shmring.DecodeDescriptor(b)
		if err == nil {
			err = d.CheckPayload(lay.Rings[shmring.ResponseRing])
		}
		if err == nil {
			t.Errorf("%s: shmring accepts it", m.name)
		}
	}
}
