// Package testsvc starts throwaway PostgreSQL and Redis servers for tests:
// real server processes on free loopback ports in private temporary
// directories, stopped and removed by t.Cleanup.
//
//	pg := testsvc.StartPostgres(t)  // pg.DSN(), pg.Kill(), pg.Restart(), ...
//	rd := testsvc.StartRedis(t)     // rd.Addr(), rd.Kill(), rd.Restart(), ...
//
// [StartRedisTLS] starts a TLS-only Redis with a throwaway CA and
// certificates generated in Go ([NewCA], [CA.Issue]); [StartRedisCluster]
// a Redis Cluster.
//
// The binaries come from the Debian packages postgresql (PostgreSQL ≥ 15)
// and redis-server; scripts/test installs them when run as root. A missing
// binary fails the test with the package name: tests that need a server
// never skip.
//
// When the tests run as root, PostgreSQL runs as the postgres OS user,
// which owns the server's directory. Servers get the parent-death signal on
// Linux, so they go away even if the test process is killed; the next test
// process that starts a server removes the directories such a process left.
//
// Stop, Kill and Restart are the fault-injection handles: Kill crashes the
// server (SIGKILL) so that open connections break at once, and Restart
// brings it back on the same port.
package testsvc
