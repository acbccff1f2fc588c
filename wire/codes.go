package wire

import (
	"net/http"
	"sort"
)

// Every problem code Bulwark sends, in one place. A code is a stable,
// machine-readable identifier: clients may switch on it, and it never
// changes meaning. Each code has the status it is normally sent with and a
// fixed detail sentence (see [Lookup]); no code's answer carries request
// data. Long-standing codes are kept verbatim
// (authentication_rate_limited, authentication_shield_unavailable,
// quota_exceeded, rate-limit-exceeded, not_ready).

// Pre-authentication shield.
const (
	// CodeAuthenticationRateLimited: the client or the process is over the
	// shield's budget, or its table is full (429).
	CodeAuthenticationRateLimited = "authentication_rate_limited"
	// CodeAuthenticationShieldUnavailable: the shield cannot decide (clock
	// anomaly, closed) and fails closed (503).
	CodeAuthenticationShieldUnavailable = "authentication_shield_unavailable"
)

// Route rate limits.
const (
	// CodeRateLimited: the route's rate limit is exhausted (429, or the
	// route's configured status).
	CodeRateLimited = "rate_limited"
	// CodeAmbiguousRateLimitKey: the header a rate limit keys on appears
	// more than once, so the gateway and the upstream could read different
	// values (400).
	CodeAmbiguousRateLimitKey = "ambiguous_rate_limit_key"
)

// Login throttle.
const (
	// CodeLoginRateLimitExceeded: too many login attempts (429). The
	// spelling is kept for the clients that already match on it.
	CodeLoginRateLimitExceeded = "rate-limit-exceeded"
	// CodeMissingCredentials: a login request without a username (400);
	// it is not counted.
	CodeMissingCredentials = "missing_credentials"
	// CodeInvalidLoginRequest: a login request whose username cannot be
	// read or is malformed (400); it is not counted.
	CodeInvalidLoginRequest = "invalid_login_request"
	// CodeAmbiguousCredentials: the username appears in more than one
	// place (query, body) or more than once with different values (400);
	// it is not counted and not forwarded.
	CodeAmbiguousCredentials = "ambiguous_credentials"
)

// Durable quotas and forward-auth.
const (
	// CodeQuotaExceeded: the operation's quota is exhausted (429).
	CodeQuotaExceeded = "quota_exceeded"
	// CodeQuotaUnavailable: the quota store cannot decide; fail closed (503).
	CodeQuotaUnavailable = "quota_unavailable"
	// CodeQuotaInvalidRequest: the quota identity of the request is
	// missing or malformed (400).
	CodeQuotaInvalidRequest = "quota_invalid_request"
	// CodeIdempotencyKeyRequired: a quota route needs an Idempotency-Key (400).
	CodeIdempotencyKeyRequired = "idempotency_key_required"
	// CodeIdempotencyKeyInvalid: the Idempotency-Key is repeated, longer
	// than 128 bytes or uses characters outside [A-Za-z0-9._:-] (400).
	CodeIdempotencyKeyInvalid = "idempotency_key_invalid"
	// CodeIdempotencyKeyReused: the Idempotency-Key was first used for a
	// different request (method, path or body) (422).
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeIdempotencyReplayLimit: the same request was replayed with its
	// Idempotency-Key more often than allowed (429).
	CodeIdempotencyReplayLimit = "idempotency_replay_limit"
	// CodeAuthUnavailable: the forward-auth service failed, timed out or
	// answered without a usable identity (503).
	CodeAuthUnavailable = "auth_unavailable"
)

// Request identity and routing.
const (
	// CodeNotFound: no route (or API endpoint) matches the request (404).
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: the path exists but not for this method (405).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeInvalidPath: the request path cannot be canonicalized or holds
	// an encoded separator (%2F, %5C) or NUL where the route does not
	// allow one (400).
	CodeInvalidPath = "invalid_path"
	// CodeBlocked: the client is on the deny list (403).
	CodeBlocked = "blocked"
)

// HTTP host and bounded JSON APIs.
const (
	// CodeNotReady: the process is starting and not ready yet (503).
	CodeNotReady = "not_ready"
	// CodeDraining: the process is shutting down and admits nothing new (503).
	CodeDraining = "draining"
	// CodeOverloaded: an admission bound is reached (503).
	CodeOverloaded = "overloaded"
	// CodeTimeout: the request timeout expired before the handler answered (504).
	CodeTimeout = "timeout"
	// CodeRequestTimeout: the client did not send its request in time (408).
	CodeRequestTimeout = "request_timeout"
	// CodeURLTooLong: the request target exceeds the URL bound (414).
	CodeURLTooLong = "url_too_long"
	// CodeTooManyHeaders: the request carries more header fields or bytes
	// than allowed (431).
	CodeTooManyHeaders = "too_many_headers"
	// CodePayloadTooLarge: the request body exceeds its bound (413).
	CodePayloadTooLarge = "payload_too_large"
	// CodeUnsupportedMediaType: the body's Content-Type is not accepted (415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeUnsupportedContentEncoding: the body is compressed or otherwise
	// content-coded where only identity is accepted (415).
	CodeUnsupportedContentEncoding = "unsupported_content_encoding"
	// CodeInvalidContentLength: the body ended before its announced
	// Content-Length (400).
	CodeInvalidContentLength = "invalid_content_length"
	// CodeInvalidJSON: the body is not one well-formed JSON value (400).
	CodeInvalidJSON = "invalid_json"
	// CodeInvalidRequest: the request could not be read (400).
	CodeInvalidRequest = "invalid_request"
	// CodeInvalidBody: the request body is malformed (bad chunked
	// encoding, shorter than announced) and could not be forwarded (400).
	CodeInvalidBody = "invalid_body"
	// CodeResponseTooLarge: the handler's answer exceeds the response bound (500).
	CodeResponseTooLarge = "response_too_large"
	// CodeInternal: the handler failed or panicked; nothing more is said (500).
	CodeInternal = "internal"
)

// Upstream proxy.
const (
	// CodeUpstreamUnavailable: the upstream could not be reached or failed
	// before answering (502).
	CodeUpstreamUnavailable = "upstream_unavailable"
	// CodeUpstreamTimeout: the upstream did not answer in time (504).
	CodeUpstreamTimeout = "upstream_timeout"
	// CodeUpstreamInvalidResponse: the upstream's response head could not
	// be framed without guessing (two different Content-Lengths,
	// Content-Length with Transfer-Encoding, a malformed status line or
	// field); it is not relayed and the upstream connection is closed
	// (502).
	CodeUpstreamInvalidResponse = "upstream_invalid_response"
	// CodeUpstreamUnhealthy: no target of the route's upstream is healthy
	// (its health checks failed, or each target was ejected after
	// consecutive failures); answered at once, nothing is dialed (503).
	CodeUpstreamUnhealthy = "upstream_unhealthy"
)

// Control API.
const (
	// CodeUnauthorized: a valid bearer token is required (401).
	CodeUnauthorized = "unauthorized"
	// CodeForbidden: the request came through a browser or under a
	// foreign host name (Origin present, Host not the API's) (403).
	CodeForbidden = "forbidden"
	// CodeListFull: the allow or deny list is at capacity (507).
	CodeListFull = "list_full"
	// CodeInvalidConfig: a reload found problems in the configuration (422).
	CodeInvalidConfig = "invalid_config"
	// CodeReloadUnsupported: the server has no configuration file to re-read (501).
	CodeReloadUnsupported = "reload_unsupported"
	// CodeReloadFailed: the reload failed; the previous configuration
	// keeps serving (500).
	CodeReloadFailed = "reload_failed"
	// CodeXDPUnavailable: the XDP program could not be updated (503).
	CodeXDPUnavailable = "xdp_unavailable"
	// CodeUnknownClient: the client fingerprint is not one this gateway
	// wrote (mistyped, from another gateway, or written under another
	// IPv6 grouping) (422).
	CodeUnknownClient = "unknown_client"
	// CodeAccountNotLocked: an unlock found the account neither locked
	// nor with failed passwords counted, on any login route (404).
	CodeAccountNotLocked = "account_not_locked"
	// CodeQuotaBucketNotFound: the quota bucket was never charged, or
	// no route has a quota with that operation (404).
	CodeQuotaBucketNotFound = "quota_bucket_not_found"
	// CodeStoreUnavailable: the store holding the lockout or quota
	// state (Redis, PostgreSQL) did not answer; nothing was changed that
	// the answer does not report (503).
	CodeStoreUnavailable = "store_unavailable"
)

// Operator console (package console).
const (
	// CodeSessionRequired: the console's API needs a session; log in
	// first (401).
	CodeSessionRequired = "session_required"
	// CodeInvalidToken: the token given at the console's login is not
	// the control token (401).
	CodeInvalidToken = "invalid_token"
	// CodeCrossOrigin: a console request that changes something did not
	// come from the console's own pages (no same-origin Sec-Fetch-Site
	// or Origin), or a console API request came from another site (403).
	CodeCrossOrigin = "cross_origin"
	// CodeUnknownHost: the Host header does not name the console's
	// listener (DNS rebinding) (403).
	CodeUnknownHost = "unknown_host"
)

// codeInfo is what the registry knows about a code.
type codeInfo struct {
	status int
	detail string
}

// registry maps every code to its usual status and fixed detail.
var registry = map[string]codeInfo{
	CodeAuthenticationRateLimited:       {429, "Too many requests from this client; retry later."},
	CodeAuthenticationShieldUnavailable: {503, "The service cannot admit requests right now; retry later."},
	CodeRateLimited:                     {429, "Too many requests; retry later."},
	CodeAmbiguousRateLimitKey:           {400, "The header this limit counts by appears more than once."},
	CodeLoginRateLimitExceeded:          {429, "Too many login attempts; retry later."},
	CodeMissingCredentials:              {400, "The login request carries no username."},
	CodeInvalidLoginRequest:             {400, "The login request could not be read."},
	CodeAmbiguousCredentials:            {400, "The login request names more than one username."},
	CodeQuotaExceeded:                   {429, "The quota for this operation is exhausted; retry later."},
	CodeQuotaUnavailable:                {503, "The quota service is unavailable; retry later."},
	CodeQuotaInvalidRequest:             {400, "The request's quota identity is missing or malformed."},
	CodeIdempotencyKeyRequired:          {400, "This operation needs an Idempotency-Key header."},
	CodeIdempotencyKeyInvalid:           {400, "The Idempotency-Key header must appear once, with 1 to 128 characters of A-Z a-z 0-9 . _ : -."},
	CodeIdempotencyKeyReused:            {422, "This Idempotency-Key was used for a different request."},
	CodeIdempotencyReplayLimit:          {429, "This request was replayed too many times with its Idempotency-Key."},
	CodeAuthUnavailable:                 {503, "The identity service is unavailable; retry later."},
	CodeNotFound:                        {404, "Nothing is served at this path."},
	CodeMethodNotAllowed:                {405, "This method is not allowed here."},
	CodeInvalidPath:                     {400, "The request path is malformed or holds an encoded separator."},
	CodeBlocked:                         {403, "Requests from this client are blocked."},
	CodeNotReady:                        {503, "The service is starting; retry later."},
	CodeDraining:                        {503, "The service is shutting down; retry later."},
	CodeOverloaded:                      {503, "The service is at capacity; retry later."},
	CodeTimeout:                         {504, "The request took too long."},
	CodeRequestTimeout:                  {408, "The request was not received in time."},
	CodeURLTooLong:                      {414, "The request target is too long."},
	CodeTooManyHeaders:                  {431, "The request header section is too large."},
	CodePayloadTooLarge:                 {413, "The request body is too large."},
	CodeUnsupportedMediaType:            {415, "The request body's media type is not accepted."},
	CodeUnsupportedContentEncoding:      {415, "The request body's content coding is not accepted."},
	CodeInvalidContentLength:            {400, "The request body is shorter than its Content-Length."},
	CodeInvalidJSON:                     {400, "The request body is not valid JSON."},
	CodeInvalidRequest:                  {400, "The request could not be read."},
	CodeInvalidBody:                     {400, "The request body is malformed."},
	CodeResponseTooLarge:                {500, "The response is too large."},
	CodeInternal:                        {500, "Internal error."},
	CodeUpstreamUnavailable:             {502, "The upstream service is unavailable."},
	CodeUpstreamTimeout:                 {504, "The upstream service did not answer in time."},
	CodeUpstreamInvalidResponse:         {502, "The upstream service sent a response that could not be read."},
	CodeUpstreamUnhealthy:               {503, "No instance of the upstream service is healthy; retry later."},
	CodeUnauthorized:                    {401, "A valid bearer token is required."},
	CodeForbidden:                       {403, "This API does not answer browsers or foreign host names."},
	CodeListFull:                        {507, "The list is full; remove entries or raise its capacity."},
	CodeInvalidConfig:                   {422, "The configuration has problems; the previous one keeps serving."},
	CodeReloadUnsupported:               {501, "This server cannot reload its configuration."},
	CodeReloadFailed:                    {500, "The reload failed; the previous configuration keeps serving."},
	CodeXDPUnavailable:                  {503, "The XDP program could not be updated."},
	CodeUnknownClient:                   {422, "The client fingerprint is not one this gateway wrote."},
	CodeAccountNotLocked:                {404, "The account is not locked and has no failed logins counted."},
	CodeQuotaBucketNotFound:             {404, "No such quota bucket."},
	CodeStoreUnavailable:                {503, "The store holding this state is unavailable; retry later."},
	CodeSessionRequired:                 {401, "Log in to the console first."},
	CodeInvalidToken:                    {401, "The token is not valid."},
	CodeCrossOrigin:                     {403, "The request did not come from the console's own pages."},
	CodeUnknownHost:                     {403, "This server does not answer under that host name."},
}

// Lookup returns the status a code is normally sent with and its fixed
// detail sentence; ok is false for a code Bulwark does not define.
func Lookup(code string) (status int, detail string, ok bool) {
	ci, ok := registry[code]
	return ci.status, ci.detail, ok
}

// Codes returns every defined problem code, sorted.
func Codes() []string {
	out := make([]string, 0, len(registry))
	for c := range registry {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// New returns the problem for code: its usual status, the status phrase
// as title and the fixed detail. An unknown code yields a 500 "internal"
// problem, so a typo can never leak as a made-up answer.
func New(code string) Problem {
	ci, ok := registry[code]
	if !ok {
		code, ci = CodeInternal, registry[CodeInternal]
	}
	return Problem{Status: ci.status, Code: code, Title: http.StatusText(ci.status), Detail: ci.detail}
}
