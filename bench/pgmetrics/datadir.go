package pgmetrics

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DataDirectory is the server's data directory (SHOW data_directory,
// which needs a superuser or pg_read_all_settings).
func DataDirectory(ctx context.Context, conn *pgx.Conn) (string, error) {
	var dir string
	if err := conn.QueryRow(ctx, harnessTag+" SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return "", fmt.Errorf("pgmetrics: reading data_directory: %w", err)
	}
	return dir, nil
}

// FileSystemType is the type of the file system that holds path on
// this machine ("ext4", "xfs", "tmpfs", ...), from the mount table: the
// mount point that is the longest prefix of the resolved path. The
// server's files are only on this machine when the harness started it
// (dbenv's local provider); a container's or a remote server's path
// means nothing here.
func FileSystemType(path string) (string, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("pgmetrics: %w", err)
	}
	mounts, err := readMounts()
	if err != nil {
		return "", err
	}
	return fsTypeOf(resolved, mounts)
}

// mount is one line of the mount table: where, and what type.
type mount struct{ point, fsType string }

// parseMounts reads /proc/self/mounts text: "device point type options
// dump pass", with spaces and other bytes in names escaped as \ooo.
func parseMounts(text string) []mount {
	var out []mount
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		out = append(out, mount{point: unescapeOctal(f[1]), fsType: f[2]})
	}
	return out
}

func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// fsTypeOf: the type of the longest mount point that contains path; the
// last such line wins, as a later mount hides an earlier one.
func fsTypeOf(path string, mounts []mount) (string, error) {
	best, fsType := -1, ""
	for _, m := range mounts {
		if m.point != "/" && path != m.point && !strings.HasPrefix(path, strings.TrimSuffix(m.point, "/")+"/") {
			continue
		}
		if len(m.point) >= best {
			best, fsType = len(m.point), m.fsType
		}
	}
	if best < 0 {
		return "", fmt.Errorf("pgmetrics: no mount holds %s", path)
	}
	return fsType, nil
}
