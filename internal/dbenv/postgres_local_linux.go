package dbenv

import "syscall"

// serverProcAttr runs the server in its own process group, as cred, with a
// parent-death signal: if the process that started it dies, the kernel sends
// the postmaster SIGINT (fast shutdown). Go applies the signal after
// switching credentials, so the credential change does not clear it.
//
// The signal is tied to the OS thread that forked the server; the Go runtime
// does not end its threads except when a goroutine exits while locked to
// one, which dbenv never does.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT, Credential: cred}
}
