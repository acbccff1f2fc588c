// Package deptest holds the module's dependency rules as a test: library
// packages never import the gateway, the commands, Prometheus, or a
// database driver outside that driver's adapter package. See
// deptest_test.go for the rule table.
package deptest
