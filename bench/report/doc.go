// Package report renders an analysed run (bench/compare) for people and
// tools: terminal tables, report.md, bench.txt in the Go benchmark format
// (benchstat reads it) and SVG plots. It renders only: the run's schema
// is bench/result's, the statistics bench/stats', the verdicts and the
// gate bench/compare's.
package report
