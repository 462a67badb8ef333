package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// A preload template is the database in which one side's setup and
// preload roles build a cell's backlog, once: every window of that side
// and cell starts on a copy of it (CREATE DATABASE ... TEMPLATE), so a
// cell of 8 windows publishes its preload twice, not 8 times. The copy
// is the same rows in the same pages, vacuumed and analyzed, with the
// same event ids; the window's record folder gets the template's preload
// records under the usual name, so validation reads the window as it
// always did. Publishing a 200,000-event preload took 30 to 40 s of
// every dispatch window on a shared machine; a copy takes one to two
// seconds (BENCHMARKS.md, "Wall time of --quick").
type template struct {
	name string // database name
	dir  string // its roles' records and logs
	// prefix is the preload's event id prefix; ignored, what the side's
	// roles ignored of their configs.
	prefix  string
	ignored []string
	// preload is the preload process as the windows' process lists name
	// it (its record file copied into each window's folder).
	preload validate.Process
	err     error
}

// templateRecordFile is the template's preload record file: not named
// *.rec, so `bench validate` (which validates every folder of record
// files) does not take the template folder for a window.
const templateRecordFile = "preload.rec.template"

// templateKey names a template: one per cell and side.
type templateKey struct {
	cell int
	side string
}

// templates are a step's preload templates, built on first use and
// dropped when the run moves to another cell.
type templates struct {
	mu sync.Mutex
	m  map[templateKey]*template
}

// prepareFromTemplate readies the window database as a copy of its
// side's template for the cell, building the template first if this is
// the side's first window of the cell.
func (w *windowRun) prepareFromTemplate(ctx context.Context, key templateKey, name string) error {
	s, phases := w.step, w.phases
	s.dropTemplates(ctx, func(cell int) bool { return cell != key.cell })
	t, built := s.template(ctx, key, name, w)
	if built {
		phases.mark("template")
	}
	if t.err != nil {
		return t.err
	}
	dsn, err := s.Server.CloneDatabase(ctx, w.name, t.name)
	if err != nil {
		return err
	}
	w.dsn, w.dbCreated = dsn, true
	w.mu.Lock()
	w.sample.Ignored = append(w.sample.Ignored, t.ignored...)
	w.mu.Unlock()
	w.prefixes = append(w.prefixes, t.prefix)
	w.addProc(&startedProc{p: t.preload})
	if err := linkOrCopy(filepath.Join(t.dir, templateRecordFile), filepath.Join(w.dir, "preload"+validate.RecordFileExt)); err != nil {
		return fmt.Errorf("runner: the template's preload records: %w", err)
	}
	// The copy needs no Settle: the template was vacuumed and analyzed
	// (pg_statistic is copied with it; the cumulative counters start at
	// zero, as after a VACUUM), and a file copy writes the pages to disk
	// between two checkpoints, leaving nothing dirty.
	phases.mark("clone")
	return nil
}

// template returns the template of key, building it (database name, in a
// folder beside the window's) if there is none; built says it was built
// now. A template that failed keeps its error: every window of the side
// and cell reports it.
func (s *Step) template(ctx context.Context, key templateKey, name string, w *windowRun) (t *template, built bool) {
	s.tmpl.mu.Lock()
	defer s.tmpl.mu.Unlock()
	if t := s.tmpl.m[key]; t != nil {
		return t, false
	}
	if s.tmpl.m == nil {
		s.tmpl.m = map[templateKey]*template{}
	}
	t = s.buildTemplate(ctx, name, filepath.Join(filepath.Dir(w.dir), "template-"+key.side), w)
	s.tmpl.m[key] = t
	return t, true
}

// buildTemplate creates database name and runs the side's setup and
// preload roles in it, then vacuums, analyzes and checkpoints it. On
// failure the database is dropped and the template holds the error.
func (s *Step) buildTemplate(ctx context.Context, name, dir string, w *windowRun) *template {
	t := &template{name: name, dir: dir, prefix: name + "-pre-"}
	fail := func(err error) *template {
		t.err = fmt.Errorf("preload template %s: %w", name, err)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		defer cancel()
		if derr := s.Server.DropDatabase(dctx, name); derr != nil {
			s.warnf("dropping template %s: %v", name, derr)
		}
		return t
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	s.logf("  building the %s preload template (%d events, published once for the cell's %s windows)", w.side.Name, w.c.Preload, w.side.Name)
	tw := &windowRun{step: s, c: w.c, side: w.side, sample: &result.Sample{}, name: name, dir: dir, phases: newPhases()}
	dsn, err := s.Server.CreateDatabase(ctx, name)
	if err != nil {
		return fail(err)
	}
	tw.dsn = dsn
	if err := s.Server.Prepare(ctx, dsn); err != nil {
		return fail(err)
	}
	if _, err := tw.runOnce(ctx, tw.config(protocol.RoleSetup, "setup", 2)); err != nil {
		return fail(fmt.Errorf("setup: %w", err))
	}
	cfg := tw.preloadConfig(t.prefix)
	cfg.RecordPath = filepath.Join(dir, templateRecordFile)
	if _, err := tw.runOnce(ctx, cfg); err != nil {
		return fail(fmt.Errorf("preload: %w", err))
	}
	if err := s.Server.Settle(ctx, dsn); err != nil {
		return fail(err)
	}
	t.ignored = tw.sample.Ignored
	ps := tw.processes(ctx)
	if len(ps) != 1 {
		return fail(fmt.Errorf("runner: the template's preload is %d processes, want 1", len(ps)))
	}
	t.preload = ps[0]
	t.preload.Template, t.preload.Record = true, "preload"+validate.RecordFileExt
	return t
}

// dropTemplates drops the templates of the cells drop selects. A
// window's copy does not depend on its template, so a template may go
// while a window of its cell still drains.
func (s *Step) dropTemplates(ctx context.Context, drop func(cell int) bool) {
	s.tmpl.mu.Lock()
	defer s.tmpl.mu.Unlock()
	for k, t := range s.tmpl.m {
		if !drop(k.cell) {
			continue
		}
		delete(s.tmpl.m, k)
		if t.err != nil {
			continue // dropped when it failed
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		if err := s.Server.DropDatabase(dctx, t.name); err != nil {
			s.warnf("dropping template %s: %v", t.name, err)
		}
		cancel()
	}
}

// Close drops the step's preload templates. The runner calls it when
// its windows are done (or cancelled).
func (s *Step) Close(ctx context.Context) { s.dropTemplates(ctx, func(int) bool { return true }) }

// linkOrCopy makes dst a hard link to src, or a copy where links are
// not possible.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
