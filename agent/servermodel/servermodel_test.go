package servermodel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

// answer is what the fake backend says for one model.
type answer struct {
	config []byte // the response's config bytes, when err is nil
	err    error
}

// fakeBackend answers ModelConfig per model and records the models asked.
type fakeBackend struct {
	answers map[string]answer
	asked   []string
}

func (f *fakeBackend) client() Client {
	return Func(func(_ context.Context, in *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
		f.asked = append(f.asked, in.Name)
		a, ok := f.answers[in.Name]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "model %s is not in the fake", in.Name)
		}
		if a.err != nil {
			return nil, a.err
		}
		return &pb.ModelConfigResponse{Config: a.config}, nil
	})
}

func described(name string, maxBatch int32) answer {
	return answer{config: wire.AppendModelConfig(nil, &wire.ModelConfig{Name: name, MaxBatchSize: maxBatch})}
}

// undecodable is a ModelConfig whose first field claims more bytes than follow.
var undecodable = []byte{0xff, 0xff, 0xff}

func TestReadClassifies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  answer
		want    Outcome
		wantErr string // in Err; "" for none
	}{
		{"described", described("m", 8), Described, ""},
		{"UNIMPLEMENTED", answer{err: status.Error(codes.Unimplemented, "no ModelConfig here")}, NoModelConfig, "no ModelConfig here"},
		{"NOT_FOUND", answer{err: status.Error(codes.NotFound, "not loaded")}, NotDescribed, "not loaded"},
		{"another refusal", answer{err: status.Error(codes.PermissionDenied, "not yours")}, NotDescribed, "not yours"},
		{"UNAVAILABLE", answer{err: status.Error(codes.Unavailable, "connection refused")}, NotUp, "connection refused"},
		{"DEADLINE_EXCEEDED", answer{err: status.Error(codes.DeadlineExceeded, "too slow")}, NotUp, "too slow"},
		{"CANCELLED", answer{err: status.Error(codes.Canceled, "gone")}, NotUp, "gone"},
		{"the context's own error", answer{err: fmt.Errorf("relay: %w", context.DeadlineExceeded)}, NotUp, "relay"},
		{"config bytes that do not decode", answer{config: undecodable}, Undecodable, "model m: " + ErrBadModelConfig.Error()},
		{"a response that does not decode", answer{err: fmt.Errorf("%w: ModelConfigResponse: truncated", ErrBadModelConfig)}, Undecodable, "model m: " + ErrBadModelConfig.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBackend{answers: map[string]answer{"m": tc.answer}}
			r := Read(context.Background(), f.client(), "m")
			if r.Outcome != tc.want {
				t.Errorf("outcome %v (err %v), want %v", r.Outcome, r.Err, tc.want)
			}
			if (r.Config != nil) != (tc.want == Described) {
				t.Errorf("config %+v with outcome %v: a config comes with Described alone", r.Config, r.Outcome)
			}
			if r.Config != nil && (r.Config.Name != "m" || r.Config.MaxBatchSize != 8) {
				t.Errorf("config %+v, want the one served (m, max_batch_size 8)", r.Config)
			}
			switch {
			case tc.wantErr == "" && r.Err != nil:
				t.Errorf("err %v, want none", r.Err)
			case tc.wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr)):
				t.Errorf("err %v, want one saying %q", r.Err, tc.wantErr)
			}
			if got := errors.Is(r.Err, ErrBadModelConfig); got != (tc.want == Undecodable) {
				t.Errorf("errors.Is(%v, ErrBadModelConfig) = %v with outcome %v", r.Err, got, r.Outcome)
			}
			if tc.answer.err != nil && tc.want != Undecodable && r.Err != tc.answer.err {
				t.Errorf("err %v, want the client's error as it came (%v)", r.Err, tc.answer.err)
			}
		})
	}
}

func TestReadAll(t *testing.T) {
	models := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name      string
		answers   map[string]answer
		want      []string // models in the map
		wantErr   error    // errors.Is target; nil for none
		wantAsked []string
	}{
		{"every model described", map[string]answer{"a": described("a", 1), "b": described("b", 2), "c": described("c", 4)},
			[]string{"a", "b", "c"}, nil, models},
		{"a model not loaded is left out", map[string]answer{"a": described("a", 1), "c": described("c", 4)},
			[]string{"a", "c"}, nil, models},
		{"a server without ModelConfig is asked once", map[string]answer{
			"a": {err: status.Error(codes.Unimplemented, "")}, "b": described("b", 2), "c": described("c", 4)},
			nil, nil, []string{"a"}},
		{"a backend not up is the error", map[string]answer{
			"a": described("a", 1), "b": {err: status.Error(codes.Unavailable, "refused")}, "c": described("c", 4)},
			nil, status.Error(codes.Unavailable, "refused"), []string{"a", "b"}},
		{"an undecodable config is ErrBadModelConfig", map[string]answer{
			"a": {config: undecodable}, "b": described("b", 2), "c": described("c", 4)},
			nil, ErrBadModelConfig, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBackend{answers: tc.answers}
			got, err := ReadAll(context.Background(), f.client(), models)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err %v, want none", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && got != nil:
				t.Errorf("map %v with the error, want none", got)
			}
			if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, tc.want) {
				t.Errorf("described %v, want %v", names, tc.want)
			}
			for name, mc := range got {
				if mc.Name != name {
					t.Errorf("%s: config of %q", name, mc.Name)
				}
			}
			if !slices.Equal(f.asked, tc.wantAsked) {
				t.Errorf("asked %v, want %v", f.asked, tc.wantAsked)
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	seen := map[string]bool{}
	for o := Described; o <= Undecodable; o++ {
		s := o.String()
		if strings.HasPrefix(s, "Outcome(") || seen[s] {
			t.Errorf("outcome %d is %q: every outcome has a name of its own", o, s)
		}
		seen[s] = true
	}
	if s := Outcome(99).String(); s != "Outcome(99)" {
		t.Errorf("Outcome(99) is %q", s)
	}
}
