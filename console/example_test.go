package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"

	"github.com/bulwarkhq/bulwark/console"
	"github.com/bulwarkhq/bulwark/ipset"
)

// The console mounted on a mux under /ui/, and the calls its page makes:
// the API refuses a browser without a session, the login sets the
// session cookie, and the status then answers.
func ExampleNew() {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 1024})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 1024})
	ui, err := console.New(console.Config{
		Token: "an-example-token-0123456789",
		Status: func() console.Status {
			return console.Status{Version: "v1.2.3", State: "ready", Ready: true, Requests: 42}
		},
		Allow: allow,
		Deny:  deny,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, ui)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	call := func(method, path, body string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		// What a browser adds to a fetch from the console's own page.
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Origin", srv.URL)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := browser.Do(req)
		if err != nil {
			panic(err)
		}
		return res
	}

	res := call("GET", "/ui/api/status", "")
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("Content-Type"))

	res = call("POST", "/ui/api/login", `{"token": "an-example-token-0123456789"}`)
	res.Body.Close()
	ck := res.Cookies()[0]
	fmt.Println(res.StatusCode, ck.Name, ck.HttpOnly, ck.SameSite == http.SameSiteStrictMode, ck.Path)

	res = call("GET", "/ui/api/status", "")
	var v console.View
	json.NewDecoder(res.Body).Decode(&v)
	res.Body.Close()
	fmt.Println(res.StatusCode, v.Status.State, v.Status.Version, v.Status.Requests)
	// Output:
	// 401 application/problem+json
	// 200 bulwark_console true true /ui
	// 200 ready v1.2.3 42
}
