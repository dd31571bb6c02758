//go:build linux

package main

import (
	"syscall"
	"unsafe"
)

// terminalColumns is the width of the terminal on stdout, 0 when stdout is no terminal
// (os.get_terminal_size's ioctl, which entry.columns calls).
func terminalColumns() int {
	var ws struct{ row, col, x, y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 1, uintptr(syscall.TIOCGWINSZ),
		uintptr(unsafe.Pointer(&ws)))
	if errno != 0 {
		return 0
	}
	return int(ws.col)
}
