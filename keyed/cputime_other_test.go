//go:build !unix

package keyed

import "time"

// processCPU is unavailable here; the cpu-ns/op metric reads 0.
func processCPU() time.Duration { return 0 }
