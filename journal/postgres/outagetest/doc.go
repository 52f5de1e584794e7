// Package outagetest holds the test of a PostgreSQL outage in the middle of
// launches by three replicas. It is a package of its own because it stops
// and starts its private server (pgtest starts one per test binary): no
// other test may share that server.
package outagetest
