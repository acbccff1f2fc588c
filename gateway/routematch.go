package gateway

import (
	"errors"
	"fmt"

	"github.com/bulwarkhq/bulwark/conf"
	routematch "github.com/bulwarkhq/bulwark/route"
)

// The routes' match sections are route patterns (package route, imported
// as routematch: the gateway's own type route is one configured route).
// This file builds the matcher from the configuration and words its
// collisions in the configuration's keys.

// FrontControllers is the front_controllers section: the PHP front
// controllers route matching sees through (the library's type, keys and
// Validate).
type FrontControllers = routematch.FrontControllers

// pattern is the route pattern of m, for the route named name.
func (m Match) pattern(name string) routematch.Pattern {
	p := m.Pattern
	p.Name = name
	return p
}

// matcher compiles the routes of a validated configuration: an error is
// routematch.Collisions (see validatePatterns).
func (c *Config) matcher() (*routematch.Matcher, error) {
	ps := make([]routematch.Pattern, len(c.Routes))
	for i, r := range c.Routes {
		ps[i] = r.Match.pattern(r.Name)
	}
	return routematch.Compile(ps, c.FrontControllers)
}

// newMatcher is the matcher of a validated configuration; a collision is
// an error in the configuration's words, as bulwark check reports it.
func (c *Config) newMatcher() (*routematch.Matcher, error) {
	mt, err := c.matcher()
	if cs, ok := errors.AsType[routematch.Collisions](err); ok {
		return nil, errors.New(c.collision(cs[0]))
	}
	return mt, err
}

// validatePatterns compiles every route's match as the router will and
// reports routes that collide: they match some request in common and
// neither is more specific (among them, routes whose patterns are equal
// after canonicalization, such as "/login" and "/LOGIN"), or they are one
// route through a framework's equivalence.
func (c *Config) validatePatterns(f *conf.Check) {
	_, err := c.matcher()
	if err == nil {
		return
	}
	cs, ok := errors.AsType[routematch.Collisions](err)
	if !ok {
		f.Add("routes", "%v", err) // Match.Validate reports a bad pattern first
		return
	}
	for _, col := range cs {
		f.Add(fmt.Sprintf("routes[%d].match", col.B), "%s", c.collision(col))
	}
}

// collision words col in the configuration's keys.
func (c *Config) collision(col *routematch.Collision) string {
	a, b := c.Routes[col.A].Name, c.Routes[col.B].Name
	switch col.Kind {
	case routematch.NamesScript:
		return fmt.Sprintf("route %q: the path names the front controller %q, which requests are matched without (\"/%s/login\" is \"/login\"): write the path that follows it, or set match.strict_front_controller: true",
			a, col.Script, col.Script)
	case routematch.FormatSuffix:
		return fmt.Sprintf("routes %q and %q are one route for frameworks that read a final \".format\" (Rails, Spring): \"/login.json\" is \"/login\"; remove one, or set match.strict_format: true on the shorter one", a, b)
	case routematch.FrontController:
		return fmt.Sprintf("routes %q and %q are one route behind a PHP front controller (\"/index.php/login\" is \"/login\"); remove one", a, b)
	case routematch.Equal:
		return fmt.Sprintf("routes %q and %q match exactly the same requests (after canonicalization: letter case, trailing slash, method)", a, b)
	}
	return fmt.Sprintf("routes %q and %q both match some requests and neither is more specific", a, b)
}
