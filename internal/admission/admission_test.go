package admission_test

import (
	"context"
	"testing"

	"github.com/bulwarkhq/bulwark/internal/admission"
)

type otherKey struct{}

type slot struct{ holds, releases int }

func (s *slot) Hold() func() {
	s.holds++
	return func() { s.releases++ }
}

// Hold finds the request's Holder under ContextKey, and does nothing
// outside an admitted request.
func TestHold(t *testing.T) {
	admission.Hold(context.Background())() // no holder: a no-op release

	s := &slot{}
	ctx := context.WithValue(context.Background(), admission.ContextKey{}, admission.Holder(s))
	release := admission.Hold(context.WithValue(ctx, otherKey{}, 1)) // found through a child context
	if s.holds != 1 || s.releases != 0 {
		t.Fatalf("after Hold: holds %d releases %d", s.holds, s.releases)
	}
	release()
	if s.releases != 1 {
		t.Fatalf("release did not reach the holder: %d", s.releases)
	}
}
