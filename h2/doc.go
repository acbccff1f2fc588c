// Package h2 is Bulwark's own HTTP/2 server connection: the engine behind
// host.H2Native (listen.http2_engine: native).
//
// A connection is served by one goroutine reading frames
// (golang.org/x/net/http2's Framer, with HPACK decoding and CONTINUATION
// assembly) and one writer goroutine that sends the frames of every
// stream queued since its last write in one write to the connection, so
// that several streams' responses share a TLS record and a system call.
// There is no new goroutine per stream: a stream is given to an idle
// worker of the connection (one serves a stream at a time, then waits
// for the next until the connection ends), or a new one when all are
// busy, because the handler of a proxied request blocks on its
// upstream.
//
// A stream presents itself to its handler as a net.Conn carrying one
// HTTP/1.1 exchange (Stream): Read returns the request as an HTTP/1.1
// head built from the HEADERS (":authority" as Host, the cookie fields
// joined) followed by its body (DATA, in the chunked coding when no
// content-length was given), and what the handler writes, an HTTP/1.1
// response (status line, fields, a Content-Length or chunked body), is
// sent as HEADERS and DATA frames. The host's fast engine serves it as
// it serves an HTTP/1.1 connection, through the very same code (probes,
// bounds, admission, the FastHandler), and hands it to net/http's
// HTTP/1.1 server when it declines the request.
//
// The response header block is encoded without the HPACK dynamic table
// (literal fields, static-table names and indexed common statuses): it
// needs no state shared between streams and no lock while it is built.
//
// Bounds: MaxConcurrentStreams (a stream beyond it is refused), the
// header list size (a larger request is answered 431), the frame size,
// the receive windows of each stream and of the connection (a peer that
// sends past them is a flow-control error), the idle timeout. The abuse
// bounds (rapid reset, CONTINUATION and SETTINGS/PING floods) are the
// connection guard's (package guard's WrapH2), which the host puts under
// this server as it does under x/net's.
package h2
