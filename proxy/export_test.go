package proxy

// ValidForwarded exposes validForwarded to the tests.
var ValidForwarded = validForwarded

// AppendForwardedElement exposes appendForwardedElement to the tests.
var AppendForwardedElement = appendForwardedElement

// SetTakeHook sets a function run as an idle upstream connection is
// taken from the pool, before it is looked at; the returned function
// removes it.
func SetTakeHook(f func()) (restore func()) {
	takeHook.Store(&f)
	return func() { takeHook.Store(nil) }
}
