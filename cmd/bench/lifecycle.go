package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/build"
	"github.com/berkcansavur/relaybus/bench/comparison"
	"github.com/berkcansavur/relaybus/bench/lifecycle"
	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/refs"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// maxLifecycleRefs bounds --ref: the text puts the refs side by side.
const maxLifecycleRefs = 6

const lifecycleUsage = `usage: bench lifecycle --ref REF [--ref REF ...] [flags]

What one delivery leaves behind in PostgreSQL, for each ref: on a fresh
database with autovacuum off, the ref's own worker runs its setup,
publishes ONE event with ONE handler, claims it and completes it; then
pageinspect reads every heap line pointer of the deliveries table, every
index of it with the heap tids of its entries, the lane rows' versions
where the ref has lanes, and the tables' tuple counters. Printed side by
side, and saved as text, JSON and SVG in <out>/<date>-lifecycle-<refs>/.`

type lifecycleOptions struct {
	refs          []string
	provider      string
	dsn, image    string
	out, cacheDir string
	repo          string
}

func lifecycleCommand() *command {
	o := &lifecycleOptions{}
	return &command{usage: lifecycleUsage, nargs: 0, flags: o.bind, run: o.run}
}

// bind binds the lifecycle's flags to o.
func (o *lifecycleOptions) bind(fs *flag.FlagSet) {
	fs.Func("ref", "a ref to show (repeatable, at least one, at most 6): tag, branch, commit, HEAD, vX.Y.Z or WORKTREE", func(s string) error {
		if strings.TrimSpace(s) == "" {
			return errors.New("empty ref")
		}
		o.refs = append(o.refs, s)
		return nil
	})
	fs.StringVar(&o.provider, "db-provider", "auto", "PostgreSQL: auto, local, testcontainers or dsn")
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL server for --db-provider dsn (superuser: pageinspect; a database is created per ref)")
	fs.StringVar(&o.image, "image", "", "PostgreSQL image for testcontainers")
	fs.StringVar(&o.out, "out", "bench-out", "results directory (bench-out/ is ignored by git; --out results for a set kept with the project)")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "build cache (empty: $XDG_CACHE_HOME/relaybus-bench)")
	fs.StringVar(&o.repo, "repo", ".", "git repository to resolve refs in")
}

func (o *lifecycleOptions) run(ctx context.Context, c *call) error {
	if len(o.refs) == 0 {
		return errors.New("bench: lifecycle: at least one --ref is needed (e.g. --ref v0.1.0 --ref HEAD)")
	}
	if len(o.refs) > maxLifecycleRefs {
		return fmt.Errorf("bench: lifecycle: %d refs, at most %d", len(o.refs), maxLifecycleRefs)
	}
	provider, err := dbenv.ParseProvider(o.provider)
	if err != nil {
		return err
	}
	logf, stdout := c.logf, c.stdout
	resolved := make([]refs.Ref, len(o.refs))
	for i, name := range o.refs {
		if resolved[i], err = refs.Resolve(ctx, o.repo, name); err != nil {
			return err
		}
		if resolved[i].Peer != "" {
			return fmt.Errorf("bench: lifecycle --ref %s: a peer has no relaybus deliveries to follow; lifecycle takes relaybus refs", name)
		}
	}
	tmp, err := os.MkdirTemp("", "relaybus-lifecycle-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	keepTmp := false
	defer func() {
		if keepTmp {
			logf("worker logs kept in %s", tmp)
			return
		}
		os.RemoveAll(tmp)
	}()
	b, err := build.NewBuilder(o.repo, o.cacheDir, logf)
	if err != nil {
		return err
	}
	type built struct {
		ref     refs.Ref
		bin     string
		version string
	}
	bins := make([]built, len(resolved))
	for i, ref := range resolved {
		bin, err := b.Build(ctx, fmt.Sprintf("ref%d", i+1), ref, tmp)
		if err != nil {
			return err
		}
		hello, err := proc.Handshake(ctx, bin)
		if err != nil {
			return err
		}
		bins[i] = built{ref: ref, bin: bin, version: hello.Version}
		logf("%s: relaybus %s, protocol %d", ref, hello.Version, hello.Protocol)
	}

	pg, info, stop, err := comparison.StartPostgres(ctx, dbenv.PostgresOptions{Provider: provider, DSN: o.dsn, Image: o.image,
		Settings: map[string]string{"autovacuum": "off"}, Logf: logf})
	if err != nil {
		return err
	}
	defer stop()
	logf("PostgreSQL %s (%s), autovacuum=%s", info.Version, info.Provider, info.Settings["autovacuum"])
	set := &lifecycle.Set{Started: time.Now(), Machine: comparison.Machine(),
		Database: result.DatabaseInfo{Kind: "postgres", Provider: string(info.Provider), Version: info.Version, Settings: info.Settings}}
	for i, bi := range bins {
		name := fmt.Sprintf("rb_lifecycle_%d", i+1)
		logf("%s: database %s", bi.ref, name)
		dsn, err := pg.CreateDatabase(ctx, name)
		if err != nil {
			return err
		}
		rep, err := lifecycle.Run(ctx, lifecycle.Config{Ref: bi.ref.Name, SHA: bi.ref.SHA, Version: bi.version, Bin: bi.bin,
			DSN: dsn, Dir: filepath.Join(tmp, name), Logf: logf})
		if derr := pg.DropDatabase(context.WithoutCancel(ctx), name); derr != nil {
			logf("warning: %v", derr)
		}
		if err != nil {
			keepTmp = true
			return fmt.Errorf("bench: lifecycle of %s: %w", bi.ref, err)
		}
		if bi.ref.Dirty {
			rep.Ref += " (dirty working tree)"
		}
		set.Reports = append(set.Reports, rep)
	}
	dir := lifecycle.Dir(o.out, set.Started, o.refs)
	if err := lifecycle.Write(dir, set); err != nil {
		return err
	}
	fmt.Fprint(stdout, lifecycle.Text(set.Reports))
	fmt.Fprintf(stdout, "\nresults: %s\n", dir)
	return nil
}
