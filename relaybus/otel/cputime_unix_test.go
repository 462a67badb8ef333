//go:build unix

package otel_test

import "syscall"

// cpuTime is the CPU time (user and system) this process has used, in
// nanoseconds: on a shared machine a steadier figure than the wall
// clock, which counts the time other processes took the cores.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
