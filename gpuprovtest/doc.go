// Package gpuprovtest holds the test helpers that drive a whole Provisioner
// or read what it journaled, for the tests of the adapters and of the
// examples. It sits above the engine (it imports the root package, the
// journal and its SQLite backend), so that the contract's kit
// (provider/providertest) and the adapters' shared harness
// (internal/rest/resttest) stay free of both.
//
// A failover test checks the attempts the journal holds:
//
//	gpuprovtest.CheckAttempts(t, db, "train-1",
//		gpuprovtest.Attempt{Zone: "us-east-1a", Kind: "capacity"},
//		gpuprovtest.Attempt{Zone: "us-east-1b"})
//
// A secrets test launches against a gateway that echoes the credentials
// and checks that none reached the error, the events or the journal:
//
//	l := gpuprovtest.LaunchEchoed(t, clk, build, req)
//	gpuprovtest.LaunchLeaks(t, map[string]string{"API key": key}, l)
package gpuprovtest
