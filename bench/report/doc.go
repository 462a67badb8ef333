// Package report turns a harness run into statistics, verdicts, tables,
// plots and a CI gate.
package report
