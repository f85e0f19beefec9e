package toolexec

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	out, err := Run(context.Background(), 5*time.Second, "sh", "-c", "echo hello")
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("sh: %q %v", out, err)
	}
	if _, err := Run(context.Background(), 5*time.Second, "vig-no-such-tool-here"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("missing tool: %v, want ErrUnsupported", err)
	}
	_, err = Run(context.Background(), 5*time.Second, "sh", "-c", "echo broken >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("failing tool: %v, want its stderr in the error", err)
	}
}
