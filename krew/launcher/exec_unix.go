//go:build !windows

package main

import (
	"os"
	"syscall"
)

// execute replaces this process with the bundle's executable: the exit code, signals and
// the terminal are its own, as if Flux had run it directly.  argv[0] is the path of the
// link whose name says which face to be (entryName).
func execute(target string, args []string) int {
	err := syscall.Exec(target, append([]string{target}, args[1:]...), os.Environ())
	return fail("cannot run %s: %v", target, err)
}
