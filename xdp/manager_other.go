//go:build !linux

package xdp

import (
	"net/netip"

	"github.com/bulwarkhq/bulwark/ipset"
)

const supported = false

type kernel struct{}

func (m *Manager) startKernel() error                           { return ErrUnsupported }
func (m *Manager) stopKernel() error                            { return nil }
func (m *Manager) put(allow bool, e ipset.Entry) (bool, error)  { return false, nil }
func (m *Manager) del(allow bool, p netip.Prefix) (bool, error) { return false, nil }
func (m *Manager) writeConfigLocked() error                     { return nil }
func (m *Manager) readCounters() (Counters, error)              { return Counters{}, ErrUnsupported }
