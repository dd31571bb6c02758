//go:build windows

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
)

// execute runs the bundle's executable and passes its exit code on (Windows has no exec).
// Ctrl-C reaches every process of the console, the child included: the launcher ignores it
// and waits for the child's own exit code (130).  argv[0] is passed on unchanged, so the
// program sees the name it was installed as (flux-plunger.exe: `flux plunger`).
func execute(target string, args []string) int {
	signal.Ignore(os.Interrupt)
	cmd := exec.Command(target, args[1:]...)
	cmd.Args = append([]string{args[0]}, args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return fail("cannot run %s: %v", target, err)
	}
	return 0
}
