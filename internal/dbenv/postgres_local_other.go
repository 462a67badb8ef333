//go:build !linux

package dbenv

import "syscall"

// serverProcAttr runs the server in its own process group, as cred. Without
// Linux's parent-death signal a killed test binary leaves the server
// running; Stop and the test helper's signal handler are the cleanup.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
