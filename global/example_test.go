package global_test

import (
	"fmt"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// Two replicas share one store (Redis in production: see
// global/redisglobal): together they admit the burst of 5, not 5 each.
func Example() {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store, _ := global.NewMemoryStore(1000, clk)
	defer store.Close()
	var lims []*global.Limiter
	for range 2 {
		node, _ := global.New(global.Config{Store: store, Clock: clk, Budget: global.MaxBudget})
		defer node.Close()
		lim, _ := node.Limiter("api", limit.GCRA{Rate: 1, Burst: 5})
		lims = append(lims, lim)
	}
	admitted := 0
	for i := range 20 {
		if lims[i%2].Allow("tenant-7").Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	// Output: admitted: 5
}
