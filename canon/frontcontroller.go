package canon

import "strings"

// PHP front controllers
//
// A PHP application behind a front controller routes on what follows the
// script in the path ("/index.php/login" is "/login" for Symfony,
// Laravel, CodeIgniter, CakePHP, Slim, Laminas: PATH_INFO), and some
// route on a query parameter instead ("/index.php?route=account/login"
// for OpenCart, "?r=site/login" for Yii, "?q=user/login" for Drupal 7,
// "?rest_route=/wp/v2/users" for WordPress, "?/login" for CodeIgniter's
// query-string mode). [Script] and [QueryRoute] compute those paths so
// that a caller can count them as the route they reach.

// MaxScripts bounds the script names Script accepts, MaxQueryParams the
// parameter names QueryRoute accepts.
const (
	MaxScripts     = 16
	MaxQueryParams = 16
)

// Script returns p without its first segment that equals one of scripts
// (ASCII case-insensitively: "/INDEX.PHP/login" reaches the script on a
// case-insensitive file system), and whether there was one:
// "/index.php/login" gives "/login", "/blog/index.php/login" gives
// "/blog/login", "/index.php" gives "/". The result keeps p's flags and
// trailing slash. last reports that the script ended the path (where a
// front controller reads its route from the query: see [QueryRoute]). It
// allocates only when a script is found.
func Script(p Result, scripts []string) (rest Result, found, last bool) {
	path := p.Path
	for i := 0; i < len(path); {
		j := i + 1
		for j < len(path) && path[j] != '/' {
			j++
		}
		seg := path[i+1 : j]
		for _, s := range scripts {
			if len(s) == len(seg) && strings.EqualFold(s, seg) {
				r := path[:i] + path[j:]
				if r == "" {
					r = "/"
				}
				return Result{Path: r, Trailing: p.Trailing && r != "/", Flags: p.Flags}, true, j == len(path)
			}
		}
		i = j
	}
	return p, false, false
}

// QueryRoute returns the path a PHP front controller routes to from the
// query string query (without the '?'): the value of a parameter named in
// params, read as PHP reads $_GET (names and values percent-decoded, '+'
// as a space, '.', ' ' and a lone '[' in a name read as '_', the last of
// repeated names), or, for a query starting with "/", the query up to its
// first '&' or '=' (CodeIgniter's "?/login"). The path gets a leading "/"
// when the value has none ("account/login" routes as "/account/login")
// and is canonicalized like a request path (a '%' left after decoding is
// literal, not an escape). found is false when no parameter is present.
// Different values (two parameters, or one repeated) are ambiguous: each
// framework reads another one, so err is ErrInvalidPath, as for a value
// that cannot be canonicalized.
func QueryRoute(query string, params []string) (p Result, found bool, err error) {
	if query == "" {
		return Result{}, false, nil
	}
	var val string
	if query[0] == '/' {
		end := strings.IndexAny(query, "&=")
		if end < 0 {
			end = len(query)
		}
		val, found = unescapeQuery(query[:end]), true
	}
	for rest := query; rest != "" && len(params) > 0; {
		var kv string
		kv, rest, _ = strings.Cut(rest, "&")
		k, v, _ := strings.Cut(kv, "=")
		name := phpName(unescapeQuery(k))
		hit := false
		for _, want := range params {
			if name == want {
				hit = true
				break
			}
		}
		if !hit {
			continue
		}
		v = unescapeQuery(v)
		if found && v != val {
			return Result{}, false, ErrInvalidPath
		}
		val, found = v, true
	}
	if !found {
		return Result{}, false, nil
	}
	if !strings.HasPrefix(val, "/") {
		val = "/" + val
	}
	// The value is decoded: escape what Path would decode again.
	p, err = Path(strings.ReplaceAll(val, "%", "%25"))
	if err != nil {
		return Result{}, false, err
	}
	p.Flags &^= DoubleEncoded // a literal '%' followed by hex digits: decoded once, as PHP does
	return p, true, nil
}

// phpName is a query parameter name as PHP stores it in $_GET: leading
// spaces dropped, ' ' and '.' read as '_', and a '[' without its ']'
// read as '_' (a name with "[...]" is an array, never a string route).
func phpName(n string) string {
	n = strings.TrimLeft(n, " ")
	if i := strings.IndexByte(n, '['); i >= 0 {
		if strings.IndexByte(n[i:], ']') > 0 {
			return "" // an array element: $_GET[name] is an array
		}
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' || r == '[' {
			return '_'
		}
		return r
	}, n)
}

// unescapeQuery decodes a query component as PHP's urldecode: %XX, '+'
// as a space, and a '%' without two hex digits kept as it is.
func unescapeQuery(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b = append(b, ' ')
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				b = append(b, c)
				continue
			}
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}
