package deadline_test

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/internal/deadline"
)

func TestLazyKeepsAFittingDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	now := time.Now()
	var d deadline.Lazy
	d.Set(a, now.Add(time.Hour), time.Minute)
	if got := d.At(); !got.Equal(now.Add(time.Hour + time.Minute)) {
		t.Fatalf("first Set: at %v, want want+slack", got)
	}
	d.Set(a, now.Add(time.Hour+30*time.Second), time.Minute) // in [want, want+slack]: kept
	if got := d.At(); !got.Equal(now.Add(time.Hour + time.Minute)) {
		t.Fatalf("fitting Set re-armed: at %v", got)
	}
	d.Set(a, now.Add(2*time.Hour), 0) // later than the one in force
	if got := d.At(); !got.Equal(now.Add(2 * time.Hour)) {
		t.Fatalf("later Set: at %v", got)
	}
	d.Set(a, now.Add(time.Minute), time.Second) // earlier than want+slack allows
	if got := d.At(); !got.Equal(now.Add(time.Minute + time.Second)) {
		t.Fatalf("earlier Set: at %v", got)
	}
	d.Forget()
	if !d.At().IsZero() {
		t.Fatal("Forget kept the deadline")
	}
}

// The deadline reaches the connection: reads (or writes, with Write)
// past it time out.
func TestLazySetsTheConnection(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	past := time.Now().Add(-time.Second)
	r := deadline.Lazy{}
	r.Set(a, past, 0)
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the read deadline: %v", err)
	}
	w := deadline.Lazy{Write: true}
	w.Set(a, past, 0)
	if _, err := a.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the write deadline: %v", err)
	}
}
