// Package global enforces rate limits across replicas: a two-level
// limiter with leased tokens in each
// process (L1) and a shared GCRA bucket per key in a store (L2, Redis in
// production), behind a circuit breaker.
//
// # Levels
//
// L2 holds one GCRA bucket per key on the store's clock (Redis TIME). A
// refill takes a lease of up to k tokens in one atomic step (all of them
// deducted from the bucket before the answer), so however many replicas
// ask concurrently the bucket never admits more than its limit. Tokens a
// replica leased and did not use within Config.LeaseTTL go back to the
// bucket (Lease.Return): the bucket is then as if they had never been
// leased, so a slow limit loses none of its budget to expired leases.
//
// Units spent without a lease are debited on the bucket (Lease.Debit),
// in the same script call as the key's next lease, query or return:
// units charged past the limit ([Limiter.ChargeN], costs reported after
// the fact) and admissions made from the local share while L2 was out of
// reach. A debit may overdraw the bucket, by at most Burst−1 units (it
// then recovers within one window of its latest debit), and every
// replica's next lease is refused until the bucket has refilled it; a
// replica whose round trip finds the bucket overdrawn gives back the
// tokens it still holds for the key. What a debit does not reach at once
// is tokens another replica already held or was granted when it landed
// (at most a lease and a half; a lease is at most Config.MaxLease and
// Burst divided by the replicas): that replica may admit from them
// until its next round trip for the key (at half a lease) or their
// lapse. A debit whose round trip fails stays with the key (at most
// Burst + Rate·OpenFor units per key and replica, in the bounded table)
// and goes with its next round trip, at its next decision: possibly
// counted twice, never lost.
//
// L1 is a bounded [keyed.Table] per [Node] holding each key's leased
// tokens. A decision takes tokens there and never waits on L2 while any
// are held: when they fall to a low-water mark (half a lease) a refill is
// queued for the node's single worker goroutine, which coalesces requests
// (one in flight per key), pipelines them across keys in one round trip,
// and applies the answers. A key that L2 reported empty is rejected
// locally until L2's retry time. Only a key that holds too few tokens and
// is not known to be empty waits for its refill, at most Config.Budget
// (2 ms by default): blocked, or, for a caller that must not block (an
// event loop's request), sleeping on the caller's [Sleeper]
// ([Limiter.AllowNFromSleeping]).
//
// The lease size k adapts to the key's observed rate (enough tokens for
// half of Config.LeaseTTL, 500 ms by default), between 1 and
// Config.MaxLease (128 by default), and is
// capped at Burst divided by the number of live replicas, which the nodes
// count through a heartbeat set in the store. A node beats as soon as it
// starts (before its first lease), and every lease round trip also reads
// the set's size, so a replica that starts is counted by the others from
// their next round trip, not their next heartbeat.
//
// # Breaker
//
// Config.Failures consecutive round trips that fail open the breaker for
// Config.OpenFor (500 ms by default), and so do budget misses in more
// than half of the latest eight round trips. A budget miss is a round
// trip that a decision gave up waiting for (it waited Config.Budget and
// was decided from the local share) and that itself took longer than
// Config.Budget, from the worker sending it to its answer. A round trip
// that is merely slow is not one: while keys hold prefetched tokens
// nobody waits for it. Nor is one that a decision gave up on while Redis
// answered it within the budget: the decision waited for the worker (busy
// with the round trip before, or, in a process whose CPUs are saturated,
// for a CPU), not for Redis, and opening the breaker would give up exact
// global accounting and gain nothing. A Redis that really is slow makes
// the decisions whose tokens run out wait through slow round trips, and
// those misses open it.
//
// While the breaker is open (and half-open), every decision comes from a
// local GCRA at the fallback share of the limit (Config.FallbackShare, by
// default 1/replicas as last seen), and the store is left alone. Then
// one probe runs on a fresh connection: success (an answer within
// Config.Budget) closes the breaker and global accounting resumes,
// failure opens it again. Recovery after the
// store returns is therefore bounded by OpenFor plus one probe, not by the
// client library's dial back-off.
//
// # Observability
//
// [Hooks] receive one [Event] per breaker state change, a periodic
// summary while the breaker is or was open (never one per request),
// every L2 round trip ([Batch]: size, latency, failure), lease sizes and
// heartbeats. No hook, event, error or store key carries a key, a client
// or an error text: L2 sees only SHA-256 digests of (limiter name, key).
// [Node.Stats] returns cumulative counters.
//
// # Starting while the store is down
//
// [New] never contacts the store synchronously. A node whose store is
// down at start fails its first round trips, opens the breaker and serves
// from the local share until a probe succeeds; [Node.State] and
// [Node.Stats] tell readiness checks what is going on.
package global
