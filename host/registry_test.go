package host

import (
	"context"
	"errors"
	"testing"
	"time"
)

func listOf(s *shard) []*request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*request
	var prev *request
	for rq := s.head; rq != nil; rq = rq.next {
		if rq.prev != prev {
			panic("broken prev link")
		}
		prev = rq
		out = append(out, rq)
	}
	if s.tail != prev {
		panic("broken tail")
	}
	return out
}

func newTestRequest() (*request, context.Context) {
	rq := &request{}
	ctx, cancel := context.WithCancelCause(context.Background())
	rq.cancel = cancel
	return rq, ctx
}

// The shard list stays consistent under removal anywhere, and its timer
// cancels exactly the requests whose deadline passed, in order.
func TestShardRegistry(t *testing.T) {
	s := shard{epoch: time.Now()}
	a, actx := newTestRequest()
	b, bctx := newTestRequest()
	c, cctx := newTestRequest()
	d, dctx := newTestRequest()
	for _, rq := range []*request{a, b, c, d} {
		s.add(rq, time.Hour)
	}
	if l := listOf(&s); len(l) != 4 || l[0] != a || l[3] != d {
		t.Fatalf("list %v", l)
	}
	s.remove(b)
	s.remove(b) // idempotent
	if l := listOf(&s); len(l) != 3 || l[1] != c {
		t.Fatalf("after removing b: %v", l)
	}
	// a and c are due, d is not.
	s.mu.Lock()
	past := s.now() - int64(time.Second)
	a.expireAt, c.expireAt = past, past
	s.mu.Unlock()
	s.expire()
	if context.Cause(actx) != ErrRequestTimeout || context.Cause(cctx) != ErrRequestTimeout {
		t.Fatalf("causes %v %v", context.Cause(actx), context.Cause(cctx))
	}
	if bctx.Err() != nil || dctx.Err() != nil {
		t.Fatal("a request not due was cancelled")
	}
	if l := listOf(&s); len(l) != 1 || l[0] != d {
		t.Fatalf("after expiry: %v", l)
	}
	s.remove(a) // already unlinked by its timeout: a no-op
	if l := listOf(&s); len(l) != 1 {
		t.Fatalf("list %v", l)
	}
	s.mu.Lock()
	armed := s.armed
	s.mu.Unlock()
	if !armed {
		t.Fatal("timer not re-armed for the remaining request")
	}
	s.remove(d)
	if l := listOf(&s); len(l) != 0 {
		t.Fatalf("list %v", l)
	}
	s.timer.Stop()
}

// A request registering while the drain walks the shards cancels itself.
func TestDrainCauseSeenAfterRegistering(t *testing.T) {
	h, err := New(Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	h.cancelAll(ErrDraining)
	if c := h.drainCause.Load(); c == nil || !errors.Is(*c, ErrDraining) {
		t.Fatal("drain cause not recorded")
	}
	h.stopTimers()
}
