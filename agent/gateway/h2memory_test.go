package gateway_test

// Memory before data: what a client's declarations (a gRPC prefix's length) may
// make vig hold, and the bound on what a connection's incomplete messages hold.

import (
	"context"
	"encoding/binary"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
)

// syncPing sends a PING and reads until its ACK: vig reads a connection's frames
// in order, so everything sent before the PING has been handled. It returns the
// grpc-status (or "rst") of the streams that ended meanwhile.
func (h *h2conn) syncPing(t *testing.T, seq uint64) map[uint32]string {
	t.Helper()
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], seq)
	if err := h.fr.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	h.flush()
	ended := map[uint32]string{}
	h.c.SetReadDeadline(time.Now().Add(20 * time.Second)) // liveness under -race and qemu
	defer h.c.SetReadDeadline(time.Time{})
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for PING ACK %d: %v", seq, err)
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return ended
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
				h.flush()
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v %q", f.ErrCode, f.DebugData())
		case *http2.RSTStreamFrame:
			ended[f.StreamID] = "rst"
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended[f.StreamID] = field(f.Fields, "grpc-status") + " " + field(f.Fields, "grpc-message")
			}
		}
	}
}

// liveHeap is the live heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// The prefix bomb: on several connections, 999 ModelInfer streams each send only
// a 5-byte gRPC prefix declaring 64 MiB. vig used to allocate every declared
// message at once (64 GiB per connection); memory must follow the bytes that
// arrived. The live heap stays within the stated per-connection bound
// (ConnMsgBudget, checked after every batch, so that the old code fails after
// its first 16 streams rather than exhausting the machine), and a well-behaved
// client is served throughout.
func TestH2PrefixBomb(t *testing.T) {
	e, _ := withProbe(t, "")
	stop := background(t, e.tcp)
	const conns, streams, batch = 3, 999, 16
	const declared = 64 << 20
	base := liveHeap()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var peak uint64
	for ci := range conns {
		h := dialH2(t, e.tcp)
		prefix := make([]byte, 5)
		binary.BigEndian.PutUint32(prefix[1:], declared)
		id := uint32(1)
		for sent := 0; sent < streams; {
			for range min(batch, streams-sent) {
				if err := h.headers(id, h.block("/"+gateway.Service+"/ModelInfer"), false); err != nil {
					t.Fatal(err)
				}
				if err := h.fr.WriteData(id, false, prefix); err != nil {
					t.Fatal(err)
				}
				id += 2
				sent++
			}
			if ended := h.syncPing(t, uint64(sent)); len(ended) > 0 {
				t.Fatalf("connection %d: streams ended while their messages were incomplete: %v", ci, ended)
			}
			live := liveHeap()
			grown := int64(live) - int64(base)
			peak = max(peak, uint64(max(grown, 0)))
			if bound := int64(ci+1) * gateway.ConnMsgBudget; grown > bound {
				t.Fatalf("connection %d, %d streams of a 5-byte prefix declaring %d bytes: live heap grew by %d bytes, above %d (%d connections × ConnMsgBudget)",
					ci, sent, declared, grown, bound, ci+1)
			}
		}
	}
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	t.Logf("%d connections × %d streams declaring %d MiB: live heap grew by at most %d KiB; %d MiB allocated in all (the well-behaved client's included); bound %d MiB per connection",
		conns, streams, declared>>20, peak>>10, (ms1.TotalAlloc-ms0.TotalAlloc)>>20, gateway.ConnMsgBudget>>20)
	// What the declarations cost at most (live heap and stream tables) is far
	// below what they promised; 2 GiB in all would already be a leak.
	if total := ms1.TotalAlloc - ms0.TotalAlloc; total > 2<<30 {
		t.Errorf("%d MiB allocated during the bomb", total>>20)
	}
	checkBackground(t, stop)
}

// The per-connection bound: streams whose incomplete messages would take a
// connection's buffers above ConnMsgBudget fail RESOURCE_EXHAUSTED (naming the
// bound), the others on that connection go on, and vig's live heap stays within
// the bound. Each stream sends 48 KiB + 1 byte of a 2 MiB message, which holds
// just over 1 MiB of buffers (16 KiB, 32 KiB, then a 1 MiB chunk).
func TestH2ConnMemoryBound(t *testing.T) {
	e, _ := withProbe(t, "")
	stop := background(t, e.tcp)
	h := dialH2(t, e.tcp)
	const streams = gateway.ConnMsgBudget/(1<<20) + 8
	body := make([]byte, 5+48<<10+1)
	binary.BigEndian.PutUint32(body[1:5], 2<<20)
	base := liveHeap()
	ended := map[uint32]string{}
	id := uint32(1)
	for i := range streams {
		if err := h.headers(id, h.block("/"+gateway.Service+"/ModelInfer"), false); err != nil {
			t.Fatal(err)
		}
		for p := body; len(p) > 0; {
			n := min(len(p), 16384)
			if err := h.fr.WriteData(id, false, p[:n]); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		id += 2
		if i%8 == 7 || i == streams-1 {
			for k, v := range h.syncPing(t, uint64(i)) {
				ended[k] = v
			}
		}
	}
	grown := int64(liveHeap()) - int64(base)
	exhausted := 0
	for id, st := range ended {
		if st[:2] != "8 " {
			t.Errorf("stream %d ended %q, want grpc-status 8 (RESOURCE_EXHAUSTED)", id, st)
			continue
		}
		exhausted++
	}
	t.Logf("%d streams × 1 MiB held: %d failed RESOURCE_EXHAUSTED (e.g. %q); live heap grew by %d MiB (bound %d MiB)",
		streams, exhausted, ended[id-2], grown>>20, gateway.ConnMsgBudget>>20)
	if exhausted == 0 || exhausted > 16 {
		t.Errorf("%d of %d streams failed; want the few beyond the %d-byte bound", exhausted, streams, gateway.ConnMsgBudget)
	}
	if grown > gateway.ConnMsgBudget+16<<20 {
		t.Errorf("live heap grew by %d bytes with one connection's incomplete messages, above the bound %d", grown, gateway.ConnMsgBudget)
	}
	checkBackground(t, stop)
}

// A grpc-timeout of "99999999H" (the largest the format allows) means no
// deadline in practice: the call is served and the backend gets a grpc-timeout
// it can read.
func TestH2HugeTimeoutServed(t *testing.T) {
	e, p := withProbe(t, "")
	h := dialH2(t, e.tcp)
	r, err := h.call(1, "/"+gateway.Service+"/ModelConfig", []byte{0x0a, 1, 'm'}, "grpc-timeout", "99999999H")
	if err != nil || field(r.trailers, "grpc-status") != "0" {
		t.Fatalf("grpc-timeout 99999999H: %+v %v, want the call served", r, err)
	}
	calls := p.recorded("/" + gateway.Service + "/ModelConfig")
	if len(calls) != 1 || calls[0].deadline.Before(time.Now().Add(24*time.Hour)) {
		t.Errorf("backend calls %+v: want one with a deadline years away", calls)
	}
}

// An inference answer larger than the stream window (window_mib) but within
// max_message_mib: vig gives the backend's stream its window back as the answer
// arrives (it used to only for relayed RPCs, and the backend stalled).
func TestH2LargeInferAnswerBeyondWindow(t *testing.T) {
	e, _ := withProbe(t, "grpc: {window_mib: 1}\n")
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // liveness, not speed
	defer cancel()
	const size = 3 << 20
	r, err := c.ModelInfer(probeCtx(ctx, "big:"+strconv.Itoa(size), "big"), inferRequest("detector", "big#1", 10))
	if err != nil {
		t.Fatalf("a %d-byte answer through a 1 MiB window: %v", size, err)
	}
	if len(r.RawOutputContents) != 1 || len(r.RawOutputContents[0]) != size {
		t.Fatalf("answer of %d outputs", len(r.RawOutputContents))
	}
}
