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
