package host_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

// nativeModes are the native HTTP/2 engine's modes.
var nativeModes = []mode{hosttest.ModeH2Native, hosttest.ModeH2CNative}

// The native HTTP/2 engine serves each stream through the fast engine's
// FastHandler: GET and POST (a body larger than every flow-control
// window, so that WINDOW_UPDATEs must flow), many streams at once on
// one connection, and a request the handler declines goes to net/http
// (over the stream, as HTTP/1.1).
func TestH2NativeServesThroughFastHandler(t *testing.T) {
	for _, m := range nativeModes {
		t.Run(m.Name, func(t *testing.T) {
			f := &fastHandler{decline: "/declined"}
			e := startFast(t, m, host.Limits{MaxBodyBytes: 8 << 20}, f)
			r := e.Do("GET", "/a?q=1", nil)
			e.CheckProto(r)
			if r.Status != 200 || r.Body != "fast /a " || r.Header.Get("X-Engine") != "fast" {
				t.Fatalf("GET: %d %q %v", r.Status, r.Body, r.Header)
			}
			big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB > the 1 MiB windows
			r = e.Do("POST", "/up", bytes.NewReader(big))
			if r.Status != 200 || r.Body != "fast /up "+string(big) {
				t.Fatalf("POST: %d, %d bytes", r.Status, len(r.Body))
			}
			// Without a content-length: the chunked coding inside.
			r = e.Do("POST", "/chunks", io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")))
			if r.Status != 200 || r.Body != "fast /chunks abcd" {
				t.Fatalf("POST without length: %d %q", r.Status, r.Body)
			}
			r = e.Do("POST", "/declined/x", strings.NewReader("body"))
			if r.Status != 200 || r.Body != "nethttp /declined/x" || r.Header.Get("X-Engine") != "nethttp" {
				t.Fatalf("declined: %d %q %v", r.Status, r.Body, r.Header)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for i := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := strings.Repeat(fmt.Sprint(i), 1000+i)
					res, err := e.Try("POST", fmt.Sprintf("/c%d", i), strings.NewReader(body))
					if err != nil {
						errs <- err
						return
					}
					if want := fmt.Sprintf("fast /c%d %s", i, body); res.Body != want {
						errs <- fmt.Errorf("stream %d: %q", i, res.Body[:min(len(res.Body), 40)])
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if e.Dials.Load() != 1 {
				t.Errorf("%d connections, want 1", e.Dials.Load())
			}
			if f.nethttp.Load() != 1 {
				t.Errorf("net/http served %d requests, want 1", f.nethttp.Load())
			}
		})
	}
}

// A large response is sent within the client's flow-control windows
// (and the chunked coding a handler writes without a length is
// undone), HEAD gets no body.
func TestH2NativeLargeResponse(t *testing.T) {
	big := bytes.Repeat([]byte("z0123456789"), 400_000)
	sum := sha256.Sum256(big)
	for _, m := range nativeModes {
		t.Run(m.Name, func(t *testing.T) {
			f := &fastHandler{serve: func(x *h1.Exchange) {
				if string(x.Req.Path()) == "/len" {
					x.Header().Set("Content-Length", fmt.Sprint(len(big)))
				}
				_, _ = x.Write(big)
			}}
			e := startFast(t, m, host.Limits{}, f)
			for _, p := range []string{"/len", "/chunked"} {
				r := e.Do("GET", p, nil)
				if r.Status != 200 || sha256.Sum256([]byte(r.Body)) != sum {
					t.Fatalf("%s: %d, %d bytes, want %d", p, r.Status, len(r.Body), len(big))
				}
			}
			r := e.Do("HEAD", "/len", nil)
			if r.Status != 200 || r.Body != "" || r.Header.Get("Content-Length") != fmt.Sprint(len(big)) {
				t.Fatalf("HEAD: %d %q %v", r.Status, r.Body, r.Header)
			}
		})
	}
}

var _ = http.MethodGet
