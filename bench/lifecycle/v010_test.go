package lifecycle

import (
	"context"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/build"
	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/refs"
	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestV010LeavesBehind pins what one delivery of the v0.1.0 release leaves
// in PostgreSQL, as its own worker runs it: three versions of the delivery
// row chained by updates that are not HOT (two of them dead), and 16
// entries in 8 of its 9 indexes: 6 at publish (due, due unkeyed, status,
// handler, primary key, unique), 5 at claim (processing instead of the two
// due indexes, which hold pending rows only) and 5 at completion
// (completed, status, handler, primary key, unique). A check made outside
// this harness, on the seed's 0.1.0 whose due index also holds processing
// rows, counted 17 (6 at claim).
func TestV010LeavesBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the v0.1.0 release in a git worktree and runs its worker: not -short")
	}
	ctx := context.Background()
	const repo = "../.."
	ref, err := refs.Resolve(ctx, repo, "v0.1.0")
	if err != nil {
		t.Skipf("needs the v0.1.0 release commit in this clone's history: %v", err)
	}
	cache, err := build.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := (&build.Builder{RepoDir: repo, CacheDir: cache, Logf: t.Logf}).Build(ctx, "v0.1.0", ref, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hello, err := proc.Handshake(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if hello.Version != "0.1.0" {
		t.Fatalf("%s is relaybus %s, want 0.1.0", ref, hello.Version)
	}
	dsn := dbtest.TestDatabase(t)
	r, err := Run(ctx, Config{Ref: "v0.1.0", SHA: ref.SHA, Version: hello.Version, Bin: bin, DSN: dsn, Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", Text([]*Report{r}))
	s := r.Summary
	if !r.ClaimApart {
		t.Fatal("the claim and the completion were not told apart")
	}
	if s.HeapTuples != 3 || s.Dead != 2 {
		t.Errorf("heap: %d tuples, %d dead; want 3, 2 dead", s.HeapTuples, s.Dead)
	}
	if s.Indexes != 9 || s.IndexesWithEntries != 8 || s.IndexEntries != 16 {
		t.Errorf("indexes: %d, %d with entries, %d entries; want 9, 8, 16", s.Indexes, s.IndexesWithEntries, s.IndexEntries)
	}
	if s.EntriesBy[StepPublish] != 6 || s.EntriesBy[StepClaim] != 5 || s.EntriesBy[StepComplete] != 5 || len(s.EntriesBy) != 3 {
		t.Errorf("entries by step %v: want 6 at publish, 5 at claim, 5 at complete", s.EntriesBy)
	}
	var steps, chain []string
	for _, v := range r.Deliveries {
		steps = append(steps, v.Step)
		chain = append(chain, v.TID+"->"+v.Ctid)
		if strings.Contains(v.Flags, "HOT_UPDATED") || strings.Contains(v.Flags, "HEAP_ONLY") {
			t.Errorf("version %s is %s: v0.1.0 never updates a delivery HOT", v.TID, v.Flags)
		}
	}
	if got := strings.Join(steps, " "); got != "publish claim complete" {
		t.Errorf("versions made at %s, want publish claim complete", got)
	}
	if got := strings.Join(chain, " "); got != "(0,1)->(0,2) (0,2)->(0,3) (0,3)->(0,3)" {
		t.Errorf("t_ctid chain %s", got)
	}
	if r.HasLanes || len(r.Lanes) != 0 {
		t.Errorf("v0.1.0 has no lanes table: %+v", r.Lanes)
	}
	for _, c := range r.Counters {
		if c.Table == TableDeliveries && (c.Inserted != 1 || c.Updated != 2 || c.HotUpdated != 0 || c.Deleted != 0) {
			t.Errorf("counters %+v: want 1 inserted, 2 updated, 0 HOT, 0 deleted", c)
		}
	}
}
