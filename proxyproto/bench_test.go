package proxyproto

import (
	"bytes"
	"testing"
)

// BenchmarkParse measures one header of each common kind.
func BenchmarkParse(b *testing.B) {
	for _, c := range validCases() {
		switch c.name {
		case "v1 tcp4", "v1 tcp6", "v2 tcp4", "v2 tcp6", "v2 tlvs":
		default:
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _, _ = Parse(c.in)
			}
		})
	}
}

// BenchmarkRead measures Read over an in-memory stream (the reads it
// takes to stop exactly at the header's end).
func BenchmarkRead(b *testing.B) {
	buf := make([]byte, MaxHeader)
	for _, c := range validCases() {
		switch c.name {
		case "v1 tcp4", "v2 tcp4":
		default:
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			r := bytes.NewReader(nil)
			for b.Loop() {
				r.Reset(c.in)
				_, _ = Read(r, buf)
			}
		})
	}
}
