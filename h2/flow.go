package h2

// Receive-side flow control (RFC 9113 §5.2, §6.9): what vig lets a peer send.
//
// Each stream's window and the connection's are the size vig advertised
// (grpc.window_mib: SETTINGS_INITIAL_WINDOW_SIZE, and the connection's first
// WINDOW_UPDATE). What the peer sends is taken from both; what vig has consumed
// is owed back and given back in one WINDOW_UPDATE once a share of the window is
// owed, not per frame: a stream's once 1/StreamCreditDivisor of its window is
// owed, the connection's once 1/ConnCreditDivisor is (Writer.Credit; any flush
// carries what the connection is owed). These are the knobs for large frames.
const (
	StreamCreditDivisor = 4
	ConnCreditDivisor   = 2
)

// RecvWindow is one stream's receive window. Reader goroutine only.
type RecvWindow struct {
	left int64  // what the peer may still send
	owed uint32 // consumed, not yet given back
	size uint32
}

// NewRecvWindow is a window of size bytes (the advertised initial window).
func NewRecvWindow(size uint32) RecvWindow { return RecvWindow{left: int64(size), size: size} }

// Take counts a DATA frame's n bytes (its padding included, §6.9.1) against the
// window; false means the peer sent more than the window allowed.
func (w *RecvWindow) Take(n uint32) bool {
	w.left -= int64(n)
	return w.left >= 0
}

// Fits reports whether n more bytes stay within the window (Take would succeed).
func (w *RecvWindow) Fits(n uint32) bool { return w.left-int64(n) >= 0 }

// Owe records that n bytes taken were consumed: they are to be given back.
func (w *RecvWindow) Owe(n uint32) { w.owed += n }

// Due returns the WINDOW_UPDATE increment to send now and counts it given back,
// or 0 while less than 1/StreamCreditDivisor of the window is owed.
func (w *RecvWindow) Due() uint32 {
	if w.owed == 0 || w.owed < w.size/StreamCreditDivisor {
		return 0
	}
	inc := w.owed
	w.left += int64(inc)
	w.owed = 0
	return inc
}
