package h2_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/bulwarkhq/bulwark/h2"
)

// okStream answers a stream's request with "ok", as a handler writing
// HTTP/1.1 does.
func okStream(s *h2.Stream) {
	defer s.Close()
	br := bufio.NewReader(s)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	_, _ = io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
}

// serveConn serves one connection of a loopback pair with h2 and
// returns the client's side, its preface and SETTINGS sent.
func serveConn(t *testing.T, cfg *h2.Config) (net.Conn, *http2.Framer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The listener closes once it has accepted: closed before, it would
	// reset the client's connection still waiting in its backlog.
	t.Cleanup(func() { ln.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		h2.NewConn(c, cfg, false, okStream).Serve()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

// next reads frames until one for which want returns true; it fails t
// if the connection ends first.
func next(t *testing.T, fr *http2.Framer, what string, want func(http2.Frame) bool) http2.Frame {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if want(f) {
			return f
		}
	}
}

// A client's GOAWAY (whatever its code) starts no special behaviour:
// the connection still answers a PING sent after it (h2spec "7. Sends a
// GOAWAY frame with unknown error code"), and closes later.
func TestClientGoAwayLeavesConnectionWorking(t *testing.T) {
	_, fr := serveConn(t, &h2.Config{})
	if err := fr.WriteGoAway(0, http2.ErrCode(0xff), nil); err != nil {
		t.Fatal(err)
	}
	next(t, fr, "our GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	// (The PING comes after the server handled the GOAWAY: it answered it.)
	if err := fr.WritePing(false, [8]byte{7}); err != nil {
		t.Fatal(err)
	}
	next(t, fr, "PING ACK", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() && p.Data[0] == 7 })
}

// A request is answered on its stream; the answer's fields come as
// HEADERS, its body as DATA with END_STREAM.
func TestStreamAnswered(t *testing.T) {
	_, fr := serveConn(t, &h2.Config{})
	var hb []byte
	enc := hpack.NewEncoder(&byteWriter{&hb})
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	h := next(t, fr, "HEADERS", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	if h.PseudoValue("status") != "200" || h.StreamID != 1 {
		t.Fatalf("status %q on stream %d", h.PseudoValue("status"), h.StreamID)
	}
	d := next(t, fr, "DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if string(d.Data()) != "ok" || !d.StreamEnded() {
		t.Fatalf("DATA %q end %v", d.Data(), d.StreamEnded())
	}
}

type byteWriter struct{ b *[]byte }

func (w *byteWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

// The server's SETTINGS advertise what it enforces: concurrent streams,
// window, frame size, header list size, no push, and the HPACK table
// size when it is not the protocol's 4096.
func TestSettingsAdvertised(t *testing.T) {
	_, fr := serveConn(t, &h2.Config{MaxConcurrentStreams: 7, MaxHeaderTableSize: 8192, MaxHeaderListSize: 5000})
	f := next(t, fr, "SETTINGS", func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && !s.IsAck() }).(*http2.SettingsFrame)
	want := map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: 7, http2.SettingHeaderTableSize: 8192, http2.SettingMaxHeaderListSize: 5000,
		http2.SettingEnablePush: 0, http2.SettingInitialWindowSize: h2.DefaultWindow, http2.SettingMaxFrameSize: 16384,
	}
	for id, v := range want {
		if got, ok := f.Value(id); !ok || got != v {
			t.Errorf("%v = %d (%v), want %d", id, got, ok, v)
		}
	}
}
