//go:build !linux

package host

import (
	"errors"
	"net"
)

// rawAccepter is Linux's (accept_linux.go); elsewhere the loop engine
// has no loops and accepts with the listener.
type rawAccepter struct{}

func newRawAccepter(net.Listener) *rawAccepter { return nil }

func (a *rawAccepter) acceptInto(*swapConn) error { return errors.ErrUnsupported }

func (a *rawAccepter) close() {}

func closeFD(int) {}

func lingerFD(int, int) error { return errors.ErrUnsupported }
