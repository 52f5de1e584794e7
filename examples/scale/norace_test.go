//go:build !race

package main

// reownBound is how long S3's reduced test lets the re-owning take: the
// issue's target.
const reownBound = 2e9 // 2s
