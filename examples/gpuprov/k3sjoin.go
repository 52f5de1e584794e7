package main

import (
	"github.com/org/gpuprov"
	"github.com/org/gpuprov/k3s"
)

// newK3sJoiner is how the CLI forms clusters: the library's k3s Joiner, which
// reaches the server through the Provisioner's SSH connector.
func newK3sJoiner(cfg k3s.Config) gpuprov.Joiner { return &gpuprov.K3sJoiner{Config: cfg} }

// k3sConfig is how the CLI forms clusters: across clouds (nodes may land on
// different providers after failover), with the k3s package's defaults.
func k3sConfig() k3s.Config { return k3s.Config{Network: k3s.CrossCloud} }
