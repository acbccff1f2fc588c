package main

import (
	"errors"
	"net"
	"strconv"
	"time"
)

// sdNotify tells the service manager about the process's state (the
// systemd notify protocol, sd_notify(3)): one datagram with state (such
// as "READY=1" or "STOPPING=1") on the unixgram socket $NOTIFY_SOCKET
// names, a path or, with a leading '@', an abstract name. Without
// $NOTIFY_SOCKET it does nothing. A failure is returned for a log line;
// it never stops the gateway.
func sdNotify(getenv func(string) string, state string) error {
	path := getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] != '/' && path[0] != '@' {
		return errors.New("NOTIFY_SOCKET is neither an absolute path nor an abstract name")
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err = c.Write([]byte(state))
	return err
}

// readyState is what serve tells the service manager once it serves: a
// process started by an upgrade (SIGUSR2) names itself the main process
// (MAINPID), as its predecessor hands over and exits.
func readyState(upgraded bool, pid int) string {
	if upgraded {
		return "MAINPID=" + strconv.Itoa(pid) + "\nREADY=1\nSTATUS=serving (upgraded)"
	}
	return "READY=1\nSTATUS=serving"
}

// upgraded reports that this process was started by an upgrade.
func (u *upgrader) upgraded() bool { return u.upg != nil && u.upg.HasParent() }
