// Package guard protects an HTTP server at the connection level, before
// any request reaches a handler (seed 004, "L7 防护"):
//
//   - accept caps: open connections of the whole server (default derived
//     from RLIMIT_NOFILE), and per client address (IPv4 /32, IPv6 /64)
//     open connections, incomplete connections (accepted, no complete
//     request head yet) and accept rate. Refused sockets are closed at
//     once with a reset; the state lives in a bounded keyed.Table keyed by
//     a keyed hash of the address, so no raw address is stored and a full
//     table refuses new addresses rather than forgetting old ones;
//   - slow clients (Slowloris): a hard deadline for each request head and
//     a minimum receive rate, enforced as a bounded time credit, for the
//     TLS handshake, request heads and HTTP/1.1 request bodies. A slow
//     plaintext HTTP/1.1 head gets a 408, a slow body makes the handler's
//     body read fail with a timeout (the server answers 408), anything
//     else is closed;
//   - TLS handshake floods: handshakes per address per second in a fixed
//     array of (second<<32)|count atomics indexed by a keyed hash, checked
//     at accept before any handshake work; a cap on concurrent
//     handshakes; a handshake timeout;
//   - HTTP/2 abuse: a connection wrapper (WrapH2) that follows every frame
//     header in both directions and enforces concurrent streams, stream
//     and reset rates, Envoy's premature-reset rule, CONTINUATION count
//     and size, and PING, SETTINGS, WINDOW_UPDATE, empty DATA and PRIORITY
//     floods; an abusive connection gets GOAWAY ENHANCE_YOUR_CALM and is
//     closed at once, whatever its handlers do;
//   - overload: pressure from open connections, in-flight requests and the
//     heap moves a state machine Normal → StopAccepting → NoKeepAlive →
//     Shedding (503 overloaded) and back with hysteresis.
//
// The connection-level parts (Listener, Conn, WrapH2, the overload
// manager) do not depend on net/http's Server: a server engine reports
// request heads to a Conn (HeadDone, BodyStart/BodyDone, RequestDone,
// Hijacked) and requests to the Guard (BeginRequest/EndRequest). Thin
// net/http adapters do this for net/http: ConnContext, ConnState,
// BeginRequest/EndRequest or Middleware, and ConfigureServer, which also
// serves HTTP/2 (TLS and h2c) through WrapH2 with golang.org/x/net/http2.
//
// Every limit is a field of Config with a default and a validated range;
// Guard.Reload changes them at run time, except the three sizes fixed at
// New. Events reach Hooks (counters for the caller's metrics) with fixed,
// low-cardinality reasons; overload transitions are also logged. A Guard
// starts no goroutine; the few timers it uses belong to the caller's
// Accept and Read calls.
package guard
