package config

import (
	"strings"
	"testing"
)

func TestRESTKeys(t *testing.T) {
	c, err := Parse("t.yaml", []byte("rest: {read_timeout_s: 5, max_conns: 64, max_json_parses: 2, forward_headers: '^x-.*'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.REST.ReadTimeoutS != 5 || c.REST.MaxConns != 64 || c.REST.MaxJSONParses != 2 || c.REST.ForwardHeaders != "^x-.*" {
		t.Errorf("rest: %+v", c.REST)
	}
	for _, bad := range []struct{ yaml, key string }{
		{"rest: {idle_timeout_s: -1}", "rest.idle_timeout_s"},
		{"rest: {max_conns: -3}", "rest.max_conns"},
		{"rest: {forward_headers: '('}", "rest.forward_headers"},
	} {
		_, err := Parse("t.yaml", []byte(bad.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), bad.key) {
			t.Errorf("%s: %v, want an error naming %s", bad.yaml, err, bad.key)
		}
	}
}
