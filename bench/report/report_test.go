package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		actual := filepath.Join("testdata", name+".actual")
		_ = os.WriteFile(actual, got, 0o644)
		t.Fatalf("%s differs from %s (wrote %s; go test -update rewrites goldens)", name, path, actual)
	}
}

func TestGolden(t *testing.T) {
	a := compare.Analyze(resulttest.Run(), compare.DefaultSettings())
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer, *compare.Analysis) error
	}{
		{"terminal", func(b *bytes.Buffer, a *compare.Analysis) error { return WriteTerminal(b, a) }},
		{"markdown", func(b *bytes.Buffer, a *compare.Analysis) error { return WriteMarkdown(b, a) }},
		{"bench", func(b *bytes.Buffer, a *compare.Analysis) error { return WriteBench(b, a) }},
	} {
		var b bytes.Buffer
		if err := tc.write(&b, a); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.Bytes())
	}
}

func TestWriteFilesAndReload(t *testing.T) {
	t.Parallel()
	run := resulttest.Run()
	out := result.Dir(t.TempDir(), run)
	if filepath.Base(out) != "2026-11-30-100000-v0.1.0-vs-HEAD" {
		t.Fatalf("dir %s", out)
	}
	if err := result.Write(out, run); err != nil {
		t.Fatal(err)
	}
	a := compare.Analyze(run, compare.DefaultSettings())
	if err := WriteFiles(out, a); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.json", "report.md", "bench.txt", "00-postgres-dispatch-1-inst-defaults-conc-10-batch-10-pool-10-poll-1s-throughput.svg", "02-postgres-mixed-1000-s-defaults-dispatchers-latency.svg"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	loaded, err := result.Load(filepath.Join(out, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Re-rendering a saved run gives the same report.
	var x, y bytes.Buffer
	if err := WriteMarkdown(&x, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&y, compare.Analyze(loaded, compare.DefaultSettings())); err != nil {
		t.Fatal(err)
	}
	if x.String() != y.String() {
		t.Fatalf("re-rendered report differs:\n%s\n---\n%s", x.String(), y.String())
	}
}

func TestWrapWords(t *testing.T) {
	got := wrapWords("1 inst, 4 hot keys, tuned (conc 200, batch 200, pool 40, poll 50ms)", 28)
	want := []string{"1 inst, 4 hot keys, tuned", "(conc 200, batch 200, pool", "40, poll 50ms)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("wrapWords = %q, want %q", got, want)
	}
	// A word longer than the width stays whole on its own line.
	if got := wrapWords("a verylongword b", 4); strings.Join(got, "|") != "a|verylongword|b" {
		t.Fatalf("wrapWords long word = %q", got)
	}
}

// A cell with fewer metric rows than label lines keeps the whole name and
// its validity: the leftover lines go into its last row.
func TestTermRowsLabelOverflow(t *testing.T) {
	c := &result.Cell{Name: "SIGKILL 1 of 2 dispatchers, poison 1/50, lease 2s", Samples: []*result.Sample{{}}}
	m, _ := result.MetricByName(result.MetricDeliveriesPerS)
	g := &group{scenario: "faults", cells: []*result.Cell{c}, metrics: []result.MetricInfo{m},
		byCell: map[*result.Cell]map[string]*compare.Comparison{c: {}}}
	rows := g.termRows()
	if len(rows) != 1 {
		t.Fatalf("rows = %d, want 1", len(rows))
	}
	want := "SIGKILL 1 of 2 dispatchers,\npoison 1/50, lease 2s\n" + validity(c)
	if rows[0][0] != want || rows[0][1] != m.Title || rows[0][5] != "not measured in this cell" {
		t.Fatalf("row = %q", rows[0])
	}
}
