package restfront_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind, but for net/http's wait of 500 ms
// after it half-closes a connection it refused (so that the client reads the
// answer rather than a reset), which then ends by itself.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}
