// Package deptest holds the module's dependency rules as tests:
//
//   - deptest_test.go: library packages never import the gateway, the
//     commands, the control API (but the console), Prometheus, or a
//     database driver outside that driver's adapter package; the control
//     API's JSON mode does not import host;
//   - layers_test.go: the layering. Every package has a tier (core <
//     identity < wire < engine < layer < operator < ui, and outside for
//     the composition, tools and test support), listed by name so that a
//     new package fails until classified; a package imports only lower
//     tiers, and a layer imports another layer only through a rule
//     stated with its reason.
package deptest
