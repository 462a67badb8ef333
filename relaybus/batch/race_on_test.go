//go:build race

package batch

// raceEnabled: the race detector slows tests about tenfold, so the
// randomised ones run fewer cases under it.
const raceEnabled = true
