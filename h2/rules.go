package h2

import (
	"strconv"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// What makes a request malformed (RFC 9113 §8.1.1, §8.2, §8.3.1). A malformed
// request is a stream error of type PROTOCOL_ERROR: vig resets the stream
// before anything of it reaches the backend.

// CheckRequest validates a request's header block and returns its
// content-length (-1: none) or why it is malformed.
func CheckRequest(fields []hpack.HeaderField) (contentLength int64, why string) {
	var method, scheme, path, authority bool
	var isConnect, emptyPath bool
	regular := false
	contentLength = -1
	for _, f := range fields {
		if why := CheckField(f); why != "" {
			return -1, why
		}
		if f.Name[0] == ':' {
			if regular {
				return -1, "pseudo-header " + f.Name + " after a regular field (§8.3)"
			}
			var seen *bool
			switch f.Name {
			case ":method":
				seen, isConnect = &method, f.Value == "CONNECT"
			case ":scheme":
				seen = &scheme
			case ":path":
				seen, emptyPath = &path, f.Value == ""
			case ":authority":
				seen = &authority
			default:
				return -1, "pseudo-header " + f.Name + " is not one of a request's (§8.3.1)"
			}
			if *seen {
				return -1, "duplicated " + f.Name + " (§8.3.1)"
			}
			*seen = true
			continue
		}
		regular = true
		if f.Name == "content-length" {
			n, err := strconv.ParseUint(f.Value, 10, 63)
			if err != nil || (contentLength >= 0 && int64(n) != contentLength) {
				return -1, "malformed content-length " + strconv.Quote(f.Value) + " (§8.1.1)"
			}
			contentLength = int64(n)
		}
	}
	switch {
	case !method:
		return -1, "no :method (§8.3.1)"
	case isConnect:
		if scheme || path || !authority {
			return -1, "CONNECT with :scheme or :path, or without :authority (§8.5)"
		}
	case !scheme || !path:
		return -1, "no :scheme or no :path (§8.3.1)"
	case emptyPath:
		return -1, "empty :path (§8.3.1)"
	}
	return contentLength, ""
}

// CheckTrailers validates a trailer block: no pseudo-headers (§8.1).
func CheckTrailers(fields []hpack.HeaderField) string {
	for _, f := range fields {
		if why := CheckField(f); why != "" {
			return why
		}
		if f.Name[0] == ':' {
			return "pseudo-header " + f.Name + " in trailers (§8.1)"
		}
	}
	return ""
}

// CheckField validates one field: a lowercase token for a name (§8.2.1), a value
// without CR, LF or NUL, and none of the connection-specific fields (§8.2.2).
func CheckField(f hpack.HeaderField) string {
	name := f.Name
	if name == "" {
		return "empty field name (§8.2.1)"
	}
	if name[0] == ':' {
		name = name[1:]
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return "uppercase field name " + strconv.Quote(f.Name) + " (§8.2.1)"
		}
	}
	if !httpguts.ValidHeaderFieldName(name) {
		return "invalid field name " + strconv.Quote(f.Name) + " (§8.2.1)"
	}
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		return "invalid value of " + f.Name + " (§8.2.1)"
	}
	switch f.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return "connection-specific field " + f.Name + " (§8.2.2)"
	case "te":
		if f.Value != "trailers" {
			return "te other than \"trailers\" (§8.2.2)"
		}
	}
	return ""
}

// ClosedIDs remembers the streams vig reset lately: frames the peer sent before
// it saw the RST_STREAM may still arrive and are ignored (RFC 9113 §5.1
// closed), where a frame on another closed stream is an error. A ring: an id
// reset longer ago than the last len(ids) resets gets the error instead.
type ClosedIDs struct {
	ids [256]uint32
	n   int
}

// NoteReset records that vig reset stream id.
func (c *ClosedIDs) NoteReset(id uint32) {
	c.ids[c.n%len(c.ids)] = id
	c.n++
}

// WasReset reports whether vig reset stream id lately.
func (c *ClosedIDs) WasReset(id uint32) bool {
	for _, x := range c.ids[:min(c.n, len(c.ids))] {
		if x == id {
			return true
		}
	}
	return false
}

// HeaderListSize is a header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts
// it (RFC 9113 §6.5.2): each field's name and value, uncompressed, plus 32.
func HeaderListSize(fields ...[]hpack.HeaderField) uint32 {
	n := 0
	for _, fs := range fields {
		for _, f := range fs {
			n += len(f.Name) + len(f.Value) + 32
		}
	}
	return uint32(min(n, 1<<32-1))
}
