package host_test

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The shared harness (internal/hosttest) under this suite's names.
type (
	mode          = hosttest.Mode
	env           = hosttest.Env
	option        = hosttest.Option
	result        = hosttest.Result
	events        = hosttest.Events
	closeRecorder = hosttest.CloseRecorder
)

var (
	modeH1   = hosttest.ModeH1
	modeH2   = hosttest.ModeH2
	modeH2C  = hosttest.ModeH2C
	modeFast = hosttest.ModeFast
	modeLoop = hosttest.ModeLoop
	// HTTP/1.1 over TLS, on net/http and the fast engine (host/tls.go).
	modeH1TLS   = hosttest.ModeH1TLS
	modeFastTLS = hosttest.ModeFastTLS
	modeLoopTLS = hosttest.ModeLoopTLS
	modes       = []mode{modeH1, modeH2, modeH2C, modeFast, modeLoop, modeH1TLS, modeFastTLS, hosttest.ModeH2Native, hosttest.ModeH2CNative}

	start        = hosttest.Start
	newTransport = hosttest.NewTransport
	expect       = hosttest.Expect
	dialRaw      = hosttest.DialRaw
	okHandler    = hosttest.OKHandler
	testCert     = hosttest.Cert
)

// waitFor polls cond until it holds; it fails t after 20 s, so that a
// regression fails the test instead of hanging the package until go
// test's timeout. The poll yields between tries (a millisecond's sleep
// every 64 tries) so that it does not hold a CPU the server needs.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20 s waiting for %s", what)
		}
		if i%64 == 0 {
			time.Sleep(time.Millisecond)
		} else {
			runtime.Gosched()
		}
	}
}

// recv receives from ch; it fails t after 20 s instead of hanging.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out after 20 s waiting for %s", what)
		panic("unreachable")
	}
}
