package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
)

// WriteBench writes every valid sample in the Go benchmark format
// (golang.org/x/perf/benchfmt), so benchstat can read bench.txt:
//
//	benchstat -col /side bench.txt
//
// One line per valid window:
//
//	BenchmarkDispatch/store=postgres/cell=1-inst-defaults/side=base 1 2165 deliveries/s 2377 wal-B/delivery
//
// preceded by configuration lines (goos, goarch, refs) and one "Unit"
// metadata line per metric saying which direction is better. Written by
// hand rather than with x/perf's writer: the format is a few lines of
// text and this keeps x/perf out of go.mod; the golden test pins it.
func WriteBench(w io.Writer, a *compare.Analysis) error {
	bw := bufio.NewWriter(w)
	if a.Run != nil {
		r := a.Run
		conf := map[string]string{}
		for k, v := range r.Machine {
			conf[k] = v
		}
		conf["base"] = r.Base.Ref + "@" + r.Base.SHA
		conf["candidate"] = r.Candidate.Ref + "@" + r.Candidate.SHA
		conf["mode"] = r.Mode
		conf["pkg"] = "github.com/berkcansavur/relaybus/bench"
		keys := make([]string, 0, len(conf))
		for k := range conf {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			key := benchKey(k)
			val := strings.ReplaceAll(conf[k], "\n", " ")
			if key == "" || val == "" {
				continue
			}
			fmt.Fprintf(bw, "%s: %s\n", key, val)
		}
		fmt.Fprintln(bw)
		units := map[string]bool{}
		for _, c := range r.Cells {
			for _, m := range c.MetricList() {
				info, _ := result.MetricByName(m.Name)
				if info.Name == "" {
					info = m
				}
				if !units[info.Unit] {
					units[info.Unit] = true
					better := "lower"
					if info.HigherIsBetter {
						better = "higher"
					}
					fmt.Fprintf(bw, "Unit %s better=%s\n", benchUnit(info.Unit), better)
				}
			}
		}
		fmt.Fprintln(bw)
		for _, c := range r.Cells {
			metrics := c.MetricList()
			for _, s := range c.Samples {
				if !s.IsValid() {
					continue
				}
				name := "Benchmark" + capitalize(result.Slug(c.Scenario)) + "/store=" + result.Slug(c.Store) +
					"/cell=" + result.Slug(c.Name) + "/side=" + s.Side
				var b strings.Builder
				for _, m := range metrics {
					v, ok := s.Metrics[m.Name]
					if !ok || notMeasured(c, m.Name) {
						continue
					}
					b.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64) + " " + benchUnit(m.Unit))
				}
				if b.Len() == 0 {
					continue
				}
				fmt.Fprintf(bw, "%s 1%s\n", name, b.String())
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: write bench: %w", err)
	}
	return nil
}

// benchKey: a configuration key is lower case, no spaces.
func benchKey(s string) string {
	return strings.ToLower(strings.ReplaceAll(result.Slug(s), "-", "_"))
}

// benchUnit: units may not contain spaces.
func benchUnit(s string) string {
	return strings.Join(strings.Fields(s), "-")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
