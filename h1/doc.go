// Package h1 holds the HTTP/1.1 wire primitives of Bulwark's fast engine:
// a strict request-head parser, an upstream response-head parser, the
// chunked transfer coding, and buffered connection readers and writers
// that reuse their memory from one message to the next.
//
// # A strict subset of net/http
//
// Request smuggling lives in the gaps between two parsers that frame the
// same bytes differently. The fast engine sits next to net/http on one
// listener, so its parser is defined against net/http's: [ParseRequest]
// accepts only a strict subset of what net/http's server accepts, and
// frames every request it accepts exactly as net/http does (method,
// target, header fields, body length or chunked coding, keep-alive). Every
// other head is declined ([ErrDecline]): the server hands the connection,
// with the bytes already read, to net/http, which answers it as it always
// does. So a malformed head (CL and TE together, duplicate or
// comma-listed Content-Length, obs-fold, bare LF, control bytes, an
// unsupported Transfer-Encoding, an absolute-form target, an over-long
// line, HTTP/1.0, a missing Host, Expect, Upgrade, ...) is answered
// exactly as net/http answers it, by net/http.
//
// What the subset accepts:
//
//   - request line: token SP origin-form SP "HTTP/1.1" CRLF, the target
//     made of visible ASCII only, its path part free of malformed
//     percent-escapes;
//   - header fields: token ":" OWS value OWS CRLF, no obs-fold, values of
//     visible ASCII, SP, HTAB and obs-text (0x80–0xFF);
//   - exactly one Host field with a plain host[:port] value;
//   - at most one Content-Length field of decimal digits, or exactly one
//     Transfer-Encoding field whose value is "chunked", never both;
//   - no Expect and no Upgrade field.
//
// Chunked bodies are decoded by [Body], a port of net/http's
// decoder that accepts and refuses exactly the same chunk framing
// (sizes, extensions, CRLF rules, the non-data overhead bound, trailers).
//
// The parsed [Request] refers to the reader's buffer: its byte slices are
// valid until the next head is parsed.
package h1
