package report

import "io"

// WriteTerminal writes the report as terminal tables.
func WriteTerminal(w io.Writer, a *Analysis) error { return nil }

// WriteMarkdown writes report.md.
func WriteMarkdown(w io.Writer, a *Analysis) error { return nil }

// WriteBench writes every valid sample in Go benchmark format (bench.txt)
// for benchstat.
func WriteBench(w io.Writer, a *Analysis) error { return nil }

// WriteResults writes ResultsDir(dir, a.Run): run.json, report.md,
// bench.txt and SVG plots.
func WriteResults(dir string, a *Analysis) error { return nil }

// ResultsDir is where WriteResults writes a run:
// <dir>/<date>-<base>-vs-<candidate>.
func ResultsDir(dir string, run *Run) string { return dir }
