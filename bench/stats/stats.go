// Package stats is the harness's statistics on small samples: medians
// and quantiles, the two-sided Mann-Whitney U test, and the
// Hodges-Lehmann (Moses) confidence interval of a shift. Every function
// is pure and deterministic (no random numbers), so one run always gives
// the same report.
package stats

import (
	"cmp"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// MaxExactN is the largest sample size per side for which the
// Mann-Whitney U test and the shift interval use exact null
// distributions. The counts are float64: C(2*MaxExactN, MaxExactN) =
// 1.4e11 is exact in one, and the tables stay small.
const MaxExactN = 20

// Median of xs (the average of the two middle values for an even
// count); NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Quantile(s, 0.5)
}

// Quantile is the q-quantile (0 <= q <= 1) of sorted by linear
// interpolation between order statistics (type 7 of Hyndman and Fan, the
// default of R and NumPy); NaN for none. It is the one quantile function
// of the harness: latency percentiles and medians both use it.
func Quantile(sorted []float64, q float64) float64 {
	switch {
	case len(sorted) == 0 || math.IsNaN(q):
		return math.NaN()
	case q <= 0:
		return sorted[0]
	case q >= 1:
		return sorted[len(sorted)-1]
	}
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (pos-float64(i))*(sorted[i+1]-sorted[i])
}

// uStatistic is U of a: the number of pairs (a_i, b_j) with a_i > b_j,
// ties counting one half.
func uStatistic(a, b []float64) float64 {
	u := 0.0
	for _, x := range a {
		for _, y := range b {
			switch {
			case x > y:
				u++
			case x == y:
				u += 0.5
			}
		}
	}
	return u
}

// uCounts returns, for sample sizes m and n, counts[u] = the number of
// the C(m+n, m) equally likely rankings under the null hypothesis that
// give U = u (u = 0..m*n). Recurrence: the largest value belongs to the
// first sample (it beats all n of the second: U(m,n,u) gets
// U(m-1,n,u-n)) or to the second (U(m,n-1,u)).
func uCounts(m, n int) []float64 {
	// f[i][j] is the distribution for sizes (i, j), built bottom-up.
	f := make([][][]float64, m+1)
	for i := 0; i <= m; i++ {
		f[i] = make([][]float64, n+1)
		for j := 0; j <= n; j++ {
			d := make([]float64, i*j+1)
			if i == 0 || j == 0 {
				d[0] = 1
			} else {
				for u := range d {
					if u-j >= 0 && u-j < len(f[i-1][j]) {
						d[u] += f[i-1][j][u-j]
					}
					if u < len(f[i][j-1]) {
						d[u] += f[i][j-1][u]
					}
				}
			}
			f[i][j] = d
		}
	}
	return f[m][n]
}

// MannWhitneyP is the two-sided p-value of the Mann-Whitney U test of a
// against b. For samples of up to MaxExactN a side it is exact: the
// permutation distribution of the rank sum of a, with midranks for ties,
// over all C(m+n, m) equally likely splits, and p is the probability of
// a rank sum at least as far from its mean as the one observed. (The
// normal approximation gives ties p-values that small samples cannot
// reach: 4+4 windows can never give less than 2/70 = 0.0286.) Larger
// samples use the normal approximation with tie and continuity
// corrections. NaN when a side is empty.
func MannWhitneyP(a, b []float64) float64 {
	m, n := len(a), len(b)
	if m == 0 || n == 0 {
		return math.NaN()
	}
	if m <= MaxExactN && n <= MaxExactN {
		return exactRankSumP(a, b)
	}
	u := uStatistic(a, b)
	// Normal approximation. Tie correction: the variance shrinks by
	// sum(t^3 - t) / (N (N - 1)) over the groups of t tied values.
	N := float64(m + n)
	all := append(slices.Clone(a), b...)
	slices.Sort(all)
	tieSum := 0.0
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j] == all[i] {
			j++
		}
		t := float64(j - i)
		tieSum += t*t*t - t
		i = j
	}
	mu := float64(m*n) / 2
	sigma := math.Sqrt(float64(m*n) / 12 * ((N + 1) - tieSum/(N*(N-1))))
	if sigma == 0 {
		return 1 // every value equal: no evidence of a difference
	}
	z := (math.Abs(u-mu) - 0.5) / sigma
	if z < 0 {
		z = 0
	}
	return math.Min(1, 2*distuv.UnitNormal.Survival(z))
}

// exactRankSumP is the exact two-sided p-value of the rank sum of a.
// Ranks are doubled midranks, so that ties keep integer sums: count[k][s]
// is the number of ways to choose k of the values seen so far with
// doubled rank sum s. The counts are float64: C(2*MaxExactN, MaxExactN)
// = 1.4e11 is exact in one.
func exactRankSumP(a, b []float64) float64 {
	m, N := len(a), len(a)+len(b)
	ranks := doubledMidranks(a, b)
	maxSum := 0
	for _, r := range ranks {
		maxSum += r
	}
	count := make([][]float64, m+1)
	for k := range count {
		count[k] = make([]float64, maxSum+1)
	}
	count[0][0] = 1
	for i, r := range ranks {
		for k := min(i+1, m); k >= 1; k-- {
			for s := maxSum; s >= r; s-- {
				count[k][s] += count[k-1][s-r]
			}
		}
	}
	observed := 0
	for i := range a {
		observed += ranks[i]
	}
	// The doubled rank sum's mean is m (N + 1).
	mean := m * (N + 1)
	dev := abs(observed - mean)
	var extreme, total float64
	for s, c := range count[m] {
		total += c
		if abs(s-mean) >= dev {
			extreme += c
		}
	}
	return math.Min(1, extreme/total)
}

// doubledMidranks returns twice the midrank (1-based) of every value of
// a then b in the combined sample.
func doubledMidranks(a, b []float64) []int {
	all := append(slices.Clone(a), b...)
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int { return cmp.Compare(all[i], all[j]) })
	ranks := make([]int, len(all))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && all[idx[j]] == all[idx[i]] {
			j++
		}
		// Positions i..j-1 (0-based) share the midrank (i+1 + j) / 2.
		for k := i; k < j; k++ {
			ranks[idx[k]] = i + 1 + j
		}
		i = j
	}
	return ranks
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// MinPossibleP is the smallest two-sided p-value the exact test can give
// for sizes m and n: 2 / C(m+n, m). With n1 = n2 = 2 it is 0.333, so no
// alpha below that can ever be reached.
func MinPossibleP(m, n int) float64 {
	if m == 0 || n == 0 {
		return 1
	}
	// log C(m+n, m) via lgamma keeps large sizes finite.
	lc, _ := math.Lgamma(float64(m + n + 1))
	la, _ := math.Lgamma(float64(m + 1))
	lb, _ := math.Lgamma(float64(n + 1))
	return math.Min(1, 2*math.Exp(-(lc-la-lb)))
}

// ShiftInterval is the Hodges-Lehmann (Moses) confidence interval of the
// shift between y and x: the order statistics d_(k) and d_(mn+1-k) of
// the m*n pairwise differences y_j - x_i, with k from the null
// distribution of U (exact for small samples, normal beyond), so that
// the interval excludes 0 essentially when the U test rejects. ok is
// false when the samples are too small for any finite interval at this
// confidence (the interval is then the whole line).
func ShiftInterval(x, y []float64, confidence float64) (lo, hi float64, ok bool) {
	m, n := len(x), len(y)
	if m == 0 || n == 0 {
		return math.NaN(), math.NaN(), false
	}
	d := make([]float64, 0, m*n)
	for _, xi := range x {
		for _, yj := range y {
			d = append(d, yj-xi)
		}
	}
	slices.Sort(d)
	tail := (1 - confidence) / 2
	var k int // the interval is [d_(k), d_(mn+1-k)], 1-based; k = 0: none
	if m <= MaxExactN && n <= MaxExactN {
		counts := uCounts(m, n)
		total := 0.0
		for _, c := range counts {
			total += c
		}
		// Largest k with P(U <= k-1) <= tail.
		cum := 0.0
		for i, c := range counts {
			cum += c
			if cum/total > tail {
				k = i
				break
			}
		}
	} else {
		mn := float64(m * n)
		z := distuv.UnitNormal.Quantile(1 - tail)
		k = int(math.Floor(mn/2 - z*math.Sqrt(mn*float64(m+n+1)/12)))
	}
	if k < 1 {
		return math.Inf(-1), math.Inf(1), false
	}
	return d[k-1], d[len(d)-k], true
}
