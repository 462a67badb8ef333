package pgmetrics

import (
	"fmt"
	"os"
)

func readMounts() ([]mount, error) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, fmt.Errorf("pgmetrics: reading the mount table: %w", err)
	}
	return parseMounts(string(data)), nil
}
