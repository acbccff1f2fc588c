//go:build !unix

package gateway

import "time"

// processCPU is not measured here (h2bench_test.go has the unix one).
func processCPU() time.Duration { return 0 }
