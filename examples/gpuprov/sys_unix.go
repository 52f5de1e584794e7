//go:build unix

package main

import "syscall"

// checkWritable reports whether the process may create files in dir.
func checkWritable(dir string) error {
	return syscall.Access(dir, 0x2|0x1) // W_OK|X_OK
}
