// Package login throttles password-login attempts and locks accounts after
// repeated failed passwords, without ever turning a cache outage into a
// login outage (seed 003).
//
// # Limiter
//
// A [Limiter] allows at most Limit attempts (default 5) per client address
// and normalized username in any rolling Window (default 60 s). Call
// [Limiter.Evaluate] for every well-formed attempt before checking the
// password — right password, wrong password and unknown user all count;
// a request without credentials is a 400 and is not counted. Attempts at
// or before now−Window are forgotten, a full window rejects until its
// oldest attempt leaves (the next slot is oldest+Window), rejected
// attempts are not recorded so they never extend the wait, and nothing
// clears the count early, not even a successful login.
//
// Usernames are normalized by trimming white space and lower-casing (no
// accent or Unicode folding: see [NormalizeUsername]). The store key is
// SHA-256 over the length-prefixed address and normalized username; raw
// values never reach a store, a log or an event. SHA-256 is not secrecy:
// whoever reads the store can test guesses. The address should be the
// socket peer or come from a trusted-proxy contract
// ([github.com/bulwarkhq/bulwark/peer]); behind a proxy without one, every
// client shares the proxy's address, and the quota degrades to Limit
// attempts per username per Window for everyone — which also lets anyone
// exhaust a username's quota for the rest of the window.
//
// # Stores
//
// A [Store] decides one attempt atomically. [MemoryStore] is a bounded
// table (default 10,000 keys, entries expire with the window) for one
// process: best effort, lost on restart, not shared between replicas.
// Package [github.com/bulwarkhq/bulwark/login/redisstore] decides in one
// Lua script on the Redis server's clock, so the limit holds exactly
// across any number of replicas (plain get/put on a shared cache could
// not promise that).
//
// # Degraded mode and events
//
// When the store fails, or is switched off ([Disabled], [ErrDisabled]),
// Evaluate answers Allowed, Degraded, Remaining −1, no ResetAt and no
// retry: the quota is unknown and the password and account checks must
// still run. Each Limiter and each [Lockout] tracks which kinds of cache
// operation ([OpRead], [OpWrite], [OpRemove]) have failed and tells a
// [Listener]: [CacheUnavailable] at the first observed failure,
// [CacheRecovered] once every failed kind has since succeeded — a
// successful read never clears a failed write. These are per-use,
// per-instance observations, not a diagnosis of the shared backend, and
// delivery is synchronous and best effort: a panicking listener is
// recovered and changes nothing, a slow one slows the logins that observe
// a transition.
//
// # Lockout
//
// A [Lockout] is separate from the limiter: MaxFailures failed passwords
// (default 10) within Window (default 15 min) lock the account for
// Duration (default 15 min). It lets an attacker lock a real user out, so
// it is bounded in time and keyed by username alone, never consulting the
// user table; record failures for unknown usernames too and answer a
// locked account like any failed login, and it reveals nothing about
// which accounts exist. A lockout-cache failure skips the protection and
// never fails the login; misconfiguration fails construction.
//
// # HTTP
//
// [Middleware] wraps a login handler: 400 for missing credentials (not
// counted), 429 with Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (an RFC 3339 UTC instant with "Z") and a problem+json
// body with errorCode "rate-limit-exceeded" and retryAfter; allowed
// attempts carry the X-RateLimit-* fields too. Degraded attempts carry only
// X-RateLimit-Limit. These are application fields, not the IETF RateLimit
// fields; clients should wait by Retry-After.
package login
