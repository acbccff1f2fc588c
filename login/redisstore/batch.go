package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/login"
)

// ErrBusy is returned (wrapped) by a [Store] operation that found the
// store's queue full: more operations were waiting for Redis than
// Config.QueueSize. It wraps [login.ErrStoreFull], so the login layer
// answers it by refusing the attempt (fail closed, no cache event) rather
// than by letting it through unthrottled: a flood that outruns Redis must
// not switch the throttle off.
var ErrBusy = fmt.Errorf("redisstore: too many operations waiting for Redis: %w", login.ErrStoreFull)

// Signals sent to a waiting operation (each op receives at most one).
const (
	sigDone uint8 = iota + 1 // its reply is in
	sigLead                  // it must lead the next pipeline
)

// Operation states, under batcher.mu.
const (
	opQueued    uint8 = iota // in the ring
	opTaken                  // in a leader's pipeline
	opLeading                // its caller leads (it is not in the ring)
	opAbandoned              // its caller left while it was queued or promoted
)

// op is one store operation: a script (EVALSHA, EVAL when the server
// lost it) or a plain command.
type op struct {
	ctx    context.Context // used when the op is sent alone
	script *script         // nil: cmd is a plain command
	keys   []string
	args   []any
	cmd    redis.Cmder // the plain command, or the script's reply
	ch     chan uint8  // capacity 1
	state  uint8
}

var opPool = sync.Pool{New: func() any { return &op{ch: make(chan uint8, 1)} }}

func getOp(ctx context.Context) *op {
	o := opPool.Get().(*op)
	o.ctx = ctx
	return o
}

// putOp recycles an op whose caller has its reply and that no other
// goroutine can still reach (never an abandoned one).
func putOp(o *op) {
	*o = op{ch: o.ch}
	opPool.Put(o)
}

// batcher coalesces concurrent callers' operations into shared
// pipelines by group commit; it has no goroutines of its own. A caller
// that finds fewer than maxLeaders pipelines in flight becomes a leader:
// it sends its own operation together with up to maxBatch−1 queued ones
// (oldest first) as one pipeline, hands each caller its reply, and
// leaves, first promoting the oldest waiting caller to leader if anything
// is still queued (the leader slot passes to it). Any other caller queues
// its operation and waits for a reply or a promotion. So every queued
// operation has a leader coming, a caller leads at most one pipeline, and
// at most maxLeaders pipelines (so connections) are in use at once. The
// queue holds at most maxQueue operations; a caller that finds it full
// gets ErrBusy at once.
type batcher struct {
	client     redis.UniversalClient
	maxBatch   int
	maxLeaders int

	mu     sync.Mutex
	ring   []*op // queued operations, FIFO; cap = QueueSize
	head   int
	n      int
	active int // leader slots in use, promoted callers included

	ops, pipelines, busy atomic.Uint64
}

func newBatcher(c redis.UniversalClient, maxBatch, maxLeaders, queue int) *batcher {
	return &batcher{client: c, maxBatch: maxBatch, maxLeaders: maxLeaders, ring: make([]*op, queue)}
}

// do runs o and returns once o.cmd holds its reply, or with the caller's
// context error (the operation may still be sent if it was already
// taken), or with ErrBusy.
func (b *batcher) do(o *op) error {
	if err := o.ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	if b.active < b.maxLeaders {
		b.active++
		o.state = opLeading
		b.mu.Unlock()
		b.ops.Add(1)
		b.lead(o)
		return nil
	}
	if b.n == len(b.ring) {
		b.mu.Unlock()
		b.busy.Add(1)
		return ErrBusy
	}
	b.ring[(b.head+b.n)%len(b.ring)] = o
	b.n++
	o.state = opQueued
	b.mu.Unlock()
	b.ops.Add(1)
	select {
	case s := <-o.ch:
		if s == sigLead {
			b.lead(o)
		}
		return nil
	case <-o.ctx.Done():
		b.mu.Lock()
		switch o.state {
		case opQueued:
			o.state = opAbandoned // the next leader skips it
		case opLeading:
			// Promoted as the context ended: pass the slot on.
			o.state = opAbandoned
			b.handoffLocked()
		}
		b.mu.Unlock()
		return o.ctx.Err()
	}
}

// lead sends own and up to maxBatch−1 queued operations as one pipeline,
// delivers the replies and leaves.
func (b *batcher) lead(own *op) {
	b.mu.Lock()
	batch := make([]*op, 1, min(b.n+1, b.maxBatch))
	batch[0] = own
	own.state = opTaken
	for b.n > 0 && len(batch) < b.maxBatch {
		o := b.pop()
		if o.state == opAbandoned {
			continue
		}
		o.state = opTaken
		batch = append(batch, o)
	}
	b.mu.Unlock()
	b.send(batch)
	b.mu.Lock()
	b.handoffLocked()
	b.mu.Unlock()
	for _, o := range batch[1:] {
		o.ch <- sigDone
	}
}

// pop removes the oldest queued operation; b.n > 0, b.mu held.
func (b *batcher) pop() *op {
	o := b.ring[b.head]
	b.ring[b.head] = nil
	b.head = (b.head + 1) % len(b.ring)
	b.n--
	return o
}

// handoffLocked is a leader leaving: the oldest live queued operation's
// caller is promoted (it takes over the slot), or, with nothing queued,
// the slot is freed.
func (b *batcher) handoffLocked() {
	for b.n > 0 {
		o := b.pop()
		if o.state == opAbandoned {
			continue
		}
		o.state = opLeading
		o.ch <- sigLead
		return
	}
	b.active--
}

// send runs batch: a lone operation as a plain command on its caller's
// context, several as one pipeline (go-redis splits it per node on a
// Cluster). Scripts go as EVALSHA; those the server does not know are
// sent again as EVAL, in one more pipeline.
func (b *batcher) send(batch []*op) {
	if len(batch) == 0 {
		return
	}
	b.pipelines.Add(1)
	c := b.client
	if len(batch) == 1 {
		o := batch[0]
		if o.script != nil {
			o.cmd = o.script.Run(o.ctx, c, o.keys, o.args...)
		} else {
			_ = c.Process(o.ctx, o.cmd)
		}
		return
	}
	// The callers' contexts differ; the client's timeouts bound the
	// round trip.
	ctx := context.Background()
	pipe := c.Pipeline()
	for _, o := range batch {
		if o.script != nil {
			o.cmd = pipe.EvalSha(ctx, o.script.Hash(), o.keys, o.args...)
		} else {
			_ = pipe.Process(ctx, o.cmd)
		}
	}
	if _, err := pipe.Exec(ctx); err == nil {
		return
	}
	var again redis.Pipeliner
	for _, o := range batch {
		if o.script != nil && redis.HasErrorPrefix(o.cmd.Err(), "NOSCRIPT") {
			if again == nil {
				again = c.Pipeline()
			}
			o.cmd = again.Eval(ctx, o.script.src, o.keys, o.args...)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}

// script is a Lua script with its source (go-redis keeps it private).
type script struct {
	*redis.Script
	src string
}

func newScript(src string) *script { return &script{redis.NewScript(src), src} }
