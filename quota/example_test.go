package quota_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
)

// fixedConsumer stands in for a store in this example: it answers every
// valid request with the same decision.
type fixedConsumer struct {
	ops *quota.Operations
	d   quota.Decision
}

func (c fixedConsumer) Consume(_ context.Context, r quota.Request) (quota.Decision, error) {
	if _, err := c.ops.Resolve(r); err != nil {
		return quota.Decision{}, err
	}
	return c.d, nil
}

func Example() {
	ops, err := quota.NewOperations(
		quota.Operation{Name: "export", Limit: 5}, // window defaults to 60s
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	var store quota.Consumer = fixedConsumer{ops: ops, d: quota.Decision{Denial: quota.DenialExhausted, Limit: 5, Window: time.Minute, RetryAfter: 1500 * time.Millisecond}}

	handle := func(receipt string) {
		body := []byte(`{"format":"csv"}`) // the body as it will be forwarded
		d, err := store.Consume(context.Background(), quota.Request{
			Project: "acme", SubjectType: "user", SubjectID: "u-42",
			Operation: "export", ReceiptID: receipt,
			Fingerprint: quota.Fingerprint("POST", "/v1/exports", sha256.Sum256(body)),
		})
		switch {
		case errors.Is(err, quota.ErrInvalidRequest):
			fmt.Println("400:", err)
		case err != nil:
			// Unavailable, unknown operation, anything else: fail closed.
			// A lost response is retried later with the SAME receipt id.
			fmt.Println("503")
		case d.Replayed:
			fmt.Println("allowed (replay, nothing consumed)")
		case d.Allowed:
			fmt.Println("allowed, remaining", d.Remaining)
		case d.Denial == quota.DenialKeyReused:
			fmt.Println("422: key used for another request")
		case d.Denial == quota.DenialReplayLimit:
			fmt.Println("429 (replays), Retry-After:", d.RetryAfterSeconds())
		default:
			fmt.Println("429, Retry-After:", d.RetryAfterSeconds())
		}
	}
	handle("req-7f3a")          // a well-formed receipt id
	handle("req 7f3a; DROP --") // rejected before any store is touched

	_, err = quota.NewOperations(quota.Operation{Name: "export", Limit: 5000})
	fmt.Println(err)
	// Output:
	// 429, Retry-After: 2
	// 400: quota: invalid receipt id: byte 3 outside [A-Za-z0-9._:-]
	// quota: operation export limit: 5000 out of range [1, 1000]
}
