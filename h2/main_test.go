package h2

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind (a Writer's flusher included).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
