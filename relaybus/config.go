package relaybus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Defaults of Config, used for zero fields.
const (
	DefaultConcurrency           = 10
	DefaultBatchSize             = 10
	DefaultPollInterval          = time.Second
	DefaultLeaseDuration         = 30 * time.Second
	DefaultCompletionBatchWindow = 2 * time.Millisecond
	DefaultCompletionBatchMax    = 100
	DefaultPublishGroupWait      = 2 * time.Millisecond
	DefaultMaxAttempts           = 10
	DefaultRetryBaseDelay        = time.Second
	DefaultRetryMaxDelay         = time.Hour
	DefaultRetryJitter           = 0.1
	DefaultShutdownTimeout       = 10 * time.Second
	// DefaultMaxPayloadBytes is Config.MaxPayloadBytes when unset: 1 MiB,
	// the default of every store's payload option too.
	DefaultMaxPayloadBytes = driver.DefaultMaxPayloadBytes
	// DefaultListLimit is the page size of ListDeliveries when
	// DeliveryListParams.Limit is zero (the store's default page).
	DefaultListLimit = driver.DefaultListLimit
)

// Disabled, set as Config.CompletionBatchWindow, Config.PublishGroupWait or
// Config.RetryJitter, turns that feature off. A zero value cannot mean "off" because zero fields take
// their defaults (the same convention as River's -1 for "no timeout").
const Disabled = -1

// Config configures a Bus. Zero fields take their defaults; a set field out
// of range is an ErrInvalid error from New naming the field and its range.
type Config struct {
	// Owner names this process in lease rows. Default
	// "<hostname>-<pid>-<8 random hex>". Two live buses must never share an
	// owner: OwnerRelinquish releases everything an owner holds.
	Owner string
	// Concurrency bounds the handlers running at once: the dispatcher
	// runs that many workers. Default 10, [1, MaxConcurrency].
	Concurrency int
	// BatchSize bounds the deliveries of one claim. Default 10,
	// [1, MaxClaimLimit].
	BatchSize int
	// PollInterval is the wait between claims when the last claim found less
	// than a full batch. Default 1s, [MinPollInterval, MaxPollInterval].
	//
	// With wake-ups (see DisableWakeups) an idle dispatcher claims new work
	// within milliseconds of its commit whatever PollInterval is, and the
	// poll only bounds how late it sees what no wake-up announces: a retry
	// falling due, a lane whose lease expired, a wake-up that was lost (a
	// listener reconnecting; a publish whose transaction committed after
	// the store announced it, see the store's documentation). The default
	// stays 1 s for those, and for stores and deployments without
	// wake-ups; a longer poll saves idle claims (one per PollInterval per
	// process) at the price of that lateness.
	PollInterval time.Duration
	// LeaseDuration is how long a claim (and each renewal) holds a delivery.
	// Default 30s, [MinLeaseDuration, MaxLeaseDuration].
	LeaseDuration time.Duration
	// LeaseRenewInterval is the period of lease renewal. Default
	// LeaseDuration/3; must be in (0, LeaseDuration).
	LeaseRenewInterval time.Duration
	// CompletionBatchWindow is how long a success waits for others to be
	// completed with it in one DeliveryCompleteMany call. Default 2ms,
	// [0, MaxCompletionBatchWindow]; Disabled (-1) completes each delivery
	// alone with DeliveryComplete. With a store that completes and claims
	// in one transaction (driver.CompletingClaimer: the PostgreSQL store),
	// a success waits as long for the dispatcher's next claim, which
	// writes every success waiting in its own transaction (one commit for
	// both, and the claim sees the keys they freed: a key's next delivery
	// is claimed by the transaction that completes the one before); what
	// no claim took by then is completed on its own, at once.
	CompletionBatchWindow time.Duration
	// CompletionBatchMax sends a completion batch at once when it has this
	// many deliveries. Default 100, [1, MaxLeasesPerCall]. With a
	// driver.CompletingClaimer, successes waiting for the next claim go to
	// the completer at once when a handler's successes (one delivery, or
	// one keyed run) find CompletionBatchMax or more waiting already: one
	// claim carries at most CompletionBatchMax-1 plus one run (and never
	// more than MaxLeasesPerCall), so a hot key's run that finishes while
	// another waits rides the claim with it.
	CompletionBatchMax int
	// PublishGroupWait bounds the wait of Publish's group commit (see
	// Publish and docs/publishing.md): concurrent Publish calls of the
	// bus are written in one transaction of the store's. Up to two
	// writes (groups or lone calls) are in flight at once. A call that
	// finds fewer being written, and no group forming, is sent at once,
	// alone, so a single caller never waits; a call that finds two being
	// written joins the next group, which is sent when one of them has
	// finished, when it is full (MaxEventsPerPublish events), or at the
	// latest PublishGroupWait after its first call joined it, whichever
	// comes first. Default 2ms, [0, MaxPublishGroupWait] (0 means the
	// default); Disabled (-1) turns group commit off: each Publish is a
	// transaction of its own. PublishTx is never grouped (it runs in the
	// caller's transaction).
	PublishGroupWait time.Duration
	// MaxAttempts is the attempt budget of a handler whose options do not
	// set one. Default 10, [1, MaxAttemptsLimit].
	MaxAttempts int
	// RetryBaseDelay and RetryMaxDelay shape the retry backoff:
	// min(base*2^(attempt-1), max), then spread by ±RetryJitter. Defaults 1s
	// and 1h; base in (0, MaxRetryDelay], max in [base, MaxRetryDelay].
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// RetryJitter is the relative spread of retry delays. Default 0.1,
	// [0, 1]; Disabled (-1) means no jitter.
	RetryJitter float64
	// DisableWakeups turns wake-ups off: the dispatcher then finds new
	// work only at its polls. Default false: when the store offers
	// wake-ups (driver.Waker: the PostgreSQL store's LISTEN/NOTIFY, the
	// memory store's in process), the dispatcher listens on one connection
	// of its own while it runs, and an idle claim loop claims as soon as a
	// publish commits or another process hands its lanes back, instead of
	// at its next poll. A wake-up is a hint: a lost one costs latency,
	// never a delivery (PollInterval). The listener reconnects with a
	// backoff, logged, and the loop claims at once after a reconnect;
	// where wake-ups cannot work (PostgreSQL behind a pooler in
	// transaction mode) it says so once in the log and the dispatcher
	// polls. It does not change what a publish sends: the PostgreSQL
	// store announces commits whether anyone listens or not.
	DisableWakeups bool
	// MaxPayloadBytes bounds Event.Payload at publish. Default
	// DefaultMaxPayloadBytes, [1, MaxPayloadBytesLimit].
	MaxPayloadBytes int
	// Logger receives structured logs. Default: discard. (The bus never
	// writes to stdout: the harness worker speaks its protocol there.)
	Logger *slog.Logger
	// Now is the clock used for every time the bus sends to the store and for
	// retry schedules. Default time.Now. Timers (poll, renewal, batching)
	// run on real time.
	Now func() time.Time
	// BeforeComplete, if set, is called with each completion batch (the
	// deliveries whose handlers succeeded) before the completion is sent to
	// the store. If it returns an error the batch is not completed (its
	// leases are released instead, or left to expire if that fails) and the
	// error is logged. The harness uses it to write its records of handled
	// deliveries to the kernel before the completion (one write(2) per
	// batch). For a transactional handler it is called with that one
	// delivery before DeliveryCompleteTx.
	BeforeComplete func(ctx context.Context, ds []*Delivery) error
	// AfterFinish, if set, is called once the store has recorded how a
	// claimed delivery's attempt ended (see Finish): after its completion
	// returned (for a transactional handler, after the transaction
	// committed), its reschedule or burial, its release, or the final
	// write that found its lease lost or failed. A delivery whose lease
	// the renewal found lost while its handler ran is written nothing and
	// gets no call. It runs on the goroutine that made the write (the
	// completer's for batched completions), so it must be quick; a panic
	// is recovered and logged, and what was written stands. Metrics and
	// the harness's completion records use it.
	AfterFinish func(ctx context.Context, f Finish)
	// ShutdownTimeout bounds how long the shutdown waits for running
	// handlers, whose contexts are cancelled when it begins. 0 means
	// DefaultShutdownTimeout; Disabled waits as long as they take; else
	// [MinShutdownTimeout, MaxShutdownTimeout]. When it passes, the
	// handlers still running are logged and left running, their leases
	// are neither renewed nor released but left to expire (as after a
	// crash, so no other process takes their deliveries before then),
	// what else the shutdown writes is written, and Run returns. Set it
	// below the time an orchestrator waits between its stop signal and
	// its kill.
	ShutdownTimeout time.Duration
	// Middleware wraps every handler's calls (see Middleware), the first
	// outermost, outside each handler's HandlerOptions.Middleware. A nil
	// entry is an error.
	Middleware []Middleware
}

// withDefaults returns cfg with defaults filled in, or the first field out of
// range.
func (cfg Config) withDefaults() (Config, error) {
	c := cfg
	if c.Owner == "" {
		c.Owner = defaultOwner()
	} else if err := driver.ValidateName("Config.Owner", c.Owner); err != nil {
		return c, err
	}
	if err := intField("Concurrency", &c.Concurrency, DefaultConcurrency, 1, MaxConcurrency); err != nil {
		return c, err
	}
	if err := intField("BatchSize", &c.BatchSize, DefaultBatchSize, 1, MaxClaimLimit); err != nil {
		return c, err
	}
	if err := durField("PollInterval", &c.PollInterval, DefaultPollInterval, MinPollInterval, MaxPollInterval); err != nil {
		return c, err
	}
	if err := durField("LeaseDuration", &c.LeaseDuration, DefaultLeaseDuration, MinLeaseDuration, MaxLeaseDuration); err != nil {
		return c, err
	}
	if c.LeaseRenewInterval == 0 {
		c.LeaseRenewInterval = c.LeaseDuration / 3
	} else if c.LeaseRenewInterval < 0 || c.LeaseRenewInterval >= c.LeaseDuration {
		return c, invalidf("Config.LeaseRenewInterval %v out of range (0, LeaseDuration=%v)", c.LeaseRenewInterval, c.LeaseDuration)
	}
	switch {
	case c.CompletionBatchWindow == 0:
		c.CompletionBatchWindow = DefaultCompletionBatchWindow
	case c.CompletionBatchWindow == Disabled:
	case c.CompletionBatchWindow < 0 || c.CompletionBatchWindow > MaxCompletionBatchWindow:
		return c, invalidf("Config.CompletionBatchWindow %v out of range [0, %v] (or Disabled)", c.CompletionBatchWindow, MaxCompletionBatchWindow)
	}
	if err := intField("CompletionBatchMax", &c.CompletionBatchMax, DefaultCompletionBatchMax, 1, MaxLeasesPerCall); err != nil {
		return c, err
	}
	if c.PublishGroupWait != Disabled {
		if err := durField("PublishGroupWait", &c.PublishGroupWait, DefaultPublishGroupWait, 0, MaxPublishGroupWait); err != nil {
			return c, invalidf("Config.PublishGroupWait %v out of range [0, %v] (or Disabled)", c.PublishGroupWait, MaxPublishGroupWait)
		}
	}
	if err := intField("MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts, 1, MaxAttemptsLimit); err != nil {
		return c, err
	}
	if c.RetryBaseDelay == 0 {
		c.RetryBaseDelay = DefaultRetryBaseDelay
	} else if c.RetryBaseDelay < 0 || c.RetryBaseDelay > MaxRetryDelay {
		return c, invalidf("Config.RetryBaseDelay %v out of range (0, %v]", c.RetryBaseDelay, MaxRetryDelay)
	}
	if c.RetryMaxDelay == 0 {
		c.RetryMaxDelay = max(DefaultRetryMaxDelay, c.RetryBaseDelay)
	} else if c.RetryMaxDelay < c.RetryBaseDelay || c.RetryMaxDelay > MaxRetryDelay {
		return c, invalidf("Config.RetryMaxDelay %v out of range [RetryBaseDelay=%v, %v]", c.RetryMaxDelay, c.RetryBaseDelay, MaxRetryDelay)
	}
	switch {
	case c.RetryJitter == 0:
		c.RetryJitter = DefaultRetryJitter
	case c.RetryJitter == Disabled:
		c.RetryJitter = 0
	case !(c.RetryJitter > 0 && c.RetryJitter <= 1): // also rejects NaN
		return c, invalidf("Config.RetryJitter %v out of range [0, 1] (or Disabled)", c.RetryJitter)
	}
	if err := intField("MaxPayloadBytes", &c.MaxPayloadBytes, DefaultMaxPayloadBytes, 1, MaxPayloadBytesLimit); err != nil {
		return c, err
	}
	if c.ShutdownTimeout != Disabled {
		if err := durField("ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout, MinShutdownTimeout, MaxShutdownTimeout); err != nil {
			return c, err
		}
	}
	if slices.ContainsFunc(c.Middleware, func(m Middleware) bool { return m == nil }) {
		return c, invalidf("Config.Middleware: a nil Middleware")
	}
	c.Middleware = slices.Clip(slices.Clone(c.Middleware)) // the caller's slice may change later
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

func intField(name string, v *int, def, lo, hi int) error {
	if *v == 0 {
		*v = def
		return nil
	}
	if *v < lo || *v > hi {
		return invalidf("Config.%s %d out of range [%d, %d]", name, *v, lo, hi)
	}
	return nil
}

func durField(name string, v *time.Duration, def, lo, hi time.Duration) error {
	if *v == 0 {
		*v = def
		return nil
	}
	if *v < lo || *v > hi {
		return invalidf("Config.%s %v out of range [%v, %v]", name, *v, lo, hi)
	}
	return nil
}

// defaultOwner is "<hostname>-<pid>-<8 random hex>": readable in lease rows,
// and unique even when a container reuses hostname and pid.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relaybus"
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24+)
	suffix := "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:])
	// Keep the owner a valid name whatever the hostname is.
	if err := driver.ValidateName("owner", host+suffix); err != nil {
		host = "relaybus"
	}
	return fmt.Sprintf("%s%s", host, suffix)
}
