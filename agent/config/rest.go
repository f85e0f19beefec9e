package config

import "regexp"

// REST tunes the HTTP/REST frontend (listen.http, listen.http_unix). Zero
// takes the frontend's default (restfront.Default*).
type REST struct {
	HeaderTimeoutS int `yaml:"header_timeout_s"` // the request line and headers (default 10)
	ReadTimeoutS   int `yaml:"read_timeout_s"`   // the whole request, body included (default 60)
	WriteTimeoutS  int `yaml:"write_timeout_s"`  // from the end of the headers to the end of the answer (default 120)
	IdleTimeoutS   int `yaml:"idle_timeout_s"`   // between requests on a kept-alive connection (default 120)
	MaxConns       int `yaml:"max_conns"`        // open connections; more are answered 503 and closed (default 1024)
	// MaxJSONParses bounds the JSON request headers parsed at once (those
	// with tensors in them, and compressed bodies); default GOMAXPROCS.
	MaxJSONParses int `yaml:"max_json_parses"`
	// ForwardHeaders is Triton's --http-header-forward-pattern: a regular
	// expression; the request headers whose names match it are forwarded to
	// the backend as string parameters of the request. Empty: none.
	ForwardHeaders string `yaml:"forward_headers"`
}

func (r *REST) validate(bad func(line int, key, format string, args ...any)) {
	for key, v := range map[string]int{"rest.header_timeout_s": r.HeaderTimeoutS, "rest.read_timeout_s": r.ReadTimeoutS,
		"rest.write_timeout_s": r.WriteTimeoutS, "rest.idle_timeout_s": r.IdleTimeoutS, "rest.max_conns": r.MaxConns,
		"rest.max_json_parses": r.MaxJSONParses} {
		if v < 0 {
			bad(0, key, "%d is negative: give a positive value, or leave the key out for the default", v)
		}
	}
	if r.ForwardHeaders != "" {
		if _, err := regexp.Compile(r.ForwardHeaders); err != nil {
			bad(0, "rest.forward_headers", "%q is not a regular expression (RE2 syntax, as Triton's --http-header-forward-pattern): %v", r.ForwardHeaders, err)
		}
	}
}
