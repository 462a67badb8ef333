package pgmetrics

import (
	"runtime"
	"testing"
)

func TestFSTypeOf(t *testing.T) {
	t.Parallel()
	mounts := parseMounts(`overlay / overlay rw,relatime 0 0
proc /proc proc rw 0 0
tmpfs /tmp tmpfs rw 0 0
/dev/sda1 /tmp/pg ext4 rw 0 0
/dev/sdb1 /srv/my\040data xfs rw 0 0
tmpfs /tmp/pg tmpfs rw 0 0
`)
	for path, want := range map[string]string{
		"/var/lib/postgresql": "overlay",
		"/tmp/relaybus-pg-1":  "tmpfs",
		"/tmp/pgdata":         "tmpfs", // /tmp/pg is not a prefix of it
		"/tmp/pg/data":        "tmpfs", // the later mount over /tmp/pg hides the ext4 one
		"/srv/my data/base":   "xfs",
		"/":                   "overlay",
	} {
		if got, err := fsTypeOf(path, mounts); err != nil || got != want {
			t.Errorf("fsTypeOf(%q) = %q, %v, want %q", path, got, err, want)
		}
	}
	if _, err := fsTypeOf("/x", nil); err == nil {
		t.Error("no mounts: want an error")
	}
}

func TestFileSystemTypeHere(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the mount table is read on Linux only")
	}
	if fs, err := FileSystemType(t.TempDir()); err != nil || fs == "" {
		t.Fatalf("FileSystemType: %q, %v", fs, err)
	}
}
