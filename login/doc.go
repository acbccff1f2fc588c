// Package login throttles password-login attempts and locks accounts after
// repeated failed passwords, without ever turning a cache outage into a
// login outage, and without ever turning a flood into an open door.
//
// # Dimensions
//
// A [Limiter] counts each attempt in up to three dimensions, each a
// rolling window (attempts at or before now−Window are forgotten; a full
// window rejects until its oldest attempt leaves it; rejected attempts
// are not recorded, so they never extend the wait; nothing clears a count
// early, not even a successful login):
//
//   - the account dimension, per client address and normalized username:
//     Limit attempts (default 5) per Window (default 60 s);
//   - the client dimension, per client address across all usernames
//     (Config.PerClient, off unless set; the gateway and this
//     documentation recommend [RecommendedPerClientLimit] per minute): it
//     bounds credential stuffing and password spraying from one address,
//     and how many keys one address can add to a store;
//   - the username dimension across addresses: the [Lockout]
//     (Config.Lockout), fed by the outcome of each admitted attempt.
//
// Call [Limiter.Evaluate] for every well-formed attempt before checking
// the password — right password, wrong password and unknown user all
// count; a request without credentials is a 400 and is not counted. The
// checks run lockout, then client, then account, and the first refusal
// ends the attempt, so a refused attempt never creates a per-(client,
// account) key. [Decision.Reason] says which dimension refused:
// [ReasonAccount], [ReasonClient], [ReasonLocked] or [ReasonCapacity]
// (below) — a fixed word for metrics that carries no username or address.
//
// Usernames are normalized by Unicode equivalence by default: trimmed,
// NFKC and case folding, so "ｃarol" and "CAROL" are carol (no accent
// folding; see [Folding], whose FoldLower is seed 003's trim and
// lower-case). Store keys are
// SHA-256 over a domain tag and the length-prefixed address and normalized
// username (the client dimension hashes the address alone under its own
// tag); raw values never reach a store, a log or an event. SHA-256 is not
// secrecy: whoever reads the store can test guesses. The address should be
// the socket peer or come from a trusted-proxy contract
// ([github.com/bulwarkhq/bulwark/peer]); behind a proxy without one, every
// client shares the proxy's address: the account dimension degrades to
// Limit attempts per username per Window for everyone (which lets anyone
// exhaust a username's quota for the rest of the window) and the client
// dimension to one budget for all.
//
// # Full tables refuse; failing caches degrade
//
// A bounded store ([MemoryStore], [MemoryLockoutStore]) never holds more
// than its capacity and never evicts a live key. When it is full of live
// keys, the rule is: a key that cannot be inserted is refused, keys already
// present keep their exact limits. The Limiter answers such an attempt as
// rejected with [ReasonCapacity] and a Retry-After of the window of the
// dimension whose key did not fit (by then every key present now has
// expired or been renewed by live traffic); the Lockout answers an account
// it has no room for as locked ([LockStatus.Full]), since a failed
// password for it could not be counted. A full table emits no event: it is
// not a failing cache.
//
// Why refuse rather than let through: a table that lets new keys through
// when full is switched off by whoever fills it — 10,000 junk usernames
// from one address used to fill the default table, after which every
// guess at every account passed. Refusing turns the flood into a denial of
// new logins for as long as the table stays full, which is bounded and
// visible (reason "capacity" in metrics) instead of silent. Evicting live
// keys would be the same hole with extra steps (the attacker evicts his
// own throttled keys). Filling the table is made expensive instead: with
// the client dimension one address adds at most PerClient.Limit + 1 keys
// per window, so filling a table of C keys takes about C/(PerClient.Limit
// + 1) addresses sending all the time; size the capacity (and, behind a
// load balancer, the trusted-proxy contract) for that.
//
// The degraded mode stays what it is for a failing or disabled cache (a
// Redis that is down, [Disabled]): Evaluate answers Allowed, Degraded,
// Remaining −1, no ResetAt and no retry, because the quota is unknown and
// the password and account checks must still run. Each Limiter and each
// [Lockout] tracks which kinds of cache operation ([OpRead], [OpWrite],
// [OpRemove]) have failed and tells a [Listener]: [CacheUnavailable] at
// the first observed failure, [CacheRecovered] once every failed kind has
// since succeeded — a successful read never clears a failed write. These
// are per-use, per-instance observations, not a diagnosis of the shared
// backend, and delivery is synchronous and best effort: a panicking
// listener is recovered and changes nothing, a slow one slows the logins
// that observe a transition.
//
// # Stores
//
// A [Store] decides one attempt atomically. [MemoryStore] is a bounded
// table (default 10,000 keys, at most [MaxCapacity]; entries expire with
// the window) for one process: best effort, lost on restart, not shared
// between replicas. Both dimensions share it. Package
// [github.com/bulwarkhq/bulwark/login/redisstore] decides in one Lua
// script on the Redis server's clock, so the limit holds exactly across
// any number of replicas (plain get/put on a shared cache could not
// promise that).
//
// # Lockout
//
// A [Lockout] is keyed by username alone: MaxFailures failed passwords
// (default 10) within Window (default 15 min) lock the account for
// Duration (default 15 min). It lets an attacker lock a real user out, so
// it is bounded in time and never consults the user table; failures of
// unknown usernames count the same way and a locked account gets the same
// answer whether it exists or not, so it reveals nothing about which
// accounts exist. Feed it from the login handler's answer
// ([Lockout.RecordStatus]: LockoutConfig.FailureStatus, default 401 and
// 403, is a failure; 2xx a success), or call RecordFailure and
// RecordSuccess yourself. A lockout-cache failure skips the protection and
// never fails the login; misconfiguration fails construction.
//
// # Credentials
//
// [ReadUsername] reads the username from every place common frameworks
// read a form field from — the query string, a JSON object body (declared
// or not), a URL-encoded form and a bounded multipart/form-data body — and
// refuses a request that names more than one account
// ([ErrAmbiguousCredentials]): otherwise the throttle could count one
// account while the handler checks another. It bounds the body, refuses
// content codings, and puts the very same bytes back for the handler and
// for proxy retries. Every method counts when it carries the field; a safe
// method without it (a login page on the same path) is left to pass
// uncounted. [ProblemFor] maps each of its errors, and those of Evaluate,
// to one wire answer.
//
// # HTTP
//
// [NewMiddleware] wraps a login handler (func(http.Handler) http.Handler):
// it reads the username, evaluates the attempt, answers refusals, passes
// admitted attempts on with the X-RateLimit-* fields and feeds the
// handler's status to the lockout. The writers are exported so that a
// gateway gives exactly the same answers: [Reject] sends 429 with
// Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
// (an RFC 3339 UTC instant with "Z", rounded up), the IETF RateLimit and
// RateLimit-Policy fields of the "login" policy and a problem+json body
// with code and errorCode "rate-limit-exceeded" and retryAfter — the same
// answer for every [Reason], so a locked account looks like a throttled
// one; [RejectError] answers an error of ReadUsername or Evaluate. Allowed
// attempts carry the X-RateLimit-* fields too ([SetHeaders]); degraded
// ones only X-RateLimit-Limit. The X-RateLimit-* fields are application
// fields; clients should wait by Retry-After.
//
// # Configuration files
//
// A [Policy] is one login endpoint's throttle as a configuration file
// states it (the gateway's routes[].login section: the fields, the
// folding, both windows, the lockout, the table bounds and the mode). Its
// Validate names every invalid key with its range, and its methods give
// the [Config], [LockoutConfig], [UsernameOptions] and [MemoryConfig]
// to build from; [DefaultPolicy] holds the defaults.
package login
