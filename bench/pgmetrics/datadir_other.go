//go:build !linux

package pgmetrics

import "errors"

// readMounts: only Linux's mount table is read; elsewhere the data
// directory's file system is reported as unknown.
func readMounts() ([]mount, error) {
	return nil, errors.New("pgmetrics: the file system type is read from Linux's mount table only")
}
