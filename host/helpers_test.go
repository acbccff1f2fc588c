package host_test

import (
	"testing"

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
	modes    = []mode{modeH1, modeH2, modeH2C, modeFast, modeLoop}

	start        = hosttest.Start
	newTransport = hosttest.NewTransport
	expect       = hosttest.Expect
	dialRaw      = hosttest.DialRaw
	okHandler    = hosttest.OKHandler
	testCert     = hosttest.Cert
)
