package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// TestPromotedCallerThatLeavesPassesTheSlot drives the batcher's state
// machine to the one race the black-box tests rarely reach: a queued
// caller is promoted to leader just as its context ends. Whichever way
// its select goes, the leader slot must not be lost: afterwards no slot
// is in use and a new caller leads at once.
func TestPromotedCallerThatLeavesPassesTheSlot(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: rd.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b := newBatcher(c, 8, 1, 8)
	var abandoned, led int
	for range 200 {
		b.mu.Lock()
		b.active = 1 // a pipeline in flight: the next caller queues
		b.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		o := getOp(ctx)
		o.cmd = redis.NewStatusCmd(context.Background(), "ping")
		done := make(chan error, 1)
		go func() { done <- b.do(o) }()
		for { // wait until queued
			b.mu.Lock()
			n := b.n
			b.mu.Unlock()
			if n == 1 {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		// Hold the lock while the context ends and the in-flight leader
		// leaves, promoting the queued caller: both signals are pending
		// when it looks.
		b.mu.Lock()
		cancel()
		time.Sleep(50 * time.Microsecond)
		b.handoffLocked()
		b.mu.Unlock()
		if err := <-done; err != nil {
			abandoned++
		} else {
			led++
		}
		b.mu.Lock()
		active, n := b.active, b.n
		b.mu.Unlock()
		if active != 0 || n != 0 {
			t.Fatalf("after the promoted caller returned: %d slots in use, %d queued", active, n)
		}
	}
	if abandoned == 0 {
		t.Fatalf("the race was never reached (%d led)", led)
	}
	t.Logf("%d promoted callers left, %d led", abandoned, led)
}
