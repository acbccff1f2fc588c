package h2conn

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type ctxKey struct{}

// wrapped counts the connections wrap was given and how.
type wrapped struct {
	mu      sync.Mutex
	preface []bool
	reads   atomic.Int64 // reads through the wrappers
	refuse  bool
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Read(p)
}

func (w *wrapped) wrap(c net.Conn, prefaceRead bool) net.Conn {
	w.mu.Lock()
	w.preface = append(w.preface, prefaceRead)
	w.mu.Unlock()
	if w.refuse {
		return nil
	}
	return countingConn{c, &w.reads}
}

func handler(w http.ResponseWriter, r *http.Request) {
	v, _ := r.Context().Value(ctxKey{}).(string)
	_, _ = io.WriteString(w, r.Proto+" "+v)
}

// start serves srv (h2c when tls is false) with Serve's wrapper and
// returns a client for it.
func start(t *testing.T, useTLS bool, w *wrapped) (*http.Client, string) {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(handler))
	ts.Config.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(context.Background(), ctxKey{}, "base")
	}
	if !useTLS {
		ts.Config.Protocols = new(http.Protocols)
		ts.Config.Protocols.SetHTTP1(true)
		ts.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	if err := Serve(ts.Config, w.wrap); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if useTLS {
		ts.EnableHTTP2 = true
		ts.StartTLS()
		tr.TLSClientConfig = &tls.Config{RootCAs: ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
		tr.Protocols.SetHTTP2(true)
	} else {
		ts.Start()
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(ts.Close)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, ts.URL
}

// HTTP/2 over TLS (after ALPN) and in cleartext with prior knowledge is
// served through the wrapper, told whether the preface was read, with
// the server's base context.
func TestServeThroughWrapper(t *testing.T) {
	for _, c := range []struct {
		name    string
		tls     bool
		preface bool
	}{{"tls", true, false}, {"h2c", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			var w wrapped
			cl, url := start(t, c.tls, &w)
			for range 3 {
				resp, err := cl.Get(url + "/")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "HTTP/2.0 base" {
					t.Fatalf("answer %q", b)
				}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.preface) != 1 || w.preface[0] != c.preface {
				t.Fatalf("wrap calls %v, want one with prefaceRead %v", w.preface, c.preface)
			}
			if w.reads.Load() == 0 {
				t.Fatal("the server did not read through the wrapper")
			}
		})
	}
}

// A nil wrapper closes the connection: the request fails.
func TestServeWrapperRefuses(t *testing.T) {
	for _, useTLS := range []bool{true, false} {
		w := wrapped{refuse: true}
		cl, url := start(t, useTLS, &w)
		if resp, err := cl.Get(url + "/"); err == nil {
			resp.Body.Close()
			t.Fatalf("tls=%v: a refused connection answered %d", useTLS, resp.StatusCode)
		}
		w.mu.Lock()
		n := len(w.preface)
		w.mu.Unlock()
		if n == 0 {
			t.Fatalf("tls=%v: wrap never called", useTLS)
		}
	}
}

// A server whose TLS config cannot carry HTTP/2 is refused by
// http2.ConfigureServer, and Serve says so.
func TestServeConfigureError(t *testing.T) {
	srv := &http.Server{TLSConfig: &tls.Config{CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA}}}
	if err := Serve(srv, func(c net.Conn, _ bool) net.Conn { return c }); err == nil {
		t.Fatal("a config without an HTTP/2 cipher suite was accepted")
	}
}
