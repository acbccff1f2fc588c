//go:build linux

package evloop_test

import (
	"bufio"
	"fmt"
	"net"

	"github.com/bulwarkhq/bulwark/internal/evloop"
)

// An echo server whose connections all run on one loop goroutine: the
// serve function is ordinary blocking-style code.
func ExampleLoop_Serve() {
	loop, err := evloop.New(evloop.Config{MaxConns: 1024})
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- loop.Run() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			err = loop.Serve(c.(*net.TCPConn), func(c *evloop.Conn) {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte("echo: " + line)); err != nil {
						return
					}
				}
			})
			if err != nil {
				_ = c.Close()
			}
		}
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Fprintln(c, "hello")
	reply, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print(reply)
	_ = c.Close()
	_ = ln.Close()
	_ = loop.Close()
	fmt.Println(<-ran)
	// Output:
	// echo: hello
	// <nil>
}
