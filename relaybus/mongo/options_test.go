package mongo

import (
	"errors"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func TestNewConfig(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("d", MaxDatabaseNameBytes)
	tests := []struct {
		name    string
		opts    *Options
		wantErr string // "" = valid
	}{
		{"nil options", nil, "options are nil"},
		{"empty database", &Options{}, "Database is empty"},
		{"database at the limit", &Options{Database: long}, ""},
		{"database over the limit", &Options{Database: long + "d"}, "over MongoDB's limit"},
		{"database invalid UTF-8", &Options{Database: "a\xffb"}, "not valid UTF-8"},
		{"database with NUL", &Options{Database: "a\x00b"}, "contains"},
		{"plain database", &Options{Database: "app_outbox-1"}, ""},
		{"prefix default", &Options{Database: "app"}, ""},
		{"prefix with $", &Options{Database: "app", CollectionPrefix: "rb$"}, "\"$\" or NUL"},
		{"prefix with NUL", &Options{Database: "app", CollectionPrefix: "rb\x00"}, "\"$\" or NUL"},
		{"prefix system.", &Options{Database: "app", CollectionPrefix: "system.rb_"}, "system."},
		{"prefix invalid UTF-8", &Options{Database: "app", CollectionPrefix: "\xff"}, "not valid UTF-8"},
		{"prefix with dots is fine", &Options{Database: "app", CollectionPrefix: "rb.v1."}, ""},
		{"namespace too long", &Options{Database: "app", CollectionPrefix: strings.Repeat("p", 250)}, "namespace"},
		{"payload negative", &Options{Database: "app", MaxPayloadBytes: -1}, "MaxPayloadBytes"},
		{"payload over the limit", &Options{Database: "app", MaxPayloadBytes: MaxPayloadBytesLimit + 1}, "MaxPayloadBytes"},
		{"payload at the limit", &Options{Database: "app", MaxPayloadBytes: MaxPayloadBytesLimit}, ""},
	}
	for _, c := range []byte("/\\. \"$*<>:|?") {
		tests = append(tests, struct {
			name    string
			opts    *Options
			wantErr string
		}{"database with " + string(c), &Options{Database: "a" + string(c) + "b"}, "contains"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := newConfig(tt.opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("newConfig = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("newConfig = %v, want an error containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, relaytype.ErrInvalid) {
				t.Errorf("error %v does not wrap relaytype.ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), "relaybus/mongo: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

func TestNewConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := newConfig(&Options{Database: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.prefix != DefaultCollectionPrefix || cfg.maxPayloadBytes != driver.DefaultMaxPayloadBytes {
		t.Fatalf("defaults: prefix %q, max payload %d", cfg.prefix, cfg.maxPayloadBytes)
	}
	cfg, err = newConfig(&Options{Database: "app", CollectionPrefix: "x_", MaxPayloadBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.prefix != "x_" || cfg.maxPayloadBytes != 10 {
		t.Fatalf("given: prefix %q, max payload %d", cfg.prefix, cfg.maxPayloadBytes)
	}
}

// MaxPayloadBytesLimit must leave room in a 16 MiB BSON document for the
// largest headers the core allows.
func TestPayloadLimitLeavesRoomForHeaders(t *testing.T) {
	t.Parallel()
	const bsonMax = 16 << 20
	headers := driver.MaxHeaders * 2 * driver.MaxHeaderBytes
	if MaxPayloadBytesLimit+headers+64<<10 > bsonMax {
		t.Fatalf("payload limit %d + headers %d + 64 KiB of fields exceed a BSON document (%d)", MaxPayloadBytesLimit, headers, bsonMax)
	}
	if MaxPayloadBytesLimit < driver.DefaultMaxPayloadBytes {
		t.Fatalf("payload limit %d is below the core default %d", MaxPayloadBytesLimit, driver.DefaultMaxPayloadBytes)
	}
}

// The options added by 0.2.0 have defaults that need no check: history
// off, and a logger that discards when none is given (the store logs on
// best-effort paths and must not need a nil check there).
func TestNewConfigHistoryAndLogger(t *testing.T) {
	t.Parallel()
	cfg, err := newConfig(&Options{Database: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.history || cfg.logger == nil {
		t.Fatalf("defaults: history %v, logger %v", cfg.history, cfg.logger)
	}
	cfg.logger.Warn("discarded")
	cfg, err = newConfig(&Options{Database: "app", CompletionHistory: true})
	if err != nil || !cfg.history {
		t.Fatalf("CompletionHistory not applied: %+v, %v", cfg, err)
	}
	// The longest collection name is the history's: the namespace bound
	// is checked against it.
	long := strings.Repeat("p", MaxNamespaceBytes-len("app.")-len(historySuffix))
	if _, err := newConfig(&Options{Database: "app", CollectionPrefix: long}); err != nil {
		t.Fatalf("a prefix that fits with the history suffix: %v", err)
	}
	if _, err := newConfig(&Options{Database: "app", CollectionPrefix: long + "p"}); err == nil {
		t.Fatal("a prefix too long for the history collection's namespace was accepted")
	}
}
