//go:build unix && !linux

package proc

import "syscall"

// workerSysProcAttr puts a worker in its own process group; without
// Pdeathsig, KillAll on the harness's way out is the only cleanup.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
