//go:build !linux

package proxy

import "net"

// sockPeek looks at an idle upstream connection's socket: on Linux only
// (MSG_PEEK|MSG_DONTWAIT); elsewhere nothing is seen to arrive.
type sockPeek struct{}

func newSockPeek(net.Conn) *sockPeek { return nil }

func (*sockPeek) arrived() bool { return false }
