//go:build race

package main

// reownBound is how long S3's reduced test lets the re-owning take: the
// race detector slows the recovering process several times over.
const reownBound = 6e9 // 6s
