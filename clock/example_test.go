package clock_test

import (
	"fmt"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

func ExampleManual() {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c.Advance(90 * time.Second)
	fmt.Println(c.Now().Format(time.TimeOnly))
	// Output: 00:01:30
}

// One coarse clock for the process, owned by main: started before the
// limiters are built, stopped after they are closed, and passed to each
// of them as its Clock.
func ExampleCoarse() {
	c, err := clock.NewCoarse(time.Millisecond)
	if err != nil {
		panic(err)
	}
	c.Start()
	defer c.Stop()

	// Any layer: a decision reads one atomic word.
	var clk clock.Clock = c
	now := clock.Nanos(clk) // Mono nanoseconds
	_ = now
}
