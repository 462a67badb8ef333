package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func seq(from, n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(from + i)
	}
	return xs
}

func TestMannWhitneyKnownValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		a, b []float64
		want float64
		tol  float64
	}{
		// Completely separated samples: p = 2 / C(2n, n).
		{"3v3 separated", seq(0, 3), seq(10, 3), 0.1, 1e-12},
		{"4v4 separated", seq(0, 4), seq(10, 4), 2.0 / 70, 1e-12},  // 0.0286
		{"5v5 separated", seq(0, 5), seq(10, 5), 2.0 / 252, 1e-12}, // 0.0079
		{"5v5 separated, reversed", seq(10, 5), seq(0, 5), 2.0 / 252, 1e-12},
		{"2v2 separated", seq(0, 2), seq(10, 2), 1.0 / 3, 1e-12},
		// Hand-computed: a = {1,2,4}, b = {3,5,6}: U_a = 1 (4 > 3).
		// P(U <= 1) for 3v3 = (1 + 1) / 20 = 0.1, two-sided 0.2.
		{"3v3 one swap", []float64{1, 2, 4}, []float64{3, 5, 6}, 0.2, 1e-12},
		// Interleaved perfectly: U = mn/2 -> p = 1.
		{"4v4 interleaved", []float64{1, 4, 5, 8}, []float64{2, 3, 6, 7}, 1, 1e-12},
		// Unequal sizes, separated: 2 / C(7, 3) = 2/35.
		{"3v4 separated", seq(0, 3), seq(10, 4), 2.0 / 35, 1e-12},
		// Ties, exact. a = {1,2,2,3}, b = {2,3,4,5}: U_a = 2.5 against
		// a mean of 8. Of the 70 splits of the pooled values, 7 give
		// U <= 2.5 and 7 give U >= 13.5 (enumerated by hand in Python
		// and by enumerateP below): p = 14/70. (The normal approximation
		// said 0.137.)
		{"4v4 ties", []float64{1, 2, 2, 3}, []float64{2, 3, 4, 5}, 14.0 / 70, 1e-12},
		// Separated but tied within each side (issue 11's golden file
		// showed p = 0.013 from the normal approximation): no split is
		// more extreme than this one and its mirror, p = 2/70.
		{"4v4 separated with ties", []float64{1, 1, 2, 3}, []float64{5, 6, 6, 7}, 2.0 / 70, 1e-12},
		{"4v4 separated, all tied within", []float64{1, 1, 1, 1}, []float64{2, 2, 2, 2}, 2.0 / 70, 1e-12},
		// Large samples, no ties: normal approximation. 25 v 25
		// separated: z = (312.5 - 0.5) / sqrt(25*25*51/12) = 6.053,
		// p = 1.42e-9.
		{"25v25 separated", seq(0, 25), seq(100, 25), 1.42e-9, 0.01e-9},
		{"all equal", []float64{1, 1, 1}, []float64{1, 1, 1}, 1, 0},
	}
	for _, tc := range cases {
		got := MannWhitneyP(tc.a, tc.b)
		if math.Abs(got-tc.want) > tc.tol {
			t.Errorf("%s: p = %.6g, want %.6g", tc.name, got, tc.want)
		}
	}
}

// TestExactMatchesEnumeration checks the exact p-value against brute
// force over every split of the pooled values, on small samples with
// many ties (values drawn from 0..3).
func TestExactMatchesEnumeration(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 13))
	for trial := range 300 {
		m, n := 1+rng.IntN(5), 1+rng.IntN(5)
		a, b := make([]float64, m), make([]float64, n)
		for i := range a {
			a[i] = float64(rng.IntN(4))
		}
		for i := range b {
			b[i] = float64(rng.IntN(4))
		}
		if got, want := MannWhitneyP(a, b), enumerateP(a, b); math.Abs(got-want) > 1e-12 {
			t.Fatalf("trial %d: a=%v b=%v: p = %v, enumeration %v", trial, a, b, got, want)
		}
	}
}

// enumerateP: the share of all splits of the pooled values into m and n
// whose U is at least as far from mn/2 as a's.
func enumerateP(a, b []float64) float64 {
	all := append(append([]float64(nil), a...), b...)
	m, N := len(a), len(all)
	dev := math.Abs(uStatistic(a, b) - float64(m*(N-m))/2)
	extreme, total := 0, 0
	for mask := 0; mask < 1<<N; mask++ {
		if popcount(mask) != m {
			continue
		}
		var x, y []float64
		for i, v := range all {
			if mask&(1<<i) != 0 {
				x = append(x, v)
			} else {
				y = append(y, v)
			}
		}
		total++
		if math.Abs(uStatistic(x, y)-float64(m*(N-m))/2) >= dev-1e-9 {
			extreme++
		}
	}
	return float64(extreme) / float64(total)
}

// TestUCountsMatchEnumeration checks the DP against brute force: every
// way to choose which ranks belong to the first sample.
func TestUCountsMatchEnumeration(t *testing.T) {
	t.Parallel()
	for m := 1; m <= 5; m++ {
		for n := 1; n <= 5; n++ {
			want := make([]float64, m*n+1)
			for mask := 0; mask < 1<<(m+n); mask++ {
				if popcount(mask) != m {
					continue
				}
				// U of the first sample: for each of its ranks, the
				// number of second-sample ranks below it.
				u, below := 0, 0
				for r := 0; r < m+n; r++ {
					if mask&(1<<r) != 0 {
						u += below
					} else {
						below++
					}
				}
				want[u]++
			}
			got := uCounts(m, n)
			for u := range want {
				if got[u] != want[u] {
					t.Fatalf("m=%d n=%d u=%d: %v, want %v", m, n, u, got[u], want[u])
				}
			}
		}
	}
}

func popcount(x int) int {
	c := 0
	for ; x != 0; x &= x - 1 {
		c++
	}
	return c
}

func TestMinPossibleP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m, n int
		want float64
	}{{2, 2, 1.0 / 3}, {3, 3, 0.1}, {4, 4, 2.0 / 70}, {3, 5, 2.0 / 56}, {1, 1, 1}} {
		if got := MinPossibleP(tc.m, tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("MinPossibleP(%d,%d) = %v, want %v", tc.m, tc.n, got, tc.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	xs := []float64{1, 2, 3, 4, 5}
	for q, want := range map[float64]float64{0: 1, 0.5: 3, 1: 5, 0.25: 2, 0.9: 4.6} {
		if got := Quantile(xs, q); math.Abs(got-want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if Quantile([]float64{7}, 0.99) != 7 {
		t.Error("one value")
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("quantile of nothing")
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Fatal(m)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatal(m)
	}
	if !math.IsNaN(Median(nil)) {
		t.Fatal("median of nothing")
	}
}

func TestShiftIntervalSmall(t *testing.T) {
	t.Parallel()
	// 4 v 4: k = 1, so the interval is [min, max] of the 16 pairwise
	// differences (coverage 1 - 2/70 = 97.1%).
	lo, hi, ok := ShiftInterval(seq(0, 4), seq(10, 4), 0.95)
	if !ok || lo != 7 || hi != 13 {
		t.Fatalf("interval [%v, %v] %v, want [7, 13]", lo, hi, ok)
	}
	// 3 v 3 cannot give a 95% interval: P(U <= 0) = 0.05 > 0.025.
	if _, _, ok := ShiftInterval(seq(0, 3), seq(10, 3), 0.95); ok {
		t.Fatal("3v3 gave a finite 95% interval")
	}
}

// TestShiftIntervalCoverage: on A/A data (both sides from the same
// distribution) the 95% interval of the log ratio contains 0 in about
// 95% of simulations. Deterministic seeds. Exact coverage for n = 8 is
// 1 - 2 P(U <= k-1) with k = 14: 0.9586.
func TestShiftIntervalCoverage(t *testing.T) {
	t.Parallel()
	for _, n := range []int{8, 25} {
		rng := rand.New(rand.NewPCG(42, uint64(n)))
		const sims = 2000
		covered := 0
		for range sims {
			a, b := make([]float64, n), make([]float64, n)
			for i := range a {
				a[i] = math.Log(1000 * math.Exp(0.2*rng.NormFloat64()))
				b[i] = math.Log(1000 * math.Exp(0.2*rng.NormFloat64()))
			}
			lo, hi, ok := ShiftInterval(a, b, 0.95)
			if !ok || (lo <= 0 && 0 <= hi) {
				covered++
			}
		}
		frac := float64(covered) / sims
		// Binomial sd at 2000 sims is 0.005; allow about 4 sd.
		if frac < 0.93 || frac > 0.975 {
			t.Errorf("n=%d: coverage %.3f, want about 0.95", n, frac)
		}
	}
}

// TestShiftIntervalDetectsShift: a real 20% shift is found and the
// interval contains it.
func TestShiftIntervalDetectsShift(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	a, b := make([]float64, 10), make([]float64, 10)
	for i := range a {
		a[i] = math.Log(1000) + 0.02*rng.NormFloat64()
		b[i] = math.Log(1200) + 0.02*rng.NormFloat64()
	}
	lo, hi, ok := ShiftInterval(a, b, 0.95)
	want := math.Log(1.2)
	if !ok || lo > want || hi < want || lo <= 0 {
		t.Fatalf("interval [%v, %v], want one around %v excluding 0", lo, hi, want)
	}
}
