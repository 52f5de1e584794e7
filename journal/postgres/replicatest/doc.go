// Package replicatest holds the multi-replica tests of the PostgreSQL
// journal: several gpuprov engines (Provisioners with distinct owners, each
// with its own connection pool) sharing one journal, one of them killed
// mid-way, the others taking its VMs over once its leases lapse. It has no
// code of its own; run its tests with
//
//	go test ./journal/postgres/replicatest
//
// They start a private PostgreSQL server (see package pgtest) or use the one
// GPUPROV_TEST_POSTGRES names.
package replicatest
