package control

import (
	"crypto/sha256"
	"net/http"
)

// AuthorizedFor reports whether a request with the given Authorization
// header values passes the bearer-token check for token.
func AuthorizedFor(token string, authorization ...string) bool {
	sum := sha256.Sum256([]byte(token))
	a := &api{tokenSum: sum[:]}
	r := &http.Request{Header: http.Header{}}
	if authorization != nil {
		r.Header["Authorization"] = authorization
	}
	return a.authorized(r) == ""
}
