package proxy

// ValidForwarded exposes validForwarded to the tests.
var ValidForwarded = validForwarded
