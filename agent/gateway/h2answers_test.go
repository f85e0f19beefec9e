package gateway_test

import (
	"bytes"
	"fmt"
	"sort"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/gateway"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// answerEnds reads h until want streams have ended or fail with a status, and
// returns each ended stream's grpc-status and the answers' bytes per stream.
// It acknowledges SETTINGS and PING; it grants no window.
func answerEnds(t *testing.T, h *h2conn, want int) (ends map[uint32]string, data map[uint32][]byte) {
	t.Helper()
	ends, data = map[uint32]string{}, map[uint32][]byte{}
	h.c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang guard
	defer h.c.SetReadDeadline(time.Time{})
	for len(ends) < want {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading answers (%d of %d ended: %v): %v", len(ends), want, ends, err)
		}
		if h.ack(f) {
			continue
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			data[f.StreamID] = append(data[f.StreamID], f.Data()...)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ends[f.StreamID] = field(f.Fields, "grpc-status") + " " + field(f.Fields, "grpc-message")
			}
		case *http2.RSTStreamFrame:
			ends[f.StreamID] = "RST " + f.ErrCode.String()
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v: the connection must go on", f.ErrCode)
		}
	}
	return ends, data
}

// A client that does not read its answers (its stream windows are 0) makes
// vig hold them only up to the connection's answer budget: past it each answer
// fails its stream RESOURCE_EXHAUSTED, saying why, and the answers held are
// delivered whole once the client reads. Every request is answered once. The
// bound counts what is unread now, not since the connection opened: after the
// client has read everything, as many answers are held again as at first.
func TestH2UnreadAnswersBounded(t *testing.T) {
	defer gateway.SetAnswerBudget(4 << 20)()
	e, p := withProbe(t, "")
	const size = 1_000_000 // four such answers fit in 4 MiB, a fifth does not
	want := bigPattern(size)
	req, _ := proto.Marshal(inferRequest("detector", "unread", 10))
	h := dialH2(t, e.tcp, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})

	round := func(first uint32, n int, tag string) (held, refused []uint32) {
		t.Helper()
		for i := range n {
			id := first + uint32(2*i)
			h.headers(id, h.block(wire.MethodInfer, probeMode, fmt.Sprintf("big:%d", size), "x-probe-id", fmt.Sprintf("%s%d", tag, i)), false)
			h.fr.WriteData(id, true, grpcMessage(req))
		}
		h.flush()
		p.waitStarted(t, n)
		// The refused streams end; the held ones have their headers and wait
		// for window. The first four answers to reach vig are held, so once
		// n-4 streams have ended every answer has been dealt with.
		ends, _ := answerEnds(t, h, n-4)
		for id, st := range ends {
			if st[:2] != "8 " || !bytes.Contains([]byte(st), []byte("has not read")) {
				t.Errorf("%s: stream %d ended %q, want RESOURCE_EXHAUSTED saying the client has not read its answers", tag, id, st)
			}
			refused = append(refused, id)
		}
		for i := range n {
			if id := first + uint32(2*i); ends[id] == "" {
				held = append(held, id)
			}
		}
		sort.Slice(refused, func(i, j int) bool { return refused[i] < refused[j] })
		return held, refused
	}

	held, refused := round(1, 8, "a")
	if len(held) != 4 || len(refused) != 4 {
		t.Fatalf("8 unread 1 MB answers against a 4 MiB budget: %d held, %d refused (%v); want 4 and 4", len(held), len(refused), refused)
	}
	t.Logf("first round: held %v, refused %v", held, refused)

	// The client reads: each held answer arrives whole, status 0, once.
	h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 16 << 20})
	h.fr.WriteWindowUpdate(0, 64<<20)
	h.flush()
	ends, data := answerEnds(t, h, len(held))
	for _, id := range held {
		if ends[id] != "0 " {
			t.Errorf("held stream %d ended %q, want status 0", id, ends[id])
		}
		var r pb.ModelInferResponse
		if len(data[id]) < 5 || proto.Unmarshal(data[id][5:], &r) != nil || len(r.RawOutputContents) != 1 || !bytes.Equal(r.RawOutputContents[0], want) {
			t.Errorf("held stream %d: %d bytes, not the probe's %d-byte answer", id, len(data[id]), size)
		}
	}

	// Windows closed again (new streams start at 0): the budget is whole again.
	h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	h.flush()
	held, refused = round(17, 5, "b")
	if len(held) != 4 || len(refused) != 1 {
		t.Errorf("after the client read everything, 5 unread answers: %d held, %d refused; want 4 and 1 (the budget counts what is unread now)", len(held), len(refused))
	}
}
