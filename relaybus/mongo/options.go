package mongo

import (
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// DefaultCollectionPrefix is Options.CollectionPrefix when it is empty.
const DefaultCollectionPrefix = "relaybus_"

// Limits on Options, each checked by New.
const (
	// MaxDatabaseNameBytes bounds Options.Database: MongoDB rejects
	// database names of 64 bytes or more.
	MaxDatabaseNameBytes = 63
	// MaxNamespaceBytes is MongoDB's bound on "<database>.<collection>"
	// (255 bytes since MongoDB 4.4). New checks it for the longest
	// collection name the store creates.
	MaxNamespaceBytes = 255
	// MaxPayloadBytesLimit bounds Options.MaxPayloadBytes. A delivery
	// document carries a copy of its event's payload and a BSON document
	// is at most 16 MiB; the last MiB is left for headers (at most
	// driver.MaxHeaders * 2 * driver.MaxHeaderBytes = 512 KiB) and the
	// delivery's own fields.
	MaxPayloadBytesLimit = 15 << 20
)

// Options configure a Store.
type Options struct {
	// Database is the database the store's collections live in. Required.
	// MongoDB's rules apply: at most MaxDatabaseNameBytes bytes, none of
	// / \ . " $ * < > : | ? space or NUL.
	Database string
	// CollectionPrefix is put before every collection name ("events",
	// "deliveries", "keys", "lanes", "completed_deliveries"). Empty means DefaultCollectionPrefix. It must
	// not contain "$" or NUL, nor start with "system.".
	CollectionPrefix string
	// MaxPayloadBytes bounds Event.Payload. 0 means
	// driver.DefaultMaxPayloadBytes; at most MaxPayloadBytesLimit.
	MaxPayloadBytes int
	// CompletionHistory keeps one document per completed delivery in
	// "<prefix>completed_deliveries", inserted in the completion's
	// transaction, so DeliveryList and Statistics can show completed
	// deliveries. Off by default: a completion then deletes the delivery
	// and writes nothing else. It costs one insert per completion.
	CompletionHistory bool
	// Logger receives what the store does on a best-effort path and
	// does not return as an error (parking a key's backlog, giving back
	// a claim that could not be returned). nil discards it.
	Logger *slog.Logger
}

// Collection name suffixes.
const (
	eventsSuffix     = "events"
	deliveriesSuffix = "deliveries"
	keysSuffix       = "keys"
	lanesSuffix      = "lanes"
	historySuffix    = "completed_deliveries"
	pausedSuffix     = "paused_handlers"
)

// longestSuffix is the longest collection suffix, for the namespace check.
var longestSuffix = historySuffix

// config is Options after defaults and validation.
type config struct {
	database        string
	prefix          string
	maxPayloadBytes int
	history         bool
	logger          *slog.Logger
}

// newConfig validates opts and fills in defaults.
func newConfig(opts *Options) (config, error) {
	if opts == nil {
		return config{}, invalidf("options are nil (Options.Database is required)")
	}
	if err := validateDatabaseName(opts.Database); err != nil {
		return config{}, err
	}
	prefix := opts.CollectionPrefix
	if prefix == "" {
		prefix = DefaultCollectionPrefix
	}
	if err := validateCollectionPrefix(prefix); err != nil {
		return config{}, err
	}
	if n := len(opts.Database) + 1 + len(prefix) + len(longestSuffix); n > MaxNamespaceBytes {
		return config{}, invalidf("namespace %q is %d bytes, over MongoDB's limit of %d (shorten Database or CollectionPrefix)",
			opts.Database+"."+prefix+longestSuffix, n, MaxNamespaceBytes)
	}
	maxPayload := opts.MaxPayloadBytes
	switch {
	case maxPayload < 0 || maxPayload > MaxPayloadBytesLimit:
		return config{}, invalidf("MaxPayloadBytes %d out of range [0, %d]", maxPayload, MaxPayloadBytesLimit)
	case maxPayload == 0:
		maxPayload = driver.DefaultMaxPayloadBytes
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return config{database: opts.Database, prefix: prefix, maxPayloadBytes: maxPayload, history: opts.CompletionHistory, logger: logger}, nil
}

// databaseNameForbidden are the characters MongoDB forbids in a database
// name on any platform (the Windows set, which is the strictest), plus
// space.
const databaseNameForbidden = "/\\. \"$*<>:|?"

// validateDatabaseName applies MongoDB's database naming rules.
func validateDatabaseName(name string) error {
	if name == "" {
		return invalidf("Options.Database is empty")
	}
	if len(name) > MaxDatabaseNameBytes {
		return invalidf("database name is %d bytes, over MongoDB's limit of %d", len(name), MaxDatabaseNameBytes)
	}
	if !utf8.ValidString(name) {
		return invalidf("database name %q is not valid UTF-8", name)
	}
	if i := strings.IndexAny(name, databaseNameForbidden+"\x00"); i >= 0 {
		return invalidf("database name %q contains %q, which MongoDB does not allow (forbidden: / \\ . \" $ * < > : | ? space NUL)", name, name[i])
	}
	return nil
}

// validateCollectionPrefix applies MongoDB's collection naming rules to
// the prefix (the suffixes are fixed and valid).
func validateCollectionPrefix(prefix string) error {
	if !utf8.ValidString(prefix) {
		return invalidf("collection prefix %q is not valid UTF-8", prefix)
	}
	if strings.ContainsAny(prefix, "$\x00") {
		return invalidf("collection prefix %q contains \"$\" or NUL, which MongoDB does not allow in collection names", prefix)
	}
	if strings.HasPrefix(prefix, "system.") {
		return invalidf("collection prefix %q starts with \"system.\", which MongoDB reserves", prefix)
	}
	return nil
}
