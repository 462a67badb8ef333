package runner

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// Scenario 6's republish: events the base completed for sure, published
// again by the candidate, to check that the upgrade kept the guard that
// stops a completed event from being delivered twice.

// republish publishes again, with the candidate's publisher, events whose
// deliveries the base completed for sure: every handler handled them ok
// in a base dispatcher that stopped gracefully (so their completions were
// committed), and the killed one never touched them: u.Republish of them,
// shared between the kinds. It returns the number republished.
func (up *upgradeRun) republish(ctx context.Context) (int, error) {
	kinds := up.kinds()
	if up.u.Republish == 0 || len(kinds) == 0 {
		return 0, nil
	}
	done, err := up.completedByBase()
	if err != nil {
		return 0, err
	}
	total := 0
	for i, k := range kinds {
		want := up.u.Republish / len(kinds)
		if i == 0 {
			want += up.u.Republish % len(kinds)
		}
		// Protocol 1 publishes arithmetic progressions of indexes: as
		// many as it takes (up to maxProgressions) to reach want.
		left := maps.Clone(done[k.workload.IDPrefix])
		for j := 0; want > 0 && j < maxProgressions; j++ {
			start, stride, n := progression(left, want)
			if n == 0 {
				break
			}
			for i := range n {
				delete(left, start+int64(i)*stride)
			}
			want -= n
			cfg := up.cand.config(protocol.RolePreload, fmt.Sprintf("c-republish-%s-%d", k.name, j), 4)
			cfg.RecordPath = filepath.Join(up.dir, republishDir, cfg.Name+republishExt)
			cfg.Workload = k.workload
			cfg.Publisher = protocol.Publisher{Publishers: 1, Batch: 10, Events: n, StartIndex: start, Stride: stride}
			if _, err := up.cand.runOnce(ctx, cfg); err != nil {
				return total, fmt.Errorf("candidate republish: %w", err)
			}
			f, err := record.ReadFile(cfg.RecordPath)
			if err != nil {
				return total, fmt.Errorf("runner: %w", err)
			}
			for _, p := range f.Published {
				idx, ok := indexOf(p.EventID, k.workload.IDPrefix)
				if !ok || !done[k.workload.IDPrefix][idx] {
					return total, fmt.Errorf("runner: the republish published %s, which the base did not complete", p.EventID)
				}
			}
			total += len(f.Published)
		}
	}
	return total, nil
}

// completedByBase maps each id prefix to the indexes of the events whose
// every handler was handled ok by a base dispatcher that was not killed,
// and by no killed one.
func (up *upgradeRun) completedByBase() (map[string]map[int64]bool, error) {
	okBy := map[string]map[string]bool{} // event -> handlers handled ok
	touched := map[string]bool{}         // events the killed one handled
	for _, p := range up.base.disps {
		f, err := record.ReadFile(filepath.Join(up.dir, p.Name()+validate.RecordFileExt))
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		for _, h := range f.Handled {
			if p.Name() == upgradeVictim {
				touched[h.EventID] = true
				continue
			}
			if h.OK {
				if okBy[h.EventID] == nil {
					okBy[h.EventID] = map[string]bool{}
				}
				okBy[h.EventID][h.Handler] = true
			}
		}
	}
	out := map[string]map[int64]bool{}
	for _, k := range up.kinds() {
		set := map[int64]bool{}
		for id, hs := range okBy {
			idx, ok := indexOf(id, k.workload.IDPrefix)
			if ok && len(hs) == len(up.u.Workload.Handlers) && !touched[id] {
				set[idx] = true
			}
		}
		out[k.workload.IDPrefix] = set
	}
	return out, nil
}

func indexOf(id, prefix string) (int64, bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return 0, false
	}
	idx, err := strconv.ParseInt(rest, 10, 64)
	return idx, err == nil && idx >= 0
}

// progression finds the longest run start, start+stride, ... (stride
// 1..maxStride, at most want long) of indexes in set, the smallest start
// and stride first among equals; n is 0 when set is empty.
func progression(set map[int64]bool, want int) (start, stride int64, n int) {
	if want <= 0 || len(set) == 0 {
		return 0, 0, 0
	}
	idx := make([]int64, 0, len(set))
	for i := range set {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for st := int64(1); st <= maxStride; st++ {
		for _, s0 := range idx {
			k := 0
			for k < want && set[s0+int64(k)*st] {
				k++
			}
			if k > n {
				start, stride, n = s0, st, k
				if n == want {
					return start, stride, n
				}
			}
		}
	}
	return start, stride, n
}
