// Package all registers every cloud adapter gpuprov ships. A program that wants them all imports it for its
// side effect:
//
//	import _ "github.com/org/gpuprov/provider/all"
//
// after which gpuprov.WithRegistryProvider (and the CLI's config) can name any of them. A program that wants
// only some imports those adapters' packages instead; each registers itself at init.
package all

import (
	_ "github.com/org/gpuprov/provider/aws"            // registers "aws"
	_ "github.com/org/gpuprov/provider/azure"          // registers "azure"
	_ "github.com/org/gpuprov/provider/gcp"            // registers "gcp"
	_ "github.com/org/gpuprov/provider/kubernetes"     // registers "kubernetes"
	_ "github.com/org/gpuprov/provider/lambda"         // registers "lambda"
	_ "github.com/org/gpuprov/provider/primeintellect" // registers "primeintellect"
	_ "github.com/org/gpuprov/provider/runpod"         // registers "runpod"
	_ "github.com/org/gpuprov/provider/sim"            // registers "sim"
	_ "github.com/org/gpuprov/provider/vastai"         // registers "vastai"
)
