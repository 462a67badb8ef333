package proc

import "syscall"

// workerSysProcAttr puts a worker in its own process group (a terminal's
// SIGINT reaches only the harness, which then stops workers in order) and
// has the kernel kill it if the harness dies without cleaning up.
// Pdeathsig fires when the thread that started the child exits; the Go
// runtime does not retire threads of unlocked goroutines, so in practice
// that is the harness process exiting.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
