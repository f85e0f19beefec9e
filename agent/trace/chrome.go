package trace

import (
	"bufio"
	"io"
	"strconv"
	"unicode/utf8"
)

// WriteChrome writes win as Chrome trace-event JSON (the JSON Object Format),
// which ui.perfetto.dev and chrome://tracing open: a process per accelerator
// with a track per slot, a process "streams" with a track per stream, and
// counters of waiting frames and busy slots (see layout.go for what each
// track shows). Timestamps are CLOCK_MONOTONIC in microseconds, the clock
// vig's events are recorded on; otherData gives the window's start on the
// wall clock. Events are written as the window is read: the output is never
// held whole in memory, and what WriteChrome allocates is bounded by the
// frames in flight at once, not by the window's length.
func WriteChrome(w io.Writer, win *Window) error {
	if err := checkWindow(win); err != nil {
		return err
	}
	c := &chromeWriter{w: bufio.NewWriterSize(w, 32<<10), win: win}
	c.b = append(c.b[:0], `{"displayTimeUnit":"ms","otherData":{"generator":"vig","start_monotonic_ns":`...)
	c.b = strconv.AppendInt(c.b, win.Start, 10)
	c.b = append(c.b, `,"end_monotonic_ns":`...)
	c.b = strconv.AppendInt(c.b, win.End, 10)
	c.b = append(c.b, `,"wall_start_unix_ns":`...)
	c.b = strconv.AppendInt(c.b, win.WallStart, 10)
	c.b = append(c.b, `,"events":`...)
	c.b = strconv.AppendInt(c.b, int64(len(win.Events)), 10)
	c.b = append(c.b, `,"dropped_events":`...)
	c.b = strconv.AppendUint(c.b, win.Dropped, 10)
	c.b = append(c.b, "},\n\"traceEvents\":["...)
	c.flush()
	lay(win, c)
	c.b = append(c.b[:0], "\n]}\n"...)
	c.flush()
	return c.w.Flush()
}

// chromeWriter is the drawer that writes JSON: each event is built in b,
// reused, and handed to the buffered writer, which keeps the first error.
type chromeWriter struct {
	w     *bufio.Writer
	win   *Window
	b     []byte
	first bool // at least one event written: the next needs a comma
}

func (c *chromeWriter) flush() {
	c.w.Write(c.b) // a write error is kept by bufio and returned by Flush
}

func (c *chromeWriter) begin(name string, ph byte, pid, tid int32) {
	c.b = c.b[:0]
	if c.first {
		c.b = append(c.b, ",\n"...)
	}
	c.first = true
	c.b = append(c.b, `{"ph":"`...)
	c.b = append(c.b, ph)
	c.b = append(c.b, `","pid":`...)
	c.b = strconv.AppendInt(c.b, int64(pid), 10)
	if tid >= 0 {
		c.b = append(c.b, `,"tid":`...)
		c.b = strconv.AppendInt(c.b, int64(tid), 10)
	}
	if name != "" {
		c.b = append(c.b, `,"name":`...)
		c.b = appendJSONString(c.b, name)
	}
}

func (c *chromeWriter) ts(key string, ns int64) {
	c.b = append(c.b, ',', '"')
	c.b = append(c.b, key...)
	c.b = append(c.b, '"', ':')
	c.b = appendMicros(c.b, ns)
}

func (c *chromeWriter) end() {
	c.b = append(c.b, '}')
	c.flush()
}

func (c *chromeWriter) process(pid int32, name string, sort int) {
	c.begin("process_name", 'M', pid, -1)
	c.b = append(c.b, `,"args":{"name":`...)
	c.b = appendJSONString(c.b, name)
	c.b = append(c.b, '}')
	c.end()
	c.begin("process_sort_index", 'M', pid, -1)
	c.b = append(c.b, `,"args":{"sort_index":`...)
	c.b = strconv.AppendInt(c.b, int64(sort), 10)
	c.b = append(c.b, '}')
	c.end()
}

func (c *chromeWriter) thread(pid, tid int32, name string, lane int, stream int32, sort int) {
	c.begin("thread_name", 'M', pid, tid)
	c.b = append(c.b, `,"args":{"name":`...)
	c.b = appendJSONString(c.b, name)
	c.b = append(c.b, '}')
	c.end()
	c.begin("thread_sort_index", 'M', pid, tid)
	c.b = append(c.b, `,"args":{"sort_index":`...)
	c.b = strconv.AppendInt(c.b, int64(sort), 10)
	c.b = append(c.b, '}')
	c.end()
}

func (c *chromeWriter) streamName(s int32) string { return streamName(c.win, s) }

// appendFrameName appends "stream f<token>" ("f<token>" for no stream).
func (c *chromeWriter) appendFrameName(b []byte, stream int32, token uint64) []byte {
	return appendFrameLabel(b, c.win, stream, token, appendJSONInner)
}

func (c *chromeWriter) span(s *span) {
	c.begin("", 'X', s.pid, s.tid)
	c.b = append(c.b, `,"name":"`...)
	switch s.kind {
	case spanJob:
		j := s.job
		if len(j.members) > 1 {
			c.b = append(c.b, "batch ×"...)
			c.b = strconv.AppendInt(c.b, int64(len(j.members)), 10)
			c.b = append(c.b, ": "...)
		}
		for i, m := range j.members {
			if i == 4 {
				c.b = append(c.b, ", …"...)
				break
			}
			if i > 0 {
				c.b = append(c.b, ", "...)
			}
			c.b = c.appendFrameName(c.b, m.stream, m.token)
		}
		c.b = append(c.b, `","cat":"job"`...)
		c.ts("ts", s.start)
		c.ts("dur", s.end-s.start)
		if j.code != 0 {
			c.b = append(c.b, `,"cname":"bad"`...)
		}
		c.b = append(c.b, `,"args":{"frames":[`...)
		for i, m := range j.members {
			if i > 0 {
				c.b = append(c.b, ',')
			}
			c.b = append(c.b, '"')
			c.b = c.appendFrameName(c.b, m.stream, m.token)
			c.b = append(c.b, '"')
		}
		c.b = append(c.b, `],"triton_ids":[`...)
		for i, m := range j.members {
			if i > 0 {
				c.b = append(c.b, ',')
			}
			c.b = appendJSONString(c.b, m.id)
		}
		c.b = append(c.b, ']')
		if j.before {
			c.b = append(c.b, `,"dispatched":"before the window"`...)
		} else {
			c.ts("dispatched_us", j.dispatch)
			if j.queued {
				c.b = append(c.b, `,"queued":true`...)
			}
		}
		if j.completed {
			c.b = append(c.b, `,"code":"`...)
			c.b = append(c.b, codeName(j.code)...)
			c.b = append(c.b, '"')
		} else {
			c.b = append(c.b, `,"running":"at the end of the window"`...)
		}
		if j.variant >= 0 && int(j.variant) < len(c.win.Models) {
			c.b = append(c.b, `,"model":`...)
			c.b = appendJSONString(c.b, c.win.Models[j.variant])
		}
		c.b = append(c.b, '}')
	case spanFrame:
		f := s.frame
		c.b = c.appendFrameName(c.b, f.stream, f.token)
		if f.answered && !f.lost && f.outcome != outcomeForwarded {
			c.b = append(c.b, ' ')
			c.b = append(c.b, outcomeName(f.outcome)...)
		}
		c.b = append(c.b, `","cat":"frame"`...)
		c.ts("ts", s.start)
		c.ts("dur", s.end-s.start)
		if f.answered && !f.lost {
			c.b = append(c.b, `,"cname":"`...)
			c.b = append(c.b, outcomeCname(f.outcome)...)
			c.b = append(c.b, '"')
		}
		c.b = append(c.b, `,"args":{"token":`...)
		c.b = strconv.AppendUint(c.b, f.token, 10)
		c.b = append(c.b, `,"triton_id":`...)
		c.b = appendJSONString(c.b, f.id)
		if f.arrived {
			c.ts("arrive_us", f.arrive)
			if f.capture > 0 {
				c.ts("capture_us", f.capture)
			}
			if f.deadline > 0 && f.deadline < 1<<62 {
				c.ts("deadline_us", f.deadline)
			}
		} else {
			c.b = append(c.b, `,"arrived":"before the window"`...)
		}
		switch {
		case f.lost:
			c.b = append(c.b, `,"answer":"missing from the window"`...)
		case f.answered:
			c.b = append(c.b, `,"outcome":"`...)
			c.b = append(c.b, outcomeName(f.outcome)...)
			c.b = append(c.b, `","code":"`...)
			c.b = append(c.b, codeName(f.code)...)
			c.b = append(c.b, '"')
			if f.reason != 0 {
				c.b = append(c.b, `,"reason":`...)
				c.b = appendJSONString(c.b, reasonText(f.reason))
			}
		default:
			c.b = append(c.b, `,"answer":"after the window"`...)
		}
		if f.batchSize > 1 {
			c.b = append(c.b, `,"batch_of":`...)
			c.b = strconv.AppendInt(c.b, int64(f.batchSize), 10)
			c.b = append(c.b, `,"batch_lead":`...)
			c.b = strconv.AppendUint(c.b, f.batch, 10)
		}
		c.b = append(c.b, '}')
	default:
		c.b = append(c.b, phaseNames[s.kind]...)
		c.b = append(c.b, `","cat":"phase"`...)
		c.ts("ts", s.start)
		c.ts("dur", s.end-s.start)
		if s.kind == spanRun && s.frame.queued {
			c.b = append(c.b, `,"args":{"queued":true}`...)
		}
	}
	c.end()
}

var phaseNames = [...]string{spanTransit: "transit", spanWait: "wait", spanRun: "run"}

func (c *chromeWriter) deferral(pid, tid int32, t int64, f *frame, on int32) {
	c.begin("", 'i', pid, tid)
	c.b = append(c.b, `,"name":"deferred for `...)
	if n := c.streamName(on); n != "" {
		c.b = appendJSONInner(c.b, n)
	} else {
		c.b = append(c.b, "another stream"...)
	}
	c.b = append(c.b, `","cat":"defer","s":"t"`...)
	c.ts("ts", t)
	c.b = append(c.b, `,"args":{"frame":"`...)
	c.b = c.appendFrameName(c.b, f.stream, f.token)
	c.b = append(c.b, `","for":`...)
	c.b = appendJSONString(c.b, c.streamName(on))
	c.b = append(c.b, '}')
	c.end()
}

func (c *chromeWriter) counter(pid int32, k counterKind, t int64, v int32) {
	c.begin(counterNames[k], 'C', pid, -1)
	c.ts("ts", t)
	c.b = append(c.b, `,"args":{"`...)
	if k == counterWaiting {
		c.b = append(c.b, "frames"...)
	} else {
		c.b = append(c.b, "slots"...)
	}
	c.b = append(c.b, `":`...)
	c.b = strconv.AppendInt(c.b, int64(v), 10)
	c.b = append(c.b, '}')
	c.end()
}

// appendMicros appends ns as microseconds with up to three decimals.
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	if r := ns % 1000; r != 0 {
		b = append(b, '.', byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
	}
	return b
}

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONInner(b, s)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONInner appends s escaped for a JSON string: quotes, backslashes
// and control characters escaped, < > & too (the page embeds the same names),
// invalid UTF-8 replaced.
func appendJSONInner(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}
