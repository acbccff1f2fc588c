package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"

	"github.com/bulwarkhq/bulwark/wire"
)

// The page, its script, its style sheet and its icon, written by hand.
//
//go:embed ui/index.html ui/app.js ui/app.css ui/favicon.svg
var uiFS embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// assets maps a path under Prefix to its file ("" is the page).
var assetFiles = map[string]struct{ file, contentType string }{
	"":            {"ui/index.html", "text/html; charset=utf-8"},
	"app.js":      {"ui/app.js", "text/javascript; charset=utf-8"},
	"app.css":     {"ui/app.css", "text/css; charset=utf-8"},
	"favicon.svg": {"ui/favicon.svg", "image/svg+xml"},
}

func loadAssets() (map[string]*asset, error) {
	out := make(map[string]*asset, len(assetFiles))
	for p, f := range assetFiles {
		b, err := uiFS.ReadFile(f.file)
		if err != nil {
			return nil, fmt.Errorf("console: embedded %s: %w", f.file, err)
		}
		sum := sha256.Sum256(b)
		out[p] = &asset{body: b, contentType: f.contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out, nil
}

// serveAsset serves the page and its files: GET and HEAD only,
// revalidated on every use (ETag), so a new binary's page is never mixed
// with an old script.
func (c *console) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := c.static[name]
	if !ok {
		wire.Reject(w, r, wire.New(wire.CodeNotFound))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(a.body)
	}
}
