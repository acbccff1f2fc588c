package route_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/route"
)

// A login pattern catches every spelling a lenient framework routes to
// its handler; a request in an encoding frameworks disagree on is
// refused; two patterns that are one route do not compile.
func Example() {
	patterns := []route.Pattern{
		{Name: "login", Path: "/login", Methods: []string{"POST"}},
		{Name: "api", Path: "/api/"},
		{Name: "item", Path: "/api/items/{id}"},
		{Name: "everything", Path: "/"},
	}
	m, err := route.Compile(patterns, route.DefaultFrontControllers())
	if err != nil {
		panic(err)
	}
	for _, target := range []string{
		"/login", "/LOGIN/", "/a/../login;jsessionid=1", "/login.json",
		"/index.php/login", "/index.php?route=/login",
		"/api/items/7", "/API/items", "/login%2F",
	} {
		rawPath, query, _ := strings.Cut(target, "?")
		p, err := canon.Path(rawPath)
		if err != nil {
			fmt.Println(target, "refused:", err)
			continue
		}
		match, err := m.Lookup("POST", canon.Host("shop.example:443"), p, query)
		switch {
		case err != nil:
			fmt.Println(target, "refused:", err)
		case match.Flags&canon.Ambiguous != 0:
			fmt.Println(target, "refused: ambiguous encoding")
		case match.Index < 0:
			fmt.Println(target, "no route")
		default:
			fmt.Println(target, "→", patterns[match.Index].Name)
		}
	}

	_, err = route.Compile([]route.Pattern{{Name: "a", Path: "/login"}, {Name: "b", Path: "/Login"}}, route.FrontControllers{})
	var c *route.Collision
	if errors.As(err, &c) {
		fmt.Println(c.Kind == route.Equal, c.A, c.B)
	}
	// Output:
	// /login → login
	// /LOGIN/ → login
	// /a/../login;jsessionid=1 → login
	// /login.json → login
	// /index.php/login → login
	// /index.php?route=/login → login
	// /api/items/7 → item
	// /API/items → api
	// /login%2F refused: ambiguous encoding
	// true 0 1
}
