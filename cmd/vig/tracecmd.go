package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vig-edge/vig/agent/access"
	"github.com/vig-edge/vig/agent/trace"
	"github.com/vig-edge/vig/internal/atomicfile"
)

const traceUsage = `Usage: vig trace [--addr 127.0.0.1:9090] [--seconds 10] [-o vig.trace.json]

Asks a running vig for the next N seconds of its scheduling decisions (every
frame's arrival, deferral, dispatch to an accelerator slot, completion and
answer) and writes them as Chrome trace-event JSON: open the file in
ui.perfetto.dev or chrome://tracing (docs/trace.md). vig records only while
asked; it serves this on its metrics listener (listen.metrics), with that
listener's TLS and bearer token.

Flags:
`

func runTrace(args []string) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9090", "vig's metrics listener: `HOST:PORT`, or https://HOST:PORT when it serves TLS")
	secs := fs.Float64("seconds", 10, fmt.Sprintf("record for `N` seconds (at most %d)", trace.MaxSeconds))
	out := fs.String("o", "vig.trace.json", "write the trace to `FILE` (-: stdout)")
	tokenFile := fs.String("token-file", "", "`FILE` holding the bearer token, when vig sets listen.auth.token_file")
	caFile := fs.String("ca-file", "", "with https://: PEM `FILE` of the CA that signed vig's certificate (default: the system's)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), traceUsage); fs.PrintDefaults() }
	if code, ok := parseFlags(fs, args, os.Stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "vig trace: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if !(*secs > 0 && *secs <= trace.MaxSeconds) {
		fmt.Fprintf(os.Stderr, "vig trace: --seconds %v: give more than 0 and at most %d\n", *secs, trace.MaxSeconds)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	n, hdr, err := fetchTrace(ctx, traceRequest{addr: *addr, seconds: *secs, out: *out, tokenFile: *tokenFile, caFile: *caFile})
	if err != nil {
		fmt.Fprintf(os.Stderr, "vig trace: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	if *out != "-" {
		fmt.Fprintf(os.Stderr, "vig trace: wrote %s (%d bytes, %s events over %v s): open it in ui.perfetto.dev\n", *out, n, hdr.Get("X-Vig-Trace-Events"), *secs)
	}
	if d := hdr.Get("X-Vig-Trace-Dropped"); d != "" && d != "0" {
		fmt.Fprintf(os.Stderr, "vig trace: the first %s events of the window were dropped: raise trace.buffer_events in vig's config, or record fewer seconds\n", d)
	}
	return 0
}

type traceRequest struct {
	addr      string
	seconds   float64
	out       string
	tokenFile string
	caFile    string
}

// usageError is a problem with the command line or a file it names (exit 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// fetchTrace asks vig for a window and writes it to r.out; it returns the bytes
// written and the response's headers.
func fetchTrace(ctx context.Context, r traceRequest) (int64, http.Header, error) {
	if r.out != "-" {
		if err := writable(r.out); err != nil {
			return 0, nil, usageError{fmt.Errorf("-o %s: %w", r.out, err)}
		}
	}
	base := r.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, nil, usageError{fmt.Errorf("--addr %q: give HOST:PORT (vig's listen.metrics), or https://HOST:PORT", r.addr)}
	}
	u.Path, u.RawQuery = "/debug/trace", "seconds="+strconv.FormatFloat(r.seconds, 'f', -1, 64)
	client := &http.Client{Timeout: time.Duration(r.seconds*float64(time.Second)) + time.Minute}
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return 0, nil, usageError{fmt.Errorf("--ca-file: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return 0, nil, usageError{fmt.Errorf("--ca-file %s: no PEM certificate in it", r.caFile)}
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, nil, err
	}
	if r.tokenFile != "" {
		data, err := os.ReadFile(r.tokenFile)
		if err == nil {
			_, err = access.NewToken(data) // the same rules as vig's
		}
		if err != nil {
			return 0, nil, usageError{fmt.Errorf("--token-file %s: %w", r.tokenFile, err)}
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(data)))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w (is vig serving its metrics listener at %s? see listen.metrics)", err, r.addr)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		hint := ""
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			hint = " (give --token-file with vig's listen.auth.token_file)"
		case http.StatusNotFound:
			hint = " (this vig has no trace recorder: upgrade it)"
		}
		return 0, resp.Header, fmt.Errorf("%s: %s%s", resp.Status, strings.TrimSpace(string(msg)), hint)
	}
	if r.out == "-" {
		n, err := io.Copy(os.Stdout, resp.Body)
		return n, resp.Header, err
	}
	var n int64
	err = atomicfile.Write(r.out, func(w io.Writer) error {
		var err error
		n, err = io.Copy(w, resp.Body)
		return err
	})
	return n, resp.Header, err
}
