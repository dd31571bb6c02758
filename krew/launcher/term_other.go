//go:build !linux

package main

import "os"

// terminalColumns: off Linux the width of a terminal is not read here (-1: the bundle
// answers, as it would anyway); 0 when stdout is a pipe or a file (80 columns).
func terminalColumns() int {
	st, err := os.Stdout.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice != 0 {
		return -1
	}
	return 0
}
