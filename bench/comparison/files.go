package comparison

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/berkcansavur/relaybus/bench/runner"
)

// keepFiles copies what the result set keeps of the run folder runDir
// into dir: the non-empty CPU profiles (profiles/) with profile, every
// window folder (records, logs, manifests, for bench validate: records/)
// with records.
func keepFiles(runDir, dir string, profile, records bool) error {
	if profile {
		if err := copyTree(runDir, filepath.Join(dir, runner.ProfilesDir), func(path string) bool {
			fi, err := os.Stat(path)
			return err == nil && strings.HasSuffix(path, runner.ProfileExt) && fi.Size() > 0
		}); err != nil {
			return fmt.Errorf("bench: keeping the profiles: %w", err)
		}
	}
	if records {
		if err := copyTree(runDir, filepath.Join(dir, "records"), func(string) bool { return true }); err != nil {
			return fmt.Errorf("bench: keeping the records: %w", err)
		}
	}
	return nil
}

// copyTree copies the regular files under src that keep accepts to the
// same places under dst.
func copyTree(src, dst string, keep func(path string) bool) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || !keep(path) {
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
