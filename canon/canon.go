// Package canon computes the canonical form of a request's path and host:
// the identity a protection layer must key on so that every spelling a
// lenient web framework routes to the same handler is counted as one.
//
// Frameworks disagree about paths. Express ignores letter case and a
// trailing slash; Tomcat drops ";jsessionid=…" path parameters (and treats
// "..;" as ".."); many decode %2F into a separator; some treat "\" as "/";
// most resolve "." and ".." segments and collapse "//". A gateway that
// matches "/login" literally can be walked around with "/LOGIN",
// "/login/", "/login;x=1", "/a/../login" or "/login%2F". [Path] folds all
// of these into one canonical form; matching then only has to compare
// segments case-insensitively and ignore the trailing slash (or not, per
// route).
//
// Encodings that frameworks disagree on are not guessed at: an encoded
// slash or backslash (%2F, %5C), an encoded NUL or other control byte, a
// raw backslash, and a percent-escape that survives one round of decoding
// (double encoding such as %252F) are reported in [Path.Flags], so a
// caller can refuse them (the gateway answers 400 invalid_path unless the
// route opts in). Malformed escapes are an error, and so is a raw "#": a
// request target never holds a fragment (RFC 9112 §3.2), and a server
// that reads one as a fragment and a server that forwards it (escaped as
// %23) see two different paths.
//
// The canonical form is for matching and counting only. The request that is
// forwarded keeps the client's own path: rewriting it would change what the
// upstream sees.
package canon

import (
	"errors"
	"strings"
)

// MaxPathBytes is the longest raw path Path accepts. Request targets are
// bounded by the HTTP host long before this (limits.max_url_bytes).
const MaxPathBytes = 64 << 10

// ErrInvalidPath is returned for a path that cannot be canonicalized: empty
// or not starting with "/", longer than MaxPathBytes, holding a raw "#"
// or a malformed percent-escape.
var ErrInvalidPath = errors.New("canon: invalid path")

// Flag reports a property of the raw path that a caller may refuse.
type Flag uint8

// Flags of a canonical path.
const (
	// EncodedSeparator: the path holds %2F or %5C (an encoded "/" or "\").
	EncodedSeparator Flag = 1 << iota
	// Backslash: the path holds a raw "\", which some servers treat as "/".
	Backslash
	// ControlByte: the decoded path holds NUL or another control byte
	// (from %00..%1F or %7F).
	ControlByte
	// DoubleEncoded: a percent-escape survives one round of decoding (for
	// example %252F decodes to %2F), so a server that decodes twice sees
	// another path.
	DoubleEncoded
	// DotSegments: "." or ".." segments were resolved.
	DotSegments
	// Params: ";" path parameters were dropped.
	Params
)

// Ambiguous is the set of flags a caller should refuse by default: the
// encodings whose meaning depends on the server behind.
const Ambiguous = EncodedSeparator | Backslash | ControlByte | DoubleEncoded

// Result is a canonical path.
type Result struct {
	// Path is the canonical path: percent-decoded, "\" read as "/",
	// ";" parameters dropped from every segment, "." and ".." resolved,
	// empty segments removed, always starting with "/" and never ending
	// with one (except the root, "/"). Letter case is kept; compare
	// segments with strings.EqualFold for case-insensitive matching.
	Path string
	// Trailing reports that the raw path ended with "/" (or with a "."
	// or ".." segment, which names a directory), ignoring the root.
	Trailing bool
	// Flags report encodings a caller may refuse; see Ambiguous.
	Flags Flag
}

// Path canonicalizes raw, the path of a request target as sent by the
// client (still percent-encoded, without the query). "*" (the
// asterisk-form of OPTIONS) canonicalizes to itself.
//
// Path does not allocate when raw is already canonical (no escapes, no
// parameters, no dot or empty segments, no backslash), apart from
// dropping a trailing slash, which slices raw.
func Path(raw string) (Result, error) {
	if raw == "*" {
		return Result{Path: "*"}, nil
	}
	if raw == "" || raw[0] != '/' || len(raw) > MaxPathBytes {
		return Result{}, ErrInvalidPath
	}
	if fast(raw) {
		if len(raw) > 1 && raw[len(raw)-1] == '/' {
			return Result{Path: raw[:len(raw)-1], Trailing: true}, nil
		}
		return Result{Path: raw}, nil
	}
	return slow(raw)
}

// fast reports whether raw needs no work beyond dropping one trailing
// slash: no '%', ';', '\', '#', no empty, "." or ".." segment.
func fast(raw string) bool {
	prevSlash := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case '%', ';', '\\', '#':
			return false
		case '/':
			if prevSlash {
				return false // empty segment
			}
			prevSlash = true
			continue
		case '.':
			if prevSlash {
				// A segment starting with '.': "." or ".." (or a dotfile,
				// which the slow path keeps as is).
				j := i + 1
				if j < len(raw) && raw[j] == '.' {
					j++
				}
				if j == len(raw) || raw[j] == '/' {
					return false
				}
			}
		}
		if c < 0x20 || c == 0x7f {
			return false
		}
		prevSlash = false
	}
	// A trailing "/" after a non-empty path is handled by the caller; two
	// in a row were caught above.
	return true
}

// slow decodes and rebuilds the path.
func slow(raw string) (Result, error) {
	var res Result
	// Decode once. '\' is read as '/' (decoded %5C too, flagged).
	dec := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case '#':
			return Result{}, ErrInvalidPath
		case '%':
			if i+2 >= len(raw) || !ishex(raw[i+1]) || !ishex(raw[i+2]) {
				return Result{}, ErrInvalidPath
			}
			b := unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
			switch {
			case b == '/':
				res.Flags |= EncodedSeparator
			case b == '\\':
				res.Flags |= EncodedSeparator
				b = '/'
			case b < 0x20 || b == 0x7f:
				res.Flags |= ControlByte
			}
			dec = append(dec, b)
		case '\\':
			res.Flags |= Backslash
			dec = append(dec, '/')
		default:
			if c < 0x20 || c == 0x7f {
				res.Flags |= ControlByte
			}
			dec = append(dec, c)
		}
	}
	// A percent-escape that survived one decoding (from %25) means a
	// server that decodes twice sees another path.
	for k := 0; k+2 < len(dec); k++ {
		if dec[k] == '%' && ishex(dec[k+1]) && ishex(dec[k+2]) {
			res.Flags |= DoubleEncoded
			break
		}
	}
	// Split into segments, drop parameters, resolve dots, skip empties.
	out := make([]byte, 0, len(dec)+1)
	segStarts := make([]int, 0, 16) // offsets in out of each kept segment's '/'
	trailing := false
	for i := 0; i < len(dec); {
		// dec[i] == '/' at the top of the loop.
		j := i + 1
		for j < len(dec) && dec[j] != '/' {
			j++
		}
		seg := dec[i+1 : j]
		if k := indexByte(seg, ';'); k >= 0 {
			seg = seg[:k]
			res.Flags |= Params
		}
		last := j == len(dec)
		switch string(seg) {
		case "":
			if last && i > 0 {
				trailing = true // the path ended with "/"
			}
		case ".":
			res.Flags |= DotSegments
			trailing = last
		case "..":
			res.Flags |= DotSegments
			if n := len(segStarts); n > 0 {
				out = out[:segStarts[n-1]]
				segStarts = segStarts[:n-1]
			}
			trailing = last
		default:
			segStarts = append(segStarts, len(out))
			out = append(out, '/')
			out = append(out, seg...)
			trailing = false
		}
		i = j
	}
	if len(out) == 0 {
		res.Path = "/"
		res.Trailing = false
	} else {
		res.Path = string(out)
		res.Trailing = trailing
	}
	return res, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// Host returns the canonical form of a Host header or authority:
// lower-case ASCII, without the port and without a trailing dot
// ("ADMIN.Example.com.:443" → "admin.example.com"). An IPv6 literal keeps
// its brackets ("[::1]:8080" → "[::1]"). Host does not allocate when the
// name is already lower-case.
func Host(h string) string {
	if h == "" {
		return ""
	}
	if h[0] == '[' {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[:i+1]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	for len(h) > 0 && h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	return strings.ToLower(h)
}

// Target splits a request target into its raw path, for [Path]: the
// origin form "/p?q" gives "/p"; the absolute form
// "http://host/p?q" gives "/p" (and "" path gives "/"); "*" gives "*".
// The authority of an absolute-form target is returned too, so that a
// caller matches it exactly like the Host header. A "#" is not a
// fragment delimiter here (a request target has none): it stays in the
// path, which [Path] then refuses.
func Target(target string) (path, authority string) {
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	if target == "" || target[0] == '/' || target == "*" {
		return target, ""
	}
	// Absolute form: scheme "://" authority path.
	i := strings.Index(target, "://")
	if i < 0 {
		return target, ""
	}
	rest := target[i+3:]
	j := strings.IndexByte(rest, '/')
	if j < 0 {
		return "/", rest
	}
	return rest[j:], rest[:j]
}
