package jsonapi_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The host test harness (internal/hosttest) under this suite's names.
type (
	mode   = hosttest.Mode
	env    = hosttest.Env
	result = hosttest.Result
	events = hosttest.Events
)

var (
	modeH1  = hosttest.ModeH1
	modeH2  = hosttest.ModeH2
	modeH2C = hosttest.ModeH2C
	modes   = []mode{modeH1, modeH2, modeH2C}

	start   = hosttest.Start
	expect  = hosttest.Expect
	dialRaw = hosttest.DialRaw
)
