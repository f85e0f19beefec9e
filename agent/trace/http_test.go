package trace

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stuckWriter is a client that stops reading: its first write blocks until
// released.
type stuckWriter struct {
	header  http.Header
	writing chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stuckWriter) Header() http.Header { return s.header }
func (s *stuckWriter) WriteHeader(int)     {}
func (s *stuckWriter) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.writing) })
	<-s.release
	return len(p), nil
}

// TestHandlerStuckClientStallsNothing: while a window's client does not read,
// writers keep recording at full speed and another window is recorded and
// served.
func TestHandlerStuckClientStallsNothing(t *testing.T) {
	r, _ := NewRecorder(1<<12, monoClock(), nil)
	var recorded atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the data path: records whenever someone asks
		defer wg.Done()
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.Record(&Event{Kind: Arrive, Token: i}, nil)
			r.Record(&Event{Kind: Answer, Token: i}, nil)
			recorded.Add(1)
			if i%16 == 0 {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	h := r.Handler(func(w io.Writer, win *Window) error {
		for range win.Events {
			if _, err := w.Write(make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	})
	stuck := &stuckWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(stuck, httptest.NewRequest("GET", "/debug/trace?seconds=0.05", nil))
		close(done)
	}()
	select {
	case <-stuck.writing:
	case <-time.After(10 * time.Second):
		t.Fatal("the window was never written")
	}
	// The stuck client holds its goroutine, nothing else.
	before := recorded.Load()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/trace?seconds=0.05", nil))
	if rec.Code != 200 || rec.Header().Get("X-Vig-Trace-Events") == "0" || rec.Body.Len() == 0 {
		t.Fatalf("second window while the first is stuck: %d, %s events, %d bytes", rec.Code, rec.Header().Get("X-Vig-Trace-Events"), rec.Body.Len())
	}
	deadline := time.Now().Add(10 * time.Second)
	for recorded.Load() < before+1000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if recorded.Load() < before+1000 {
		t.Fatalf("the data path recorded %d events in 10 s while a client was stuck", recorded.Load()-before)
	}
	close(stuck.release)
	<-done
	close(stop)
	wg.Wait()
	if r.On() {
		t.Error("recording after every window ended")
	}
}

// TestHandlerBadAsks: bad seconds, other methods and too many windows at once
// are refused, saying what to do.
func TestHandlerBadAsks(t *testing.T) {
	r, _ := NewRecorder(0, monoClock(), nil)
	h := r.Handler(func(io.Writer, *Window) error { return nil })
	for _, q := range []string{"seconds=0", "seconds=-1", "seconds=61", "seconds=x", "seconds=NaN"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/trace?"+q, nil))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "at most 60") {
			t.Errorf("%s: %d %q", q, rec.Code, rec.Body.String())
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/debug/trace", nil))
	if rec.Code != 405 {
		t.Errorf("POST: %d", rec.Code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range MaxAsks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/debug/trace?seconds=60", nil).WithContext(ctx))
		}()
	}
	for len(r.asks) < MaxAsks {
		time.Sleep(time.Millisecond)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/trace?seconds=1", nil))
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "retry") {
		t.Errorf("one window too many: %d %q", rec.Code, rec.Body.String())
	}
	cancel() // the clients leave: their windows stop
	wg.Wait()
	if r.On() {
		t.Error("recording after every client left")
	}
}
