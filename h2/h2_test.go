package h2

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/mem"
)

// A 5-byte prefix declaring 64 MiB costs nothing until body bytes arrive, and
// then no more than what arrived plus one chunk: memory follows bytes, not
// promises.
func TestAssemblerMemoryFollowsBytes(t *testing.T) {
	b := NewBudget(64 << 20)
	var a Assembler
	msg := make([]byte, 5, 5+100)
	binary.BigEndian.PutUint32(msg[1:], 64<<20)
	deliver := func(mem.BufferSlice, bool) error { t.Fatal("a message delivered before its body arrived"); return nil }
	if _, err := a.Read(NewInput(bytes.NewReader(msg), 4096), 5, 64<<20, &b, deliver); err != nil {
		t.Fatal(err)
	}
	if a.Held() != 0 || !a.Partial() {
		t.Fatalf("after a prefix declaring 64 MiB: %d bytes held, partial %v; want 0 and true", a.Held(), a.Partial())
	}
	if _, err := a.Read(NewInput(bytes.NewReader(make([]byte, 100)), 4096), 100, 64<<20, &b, deliver); err != nil {
		t.Fatal(err)
	}
	if a.Held() > 16<<10 || b.left != b.limit-a.Held() {
		t.Fatalf("after 100 body bytes: %d held (want at most 16 KiB), budget %d of %d", a.Held(), b.left, b.limit)
	}
	a.Reset(&b)
	if b.left != b.limit {
		t.Fatalf("budget %d after Reset, want %d", b.left, b.limit)
	}
}

// What overdraws the budget fails that message (ErrBudget) and gives its
// memory back.
func TestAssemblerBudget(t *testing.T) {
	b := Budget{left: 40 << 10, limit: 40 << 10}
	var a Assembler
	body := make([]byte, 5+64<<10)
	binary.BigEndian.PutUint32(body[1:5], 64<<10)
	left, err := a.Read(NewInput(bytes.NewReader(body), 4096), len(body), 1<<20, &b, func(mem.BufferSlice, bool) error { return nil })
	if _, ok := err.(ErrBudget); !ok || left == 0 {
		t.Fatalf("a 64 KiB message against a 40 KiB budget: %v (left %d), want ErrBudget", err, left)
	}
	if b.left != b.limit || a.Partial() {
		t.Fatalf("budget %d of %d, partial %v after the refusal", b.left, b.limit, a.Partial())
	}
}

func TestCheckRequest(t *testing.T) {
	ok := []string{":method", "POST", ":scheme", "http", ":path", "/p", ":authority", "a", "content-type", "application/grpc", "te", "trailers"}
	fields := func(kv ...string) []hpack.HeaderField {
		var fs []hpack.HeaderField
		for i := 0; i+1 < len(kv); i += 2 {
			fs = append(fs, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return fs
	}
	if n, why := CheckRequest(fields(ok...)); why != "" || n != -1 {
		t.Fatalf("a gRPC request: %d %q", n, why)
	}
	if n, why := CheckRequest(fields(append(ok, "content-length", "7")...)); why != "" || n != 7 {
		t.Fatalf("content-length 7: %d %q", n, why)
	}
	for name, kv := range map[string][]string{
		"uppercase":        append(ok, "X-A", "1"),
		"late pseudo":      append(ok, ":path", "/q"),
		"unknown pseudo":   append([]string{":x", "1"}, ok...),
		"no method":        ok[2:],
		"empty path":       {":method", "POST", ":scheme", "http", ":path", ""},
		"connection":       append(ok, "connection", "close"),
		"te gzip":          {":method", "POST", ":scheme", "http", ":path", "/p", "te", "gzip"},
		"content-length x": append(ok, "content-length", "x"),
		"two lengths":      append(ok, "content-length", "1", "content-length", "2"),
		"CR in a value":    append(ok, "x-a", "1\r2"),
	} {
		if _, why := CheckRequest(fields(kv...)); why == "" {
			t.Errorf("%s: accepted", name)
		}
	}
	if why := CheckTrailers(fields(":status", "200")); why == "" {
		t.Error("a pseudo-header in trailers accepted")
	}
}

// FuzzReader reads arbitrary bytes as frames, as both of vig's legs do: frame
// headers, control payloads, header blocks (HPACK, with its bounds), DATA with
// padding. No panic, and what a header block yields stays within MaxHeaderList.
func FuzzReader(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
	enc.WriteField(hpack.HeaderField{Name: ":path", Value: "/inference.GRPCInferenceService/ModelInfer"})
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes()[:3]})
	fr.WriteContinuation(1, true, hb.Bytes()[3:])
	fr.WriteDataPadded(1, true, []byte{0, 0, 0, 0, 1, 'x'}, []byte{0, 0})
	fr.WritePing(false, [8]byte{1})
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 1, 1, 0x24, 0, 0, 0, 1, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		defer fuzztest.Bound(t)()
		r := NewReader(bytes.NewReader(data), 4096)
		recv := int64(1 << 30)
		for {
			h, err := r.ReadHeader()
			if err != nil {
				return
			}
			switch h.Type {
			case http2.FrameHeaders:
				err = r.HeaderBlock(h)
				size := 0
				for _, f := range r.Fields {
					size += len(f.Name) + len(f.Value) + 32
				}
				if size > MaxHeaderList {
					t.Fatalf("a header list of %d bytes passed", size)
				}
			case http2.FrameData:
				var n, pad int
				if n, pad, err = r.DataStart(h, &recv, "fuzz"); err == nil {
					if err = r.Discard(n); err == nil {
						err = r.Discard(pad)
					}
				}
			default:
				_, err = r.Payload(h)
			}
			if err != nil {
				return
			}
		}
	})
}

// FuzzAssembler splits arbitrary DATA payload bytes at arbitrary points and
// assembles gRPC messages from them under a small budget: no panic, what is held
// never exceeds the budget, and the budget is whole again once the assembler is
// reset.
func FuzzAssembler(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 3, 'a', 'b', 'c', 1, 0, 0, 0, 0}, uint16(2))
	f.Add([]byte{0, 0, 0, 0xff, 0xff, 1, 2, 3}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint16) {
		defer fuzztest.Bound(t)()
		b := Budget{left: 64 << 10, limit: 64 << 10}
		var a Assembler
		br := NewInput(bytes.NewReader(data), 4096)
		k := int(step%4096) + 1
		deliver := func(msg mem.BufferSlice, _ bool) error {
			msg.Free()
			return nil
		}
		for rest := len(data); rest > 0; {
			n := min(k, rest)
			left, err := a.Read(br, n, 1<<20, &b, deliver)
			if b.left < 0 || a.Held() > b.limit {
				t.Fatalf("budget %d, held %d of %d", b.left, a.Held(), b.limit)
			}
			if err != nil {
				br.Discard(left)
			}
			rest -= n
		}
		a.Reset(&b)
		if b.left != b.limit {
			t.Fatalf("budget %d after Reset, want %d", b.left, b.limit)
		}
	})
}

// Partials lists only assemblers that hold memory, and a sweep frees those of
// ended streams but the one being read, and forgets those that hold nothing.
func TestPartialsSweep(t *testing.T) {
	b := NewBudget(64 << 20)
	hold := func(a *Assembler) {
		msg := make([]byte, 5+100)
		binary.BigEndian.PutUint32(msg[1:], 1000)
		deliver := func(mem.BufferSlice, bool) error { t.Fatal("delivered an incomplete message"); return nil }
		if _, err := a.Read(NewInput(bytes.NewReader(msg), 4096), len(msg), 64<<20, &b, deliver); err != nil {
			t.Fatal(err)
		}
	}
	var p Partials
	as := make([]Assembler, 4)
	if p.Note(&as[3], 7) || len(p.list) != 0 {
		t.Fatal("an assembler holding nothing was listed")
	}
	for i := range 3 {
		hold(&as[i])
		p.Note(&as[i], uint32(2*i+1))
		p.Note(&as[i], uint32(2*i+1)) // listed once
	}
	if len(p.list) != 3 {
		t.Fatalf("%d listed, want 3", len(p.list))
	}
	as[1].Reset(&b) // its message ended: holds nothing
	ended := map[uint32]bool{1: true, 5: true}
	p.Sweep(&as[0], &b, func(id uint32, a *Assembler) bool { return ended[id] })
	// 1 is spared (being read), 3 holds nothing, 5 ended: freed.
	if len(p.list) != 1 || p.list[0].a != &as[0] || as[2].Held() != 0 || as[0].Held() == 0 || as[1].listed || as[2].listed {
		t.Fatalf("after the sweep: %d listed, held %d %d %d", len(p.list), as[0].Held(), as[1].Held(), as[2].Held())
	}
	as[0].Reset(&b)
	if b.left != b.limit {
		t.Fatalf("budget %d of %d after every message ended", b.left, b.limit)
	}
}
