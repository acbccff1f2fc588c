package proxy

// ValidForwarded exposes validForwarded to the tests.
var ValidForwarded = validForwarded

// AppendForwardedElement exposes appendForwardedElement to the tests.
var AppendForwardedElement = appendForwardedElement
