package mongo

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// oid returns a fixed ObjectID whose order follows n.
func oid(n byte) bson.ObjectID {
	var id bson.ObjectID
	id[11] = n
	return id
}

// cand is a candidate of lane 1 with ID n, due at T0+due seconds.
func cand(n byte, due int, handler, key string, seq int64) candidate {
	return candidate{ID: oid(n), LaneID: 1, Handler: handler, Key: key, Sequence: seq,
		DueAt: testNow.Add(time.Duration(due) * time.Second), MaxAttempts: 5}
}

func idsOf(cs []candidate) []byte {
	out := make([]byte, len(cs))
	for i, c := range cs {
		out[i] = c.ID[11]
	}
	return out
}

func TestClaimScanLimit(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int]int64{
		1:                    1*ClaimScanFactor + ClaimScanSlack,
		100:                  100*ClaimScanFactor + ClaimScanSlack,
		driver.MaxClaimLimit: MaxClaimScan,
	} {
		if got := claimScanLimit(limit); got != want {
			t.Errorf("claimScanLimit(%d) = %d, want %d", limit, got, want)
		}
	}
	if claimScanLimit(driver.MaxClaimLimit) < int64(driver.MaxClaimLimit) {
		t.Error("the scan bound is below the claim limit: a full claim could not be filled")
	}
}

func TestMergeCandidates(t *testing.T) {
	t.Parallel()
	a := []candidate{cand(1, 0, "h", "", 0), cand(3, 2, "h", "", 0)}
	b := []candidate{cand(2, 1, "h", "", 0), cand(4, 2, "h", "", 0)}
	head := cand(3, 2, "h", "", 0)
	head.lowest = true
	got := mergeCandidates(10, a, b, []candidate{head})
	if want := []byte{1, 2, 3, 4}; !reflect.DeepEqual(idsOf(got), want) {
		t.Fatalf("merge order %v, want %v (due time, then ID)", idsOf(got), want)
	}
	if !got[2].lowest {
		t.Error("a duplicate read as its key's lowest lost that mark")
	}
	if got := mergeCandidates(2, a, b); !reflect.DeepEqual(idsOf(got), []byte{1, 2}) {
		t.Errorf("merge with limit 2 = %v", idsOf(got))
	}
	// Same due time: ID order decides, across lists.
	c := []candidate{cand(9, 0, "h", "", 0)}
	d := []candidate{cand(8, 0, "h", "", 0)}
	if got := mergeCandidates(10, c, d); !reflect.DeepEqual(idsOf(got), []byte{8, 9}) {
		t.Errorf("tie on due time: %v, want ID order", idsOf(got))
	}
}

// The head of a key is its lowest sequence among the candidates, not the
// first in due order: a predecessor rescheduled past its followers must
// still be the one that runs first (otherwise the follower, blocked by
// it, would hide it and the key would never move).
func TestKeyHeads(t *testing.T) {
	t.Parallel()
	cands := []candidate{
		cand(1, 0, "h", "k", 5), // due first, but sequence 5
		cand(2, 1, "h", "k", 3), // the head: sequence 3, rescheduled later
		cand(3, 2, "h", "k", 7),
		cand(4, 0, "h", "", 0),   // unkeyed: no head
		cand(5, 0, "h2", "k", 1), // same key, other handler: its own order
	}
	heads, followers := keyHeads(cands)
	if heads[orderKey{"h", "k"}].ID != oid(2) || heads[orderKey{"h2", "k"}].ID != oid(5) || len(heads) != 2 {
		t.Fatalf("heads = %v", heads)
	}
	if followers[orderKey{"h", "k"}] != 2 || followers[orderKey{"h2", "k"}] != 0 {
		t.Fatalf("followers = %v", followers)
	}
	blocked := map[orderKey]bool{}
	got := eligibleCandidates(cands, heads, map[orderKey]bool{}, blocked)
	// 2 (the head of h/k, although 1 is due earlier), 4 (unkeyed), 5.
	if want := []byte{2, 4, 5}; !reflect.DeepEqual(idsOf(got), want) {
		t.Fatalf("eligible %v, want %v", idsOf(got), want)
	}
}

func TestPredecessorChecks(t *testing.T) {
	t.Parallel()
	lowest := cand(1, 0, "h", "a", 4)
	lowest.lowest = true
	heads := map[orderKey]candidate{
		{"h", "a"}: lowest,                  // read as the lowest: nothing can block it
		{"h", "b"}: cand(2, 0, "h", "b", 9), // in flight: blocked without a read
		{"h", "c"}: cand(3, 0, "h", "c", 2), // checked already
		{"h", "d"}: cand(4, 0, "h", "d", 6), // to read
		{"g", "d"}: cand(5, 0, "g", "d", 1), // to read
	}
	got := predecessorChecks(heads, map[orderKey]bool{{"h", "b"}: true}, map[orderKey]bool{{"h", "c"}: true})
	want := []keyHead{{"g", "d", 1}, {"h", "d", 6}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("checks = %v, want %v", got, want)
	}
}

func TestEligibleCandidates(t *testing.T) {
	t.Parallel()
	cands := []candidate{
		cand(1, 0, "h", "free", 1),
		cand(2, 0, "h", "blocked", 1),
		cand(3, 0, "h", "running", 1),
		cand(4, 0, "h", "", 0),
		cand(5, 1, "h", "free", 2),
	}
	heads, _ := keyHeads(cands)
	got := eligibleCandidates(cands, heads, map[orderKey]bool{{"h", "running"}: true}, map[orderKey]bool{{"h", "blocked"}: true})
	if want := []byte{1, 4}; !reflect.DeepEqual(idsOf(got), want) {
		t.Fatalf("eligible %v, want %v: one per key, none of a blocked or running key", idsOf(got), want)
	}
}

func TestChoosePicks(t *testing.T) {
	t.Parallel()
	room := map[int32]int{1: MaxInFlightPerLane, 2: 1}
	suspect := cand(9, 0, "h", "", 0)
	suspect.Suspect = true
	plain := []candidate{cand(1, 0, "h", "", 0), cand(2, 1, "h", "", 0), cand(3, 2, "h", "", 0)}

	if got := choosePicks(nil, 10, room, false); got != nil {
		t.Errorf("no candidates: %v", got)
	}
	if got := choosePicks(plain, 2, room, false); !reflect.DeepEqual(idsOf(got), []byte{1, 2}) {
		t.Errorf("limit 2: %v", idsOf(got))
	}
	// The oldest is a suspect: it runs alone.
	got := choosePicks(append([]candidate{suspect}, plain...), 10, room, false)
	if !reflect.DeepEqual(idsOf(got), []byte{9}) || !suspectFirst(append([]candidate{suspect}, plain...)) {
		t.Errorf("suspect first: %v, want it alone", idsOf(got))
	}
	// The oldest is a suspect and the caller is busy: nothing, so that it
	// drains (variant SUSPECT_BUSY).
	if got := choosePicks(append([]candidate{suspect}, plain...), 10, room, true); got != nil {
		t.Errorf("suspect first, busy caller: %v, want nothing", idsOf(got))
	}
	// A suspect that is not the oldest waits, busy or not.
	later := append(slices.Clone(plain), suspect)
	for _, busy := range []bool{false, true} {
		if got := choosePicks(later, 10, room, busy); !reflect.DeepEqual(idsOf(got), []byte{1, 2, 3}) || suspectFirst(later) {
			t.Errorf("suspect not first, busy %v: %v, want the others without it", busy, idsOf(got))
		}
	}
	// Per-lane room.
	l2 := []candidate{cand(1, 0, "h", "", 0), cand(2, 1, "h", "", 0), cand(3, 2, "h", "", 0)}
	l2[0].LaneID, l2[1].LaneID = 2, 2
	if got := choosePicks(l2, 10, room, false); !reflect.DeepEqual(idsOf(got), []byte{1, 3}) {
		t.Errorf("lane 2 has room for one: %v", idsOf(got))
	}
	full := suspect
	full.LaneID = 2
	if got := choosePicks([]candidate{full}, 10, map[int32]int{2: 0}, false); got != nil {
		t.Errorf("a suspect in a full lane: %v", idsOf(got))
	}
}

func TestRankLanes(t *testing.T) {
	t.Parallel()
	row := func(n byte, lane int32, due int) probeRow {
		return probeRow{ID: oid(n), LaneID: lane, DueAt: testNow.Add(time.Duration(due) * time.Second)}
	}
	rows := []probeRow{row(1, 7, 3), row(2, 5, 1), row(3, 5, 0), row(4, 9, 2), row(5, 8, 0)}
	if got := rankLanes(rows, 2, nil); !reflect.DeepEqual(got, []int32{5, 8}) {
		t.Errorf("rank 2 = %v, want lanes of the two oldest deliveries", got)
	}
	if got := rankLanes(rows, 10, map[int32]bool{5: true}); !reflect.DeepEqual(got, []int32{8, 9, 7}) {
		t.Errorf("rank without lane 5 = %v", got)
	}
	if got := rankLanes(nil, 4, nil); got != nil {
		t.Errorf("no rows: %v", got)
	}
}

func TestChunkLanesAndProbeRows(t *testing.T) {
	t.Parallel()
	all := make([]int32, driver.LaneCount)
	for i := range all {
		all[i] = int32(i)
	}
	chunks := chunkLanes(all)
	if len(chunks) != 2 || len(chunks[0]) != MaxLanesPerSortedQuery || len(chunks[1]) != driver.LaneCount-MaxLanesPerSortedQuery {
		t.Fatalf("chunks of 256 lanes: %d", len(chunks))
	}
	if MaxLanesPerSortedQuery > 200 {
		t.Fatal("MaxLanesPerSortedQuery is above the 200 values MongoDB still treats as equality for a sort")
	}
	if chunkLanes(nil) != nil || len(chunkLanes([]int32{1})) != 1 {
		t.Fatal("small inputs")
	}
	if probeRows(4) != 48 || probeRows(1000) != MaxProbeRows {
		t.Fatalf("probeRows(4) = %d, probeRows(1000) = %d", probeRows(4), probeRows(1000))
	}
	rounds := 0
	for step, total := LaneTakeFirst, 0; total < driver.LaneCount; step *= 2 {
		total += step
		rounds++
	}
	if rounds > MaxLaneTakeRounds {
		t.Fatalf("%d doubling rounds are needed to reach every lane, MaxLaneTakeRounds is %d", rounds, MaxLaneTakeRounds)
	}
}

// updateOf returns the filter and update of an updateOne model.
func updateOf(t *testing.T, m mongo.WriteModel) (filter, update string) {
	t.Helper()
	u, ok := m.(*mongo.UpdateOneModel)
	if !ok {
		t.Fatalf("model %T is not an updateOne", m)
	}
	if u.Upsert != nil && *u.Upsert {
		t.Fatal("a claim's lane write must never upsert")
	}
	return extJSON(t, u.Filter), extJSON(t, u.Update)
}

func TestLaneWrites(t *testing.T) {
	t.Parallel()
	exp := testNow.Add(time.Minute)
	lanes := []*claimLane{
		{id: 1, epoch: 4, usable: true, inFlight: []bson.ObjectID{oid(10), oid(11)}, gone: []bson.ObjectID{oid(10)}}, // a pick, a gone id
		{id: 2, epoch: 1, usable: true, inFlight: []bson.ObjectID{oid(20)}},                                          // unchanged: no write
		{id: 3, epoch: 7, usable: true, inFlight: []bson.ObjectID{oid(30)}, gone: []bson.ObjectID{oid(30)}},          // drained: hand back
		{id: 4, epoch: 2, usable: true, taken: true},                                                                 // taken, nothing picked: hand back
		{id: 5, epoch: 2, usable: true, lost: []bson.ObjectID{oid(50)}},                                              // lost not charged: keep
		{id: 6, epoch: 3, usable: false, inFlight: []bson.ObjectID{oid(60)}, gone: []bson.ObjectID{oid(60)}},         // taken over meanwhile
		{id: 7, epoch: 1, usable: true, inFlight: []bson.ObjectID{oid(70)}, drained: []parkedKey{{"h", "k"}}},        // a drained key
	}
	picks := []candidate{cand(12, 0, "h", "", 0)}
	ws := laneWrites(lanes, picks, "o", "hid", exp)
	got := map[int32]laneWrite{}
	for _, w := range ws {
		got[w.lane] = w
	}
	if len(ws) != 4 || got[2].model != nil || got[5].model != nil || got[6].model != nil {
		t.Fatalf("writes for lanes %v, want 1, 3, 4 and 7", ws)
	}
	if w := got[1]; w.handBack || !reflect.DeepEqual(w.picks, []bson.ObjectID{oid(12)}) {
		t.Errorf("lane 1: %+v", w)
	}
	f, u := updateOf(t, got[1].model)
	if f != extJSON(t, recordLaneFilter(1, 4, "o", "hid")) || u != extJSON(t, recordLanePipeline([]bson.ObjectID{oid(10)}, []bson.ObjectID{oid(12)}, nil, exp)) {
		t.Errorf("lane 1 write:\n%s\n%s", f, u)
	}
	for _, lane := range []int32{3, 4} {
		w := got[lane]
		if !w.handBack {
			t.Errorf("lane %d is not handed back", lane)
		}
		f, u := updateOf(t, w.model)
		var gone []bson.ObjectID
		if lane == 3 {
			gone = []bson.ObjectID{oid(30)}
		}
		if f != extJSON(t, handBackFilter(lane, w.epoch, "o", "hid", gone)) || u != extJSON(t, handBackPipeline(nil)) {
			t.Errorf("lane %d hand back:\n%s\n%s", lane, f, u)
		}
	}
	if w := got[7]; w.handBack || len(w.picks) != 0 {
		t.Errorf("lane 7: %+v", w)
	}
	if _, u := updateOf(t, got[7].model); u != extJSON(t, recordLanePipeline(nil, nil, []parkedKey{{"h", "k"}}, exp)) {
		t.Errorf("lane 7 does not drop its drained key: %s", u)
	}
}

func TestParkRequests(t *testing.T) {
	t.Parallel()
	lanes := map[int32]*claimLane{
		1: {id: 1, epoch: 4, usable: true},
		2: {id: 2, epoch: 1, usable: true, parked: make([]parkedKey, MaxParkedKeysPerLane)},
		3: {id: 3, epoch: 1, usable: false},
	}
	head := func(lane int32, h, k string, seq int64) candidate {
		c := cand(1, 0, h, k, seq)
		c.LaneID = lane
		return c
	}
	heads := map[orderKey]candidate{
		{"h", "big"}:    head(1, "h", "big", 10),
		{"h", "bigger"}: head(1, "h", "bigger", 3),
		{"h", "small"}:  head(1, "h", "small", 1),
		{"h", "full"}:   head(2, "h", "full", 1),
		{"h", "gone"}:   head(3, "h", "gone", 1),
	}
	followers := map[orderKey]int{
		{"h", "big"}: ParkBacklogMin, {"h", "bigger"}: ParkBacklogMin + 5, {"h", "small"}: ParkBacklogMin - 1,
		{"h", "full"}: 100, {"h", "gone"}: 100,
	}
	got := parkRequests(lanes, heads, followers)
	want := []parkRequest{
		{lane: 1, epoch: 4, key: parkedKey{"h", "bigger"}, afterSeq: 3},
		{lane: 1, epoch: 4, key: parkedKey{"h", "big"}, afterSeq: 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("park requests %+v, want %+v", got, want)
	}
	// A key already listed in a full lane may still park more.
	lanes[2].parked[0] = parkedKey{"h", "full"}
	if got := parkRequests(lanes, heads, followers); len(got) != 3 || got[0].key.Key != "full" {
		t.Fatalf("listed key of a full lane: %+v", got)
	}
	// At most MaxParksPerClaim.
	many := map[orderKey]int{}
	manyHeads := map[orderKey]candidate{}
	for i := range MaxParksPerClaim + 3 {
		k := orderKey{"h", string(rune('a' + i))}
		many[k] = ParkBacklogMin
		manyHeads[k] = head(1, "h", k.key, 1)
	}
	if got := parkRequests(lanes, manyHeads, many); len(got) != MaxParksPerClaim {
		t.Fatalf("%d park requests, want at most %d", len(got), MaxParksPerClaim)
	}
}

func TestTakenLanes(t *testing.T) {
	t.Parallel()
	o, other := "o", "p"
	want := []laneEpoch{{1, 4}, {2, 0}, {3, 9}}
	docs := []laneDoc{
		{ID: 1, Epoch: 5, Owner: &o},      // ours: read 4, now 5
		{ID: 2, Epoch: 2, Owner: &o},      // raised twice: someone else took it between
		{ID: 3, Epoch: 10, Owner: &other}, // another owner name
		{ID: 4, Epoch: 1, Owner: &o},      // not asked for
	}
	got := takenLanes(want, docs, "o")
	if len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("taken = %+v, want lane 1 only", got)
	}
}

func TestRecordedLanes(t *testing.T) {
	t.Parallel()
	o, h, x := "o", "hid", "other"
	writes := []laneWrite{
		{lane: 1, epoch: 4, picks: []bson.ObjectID{oid(1), oid(2)}},
		{lane: 2, epoch: 1, picks: []bson.ObjectID{oid(3)}},
		{lane: 3, epoch: 2, picks: []bson.ObjectID{oid(4)}},
		{lane: 4, epoch: 2, picks: []bson.ObjectID{oid(5)}},
		{lane: 5, epoch: 2, handBack: true},
	}
	docs := []laneDoc{
		{ID: 1, Epoch: 4, Owner: &o, Holder: &h, InFlight: []bson.ObjectID{oid(1), oid(2)}}, // recorded
		{ID: 2, Epoch: 2, Owner: &o, Holder: &x, InFlight: []bson.ObjectID{oid(3)}},         // taken over
		{ID: 3, Epoch: 2, Owner: &o, Holder: &h, InFlight: nil},                             // handed back by us? not listed
		// lane 4 not read
	}
	got := recordedLanes(writes, docs, "o", "hid")
	if !got[1] || got[2] || got[3] || got[4] || got[5] {
		t.Fatalf("recorded = %v, want lane 1 only", got)
	}
}
