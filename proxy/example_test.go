package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/bulwarkhq/bulwark/proxy"
)

func Example() {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	defer app.Close()

	p, err := proxy.New(proxy.Upstream{
		Name:     "app",
		Targets:  []string{app.URL},
		Timeouts: proxy.Timeouts{Connect: time.Second, Total: 10 * time.Second},
		Retries:  1,
	}, proxy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()

	resp, err := http.Get(front.URL + "/greet")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
	// Output: 200 hello from /greet
}
