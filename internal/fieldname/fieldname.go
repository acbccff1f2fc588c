// Package fieldname compares HTTP field names the way the most lenient
// servers behind a gateway read them: case-insensitively, and with '_'
// equal to '-'. CGI-style environments (PHP, WSGI, CGI gateways) turn
// both X-Real-IP and X_Real_IP into HTTP_X_REAL_IP, so a gateway that
// removes, protects or keys on a field must treat every such spelling as
// that field.
package fieldname

import "strings"

// Equal reports whether a and b name the same field for such a server.
// It does not allocate.
func Equal[T string | []byte](a T, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Underscored reports whether name holds a '_': a spelling that such a
// server reads as the field with '-' in its place, and that no genuine
// client or proxy needs for the fields a gateway speaks for.
func Underscored[T string | []byte](name T) bool {
	for i := 0; i < len(name); i++ {
		if name[i] == '_' {
			return true
		}
	}
	return false
}

// Token reports whether name is a field name as RFC 9110 spells one: a
// non-empty token (letters, digits and !#$%&'*+-.^_`|~).
func Token(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
