package main

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"
)

func TestMemoryDefaults(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(f string) ([]byte, error) {
			if v, ok := m[f]; ok {
				return []byte(v), nil
			}
			return nil, errors.New("no such file")
		}
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMEMLIMIT" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name  string
		env   string
		files map[string]string
		want  int64 // the limit set; MaxInt64: none
	}{
		{"v2 limit", "", map[string]string{"/sys/fs/cgroup/memory.max": "1073741824\n"}, 1073741824 / 10 * 9},
		{"v1 limit", "", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, 536870912 / 10 * 9},
		{"v2 unlimited", "", map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, math.MaxInt64},
		{"v1 unlimited", "", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, math.MaxInt64},
		{"no cgroup", "", nil, math.MaxInt64},
		{"operator's GOMEMLIMIT wins", "2GiB", map[string]string{"/sys/fs/cgroup/memory.max": "1073741824"}, math.MaxInt64},
	} {
		t.Run(c.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			msg := memoryDefaults(env(c.env), files(c.files))
			if got := debug.SetMemoryLimit(-1); got != c.want {
				t.Fatalf("memory limit %d, want %d (%q)", got, c.want, msg)
			}
			if (msg != "") != (c.want != math.MaxInt64) {
				t.Fatalf("log line %q", msg)
			}
		})
	}
}
