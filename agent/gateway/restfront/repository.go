package restfront

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
)

// The extensions of Triton's protocol vig serves over HTTP. The server
// metadata advertises those of the backend's list that are here: a client
// must not be told of an endpoint (trace, logging) vig answers 404.
var served = []string{"classification", "sequence", "model_repository", "model_repository(unload_dependents)",
	"schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory", "binary_tensor_data",
	"parameters", "statistics"}

func servedExtensions(backend []string) []string {
	out := []string{}
	for _, e := range backend {
		if slices.Contains(served, e) {
			out = append(out, e)
		}
	}
	return out
}

// repositoryParams reads the body of a model load or unload request,
// {"parameters": {…}}, into the map entries of
// RepositoryModel{Load,Unload}Request.parameters, as Triton's HTTP server
// does: a boolean, an integer or a string; a "file:" key's string is base64,
// passed as bytes (the model file it overrides). No body: no parameters.
func (f *Frontend) repositoryParams(w http.ResponseWriter, r *http.Request, what string) ([][]byte, bool) {
	src, good := f.readBody(w, r)
	if !good {
		return nil, false
	}
	defer src.free()
	body := src.bytes()
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, true
	}
	var in struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := exactUnmarshal(body, &in); err != nil {
		failCode(w, http.StatusBadRequest, codes.InvalidArgument, "model "+what+" request: "+err.Error())
		return nil, false
	}
	keys := make([]string, 0, len(in.Parameters))
	for k := range in.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out [][]byte
	for _, k := range keys {
		v := bytes.TrimSpace(in.Parameters[k])
		var p []byte // ModelRepositoryParameter
		switch {
		case string(v) == "true" || string(v) == "false":
			p = protowire.AppendTag(p, 1, protowire.VarintType)
			p = protowire.AppendVarint(p, protowire.EncodeBool(string(v) == "true"))
		case len(v) > 0 && v[0] == '"':
			var str string
			if err := json.Unmarshal(v, &str); err != nil {
				failCode(w, http.StatusBadRequest, codes.InvalidArgument, "model "+what+" parameter '"+k+"': "+err.Error())
				return nil, false
			}
			if strings.HasPrefix(k, "file:") {
				b, err := base64.StdEncoding.DecodeString(str)
				if err != nil {
					failCode(w, http.StatusBadRequest, codes.InvalidArgument, "model "+what+" parameter '"+k+"': a file's content must be base64: "+err.Error())
					return nil, false
				}
				p = protowire.AppendTag(p, 4, protowire.BytesType)
				p = protowire.AppendBytes(p, b)
			} else {
				p = protowire.AppendTag(p, 3, protowire.BytesType)
				p = protowire.AppendString(p, str)
			}
		default:
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				failCode(w, http.StatusBadRequest, codes.InvalidArgument, "model "+what+" parameter '"+k+"' must be a boolean, an integer or a string")
				return nil, false
			}
			p = protowire.AppendTag(p, 2, protowire.VarintType)
			p = protowire.AppendVarint(p, uint64(n))
		}
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, p)
		out = append(out, e)
	}
	return out, true
}
