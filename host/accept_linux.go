//go:build linux

package host

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawAccepter accepts the connections of the loop engine's listener
// with accept4 itself, waiting in the runtime's poller on the
// listener's descriptor: a new socket goes to a loop as it came, without
// the runtime's connection (its registration with the poller and its
// removal, TCP keep-alive options, a descriptor duplicated for the
// loop, two addresses allocated). Its connections get TCP_NODELAY, as
// the runtime's do, and no TCP keep-alive probes, as nginx's: the
// host's idle and request timeouts end a connection whose client went
// away.
//
// A listener's own RawConn cannot wait for readiness, so the accepter
// waits on a duplicate of its descriptor registered with the poller as
// a file (as package evloop waits on its epoll descriptor); close
// closes it, and must be called before the listener is closed (or the
// duplicate keeps the socket listening).
type rawAccepter struct {
	f      *os.File // the duplicate
	rc     syscall.RawConn
	laddr  *net.TCPAddr // the listener's address, unless unspecified
	fn     func(uintptr) bool
	closed atomic.Bool

	mu  sync.Mutex // one Accept at a time; fn's results below
	fd  int
	err unix.Errno
	rsa unix.RawSockaddrAny
}

// newRawAccepter returns the raw accepter of ln, or nil when ln is not
// a *net.TCPListener.
func newRawAccepter(ln net.Listener) *rawAccepter {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	lrc, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	dup, derr := -1, error(nil)
	if err := lrc.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return nil
	}
	// The duplicate shares the listener's O_NONBLOCK: os.NewFile
	// registers it with the poller.
	f := os.NewFile(uintptr(dup), "listener")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil
	}
	a := &rawAccepter{f: f, rc: rc}
	if ta, ok := tl.Addr().(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		a.laddr = ta
	}
	a.fn = a.accept
	return a
}

// accept is the poller's callback: one accept4 on the listener's
// descriptor; false waits for the next connection.
func (a *rawAccepter) accept(lfd uintptr) bool {
	for {
		n := uint32(unix.SizeofSockaddrAny)
		fd, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(&a.rsa)), uintptr(unsafe.Pointer(&n)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
			a.fd, a.err = int(fd), 0
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR, unix.ECONNABORTED:
			continue // as the runtime's accept: the next one
		}
		a.fd, a.err = -1, e
		return true
	}
}

// acceptInto accepts one connection into sc, whose socket is then the
// descriptor itself (acceptedFD). Errors are the listener's.
func (a *rawAccepter) acceptInto(sc *swapConn) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fd, a.err = -1, 0
	if err := a.rc.Read(a.fn); err != nil {
		if a.closed.Load() {
			err = net.ErrClosed
		}
		return &net.OpError{Op: "accept", Net: "tcp", Addr: a.laddr, Err: err}
	}
	if a.err != 0 {
		return &net.OpError{Op: "accept", Net: "tcp", Addr: a.laddr, Err: os.NewSyscallError("accept4", a.err)}
	}
	fd := a.fd
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	sc.raddr.IP, sc.raddr.Port, sc.raddr.Zone = rawSockaddrIP(&a.rsa, &sc.rip)
	if a.laddr != nil {
		sc.laddr = a.laddr
	} else {
		var lsa unix.RawSockaddrAny
		n := uint32(unix.SizeofSockaddrAny)
		if _, _, e := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&lsa)), uintptr(unsafe.Pointer(&n))); e == 0 {
			sc.laddrv.IP, sc.laddrv.Port, sc.laddrv.Zone = rawSockaddrIP(&lsa, &sc.lip)
			sc.laddr = &sc.laddrv
		}
	}
	sc.raw = acceptedFD{sc: sc, fd: fd}
	sc.set(&sc.raw)
	return nil
}

// close stops the accepter: a waiting acceptInto returns net.ErrClosed.
func (a *rawAccepter) close() {
	if a.closed.CompareAndSwap(false, true) {
		_ = a.f.Close()
	}
}

// rawSockaddrIP decodes an internet socket address into buf (no
// allocation: the IP is a slice of buf).
func rawSockaddrIP(rsa *unix.RawSockaddrAny, buf *[16]byte) (net.IP, int, string) {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		copy(buf[:4], sa.Addr[:])
		return net.IP(buf[:4]), int(p[0])<<8 | int(p[1]), ""
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		copy(buf[:], sa.Addr[:])
		zone := ""
		if sa.Scope_id != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.Scope_id)); err == nil {
				zone = ifi.Name
			}
		}
		return net.IP(buf[:]), int(p[0])<<8 | int(p[1]), zone
	}
	return nil, 0, ""
}

// closeFD closes a descriptor.
func closeFD(fd int) { _ = unix.Close(fd) }

// lingerFD sets SO_LINGER on a descriptor (net.TCPConn's SetLinger).
func lingerFD(fd, sec int) error {
	l := unix.Linger{}
	if sec >= 0 {
		l.Onoff, l.Linger = 1, int32(sec)
	}
	return os.NewSyscallError("setsockopt", unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &l))
}
