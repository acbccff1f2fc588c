package main

import (
	"flag"
	"time"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
)

// durationFlag defines a duration flag that reads what the configuration
// file reads (yamlconf.ParseDuration): Go's syntax ("90s", "1h30m") and
// whole days ("1d", "7d", "1d12h").
func durationFlag(set *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := new(time.Duration)
	*d = def
	set.Func(name, usage+" (as in the configuration: 90s, 10m, 1h30m, 1d, 7d)", func(s string) error {
		v, err := yamlconf.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = v
		return nil
	})
	return d
}
