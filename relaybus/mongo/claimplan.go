package mongo

import (
	"bytes"
	"cmp"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The claim's decisions, as pure functions of what it read: which
// candidates may run (the per-key rules and the suspect rule), which
// lanes to take, what to write to each lane, which backlogs to park.
// claim.go does the reads and writes around them; claimplan_test.go
// tests them step by step without a server.

// Limits of a claim.
const (
	// ClaimScanFactor: a claim of Limit deliveries reads up to
	// Limit*ClaimScanFactor + ClaimScanSlack candidates per read. Keyed
	// candidates behind a blocked head are skipped, so a claim reads more
	// than it takes.
	ClaimScanFactor = 4
	// ClaimScanSlack is added to every scan, so that small claims can
	// pass over a run of blocked keyed deliveries.
	ClaimScanSlack = 100
	// MaxClaimScan bounds the candidates of one read whatever the limit.
	MaxClaimScan = 20_000

	// LaneTakeFirst is how many free lanes a claim takes in its first
	// round when the lanes it holds do not fill its limit; each further
	// round takes twice as many (4, 8, 16, ...), so a dispatcher holds
	// only about as many lanes as its batches need.
	LaneTakeFirst = 4
	// MaxLaneTakeRounds bounds the rounds of one claim: 4+8+...+512 is
	// more than the 256 lanes there are.
	MaxLaneTakeRounds = 8
	// MaxProbeRows bounds the due deliveries one probe of free lanes
	// reads to rank them.
	MaxProbeRows = 1024

	// MaxLanesPerSortedQuery bounds the lanes of one candidate read or
	// probe. With at most this many values in the laneId $in (and an
	// equality on queue), MongoDB reads the claim index as one sorted
	// scan per lane merged in (dueAt, _id) order, and the limit stops it
	// early; past 200 values it would read every due entry of those lanes
	// and sort them (the ESR rule's bound on $in). Reads of more lanes
	// are split and merged here.
	MaxLanesPerSortedQuery = 128
	// MaxPredecessorClauses bounds the $or branches of one predecessor
	// aggregation (each branch is planned separately by the server).
	MaxPredecessorClauses = 100

	// MaxInFlightPerLane bounds a lane's inFlight list, and with it the
	// lane document (about 17 bytes of BSON per ObjectID element: 20,000
	// ids are about 340 KB, far below the 16 MiB document limit).
	MaxInFlightPerLane = 20_000

	// ParkBacklogMin: a key whose head cannot run now (blocked, in flight,
	// or just picked) and that has at least this many more due
	// deliveries in one candidate read has that backlog parked out of
	// the claim index (park.go).
	ParkBacklogMin = 32
	// MaxParkedKeysPerLane bounds a lane's parkedKeys list, and with it
	// the reads of parked heads per held lane and claim.
	MaxParkedKeysPerLane = 16
	// MaxParksPerClaim bounds the parking transactions one claim runs.
	MaxParksPerClaim = 4
)

// claimScanLimit is the number of candidates a claim of limit reads.
func claimScanLimit(limit int) int64 {
	return int64(min(limit*ClaimScanFactor+ClaimScanSlack, MaxClaimScan))
}

// candidate is the projection of a delivery the claim decides on.
type candidate struct {
	ID          bson.ObjectID `bson:"_id"`
	LaneID      int32         `bson:"laneId"`
	Handler     string        `bson:"handler"`
	Key         string        `bson:"key"`
	Sequence    int64         `bson:"sequence"`
	DueAt       time.Time     `bson:"dueAt"`
	Attempts    int64         `bson:"attempts"`
	MaxAttempts int64         `bson:"maxAttempts"`
	Claims      int64         `bson:"claims"`
	Suspect     bool          `bson:"suspect"`

	// lowest: read as its key's lowest pending sequence (keyHeadFilter),
	// so no predecessor can block it and it needs no predecessor read.
	lowest bool
}

// orderKey names one ordering lane: a handler and a key.
type orderKey struct{ handler, key string }

func (c *candidate) orderKey() orderKey { return orderKey{c.Handler, c.Key} }

// before is the claim order: due time, then ID.
func (c *candidate) before(o *candidate) bool {
	if !c.DueAt.Equal(o.DueAt) {
		return c.DueAt.Before(o.DueAt)
	}
	return bytes.Compare(c.ID[:], o.ID[:]) < 0
}

func compareCandidates(a, b candidate) int {
	if a.before(&b) {
		return -1
	}
	if b.before(&a) {
		return 1
	}
	return 0
}

// mergeCandidates merges candidate lists (each from one read) into one,
// in claim order, without duplicates (a key's head may come from the
// candidate read and from the parked-head read), at most limit long.
func mergeCandidates(limit int64, lists ...[]candidate) []candidate {
	var out []candidate
	seen := map[bson.ObjectID]int{}
	for _, l := range lists {
		for _, c := range l {
			if i, dup := seen[c.ID]; dup {
				out[i].lowest = out[i].lowest || c.lowest
				continue
			}
			seen[c.ID] = len(out)
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, compareCandidates)
	if int64(len(out)) > limit {
		out = out[:limit]
	}
	return out
}

// keyHeads groups keyed candidates by (handler, key): the head of a key
// is its candidate with the lowest sequence, whatever its due time (a
// lower sequence that was rescheduled to a later time is still the one
// that must run first), and followers counts the key's other
// candidates.
func keyHeads(cands []candidate) (heads map[orderKey]candidate, followers map[orderKey]int) {
	heads = map[orderKey]candidate{}
	followers = map[orderKey]int{}
	for _, c := range cands {
		if c.Key == "" {
			continue
		}
		k := c.orderKey()
		h, ok := heads[k]
		switch {
		case !ok:
			heads[k] = c
		case c.Sequence < h.Sequence:
			heads[k] = c
			followers[k]++
		default:
			followers[k]++
		}
	}
	return heads, followers
}

// predecessorChecks lists the heads whose predecessors must be read:
// not read as the lowest of their key, not blocked by a delivery of
// their key in flight, not checked already in this claim.
func predecessorChecks(heads map[orderKey]candidate, inFlightKeys map[orderKey]bool, checked map[orderKey]bool) []keyHead {
	var out []keyHead
	for k, h := range heads {
		if h.lowest || inFlightKeys[k] || checked[k] {
			continue
		}
		out = append(out, keyHead{handler: k.handler, key: k.key, seq: h.Sequence})
	}
	slices.SortFunc(out, func(a, b keyHead) int {
		return cmp.Or(cmp.Compare(a.handler, b.handler), cmp.Compare(a.key, b.key))
	})
	return out
}

// eligibleCandidates returns, in claim order, the candidates that may run
// now: every unkeyed one, and of each key only its head, when no
// delivery of the key is in flight and no lower sequence of it is
// pending (blocked). A dead predecessor is not pending and does not
// block.
func eligibleCandidates(cands []candidate, heads map[orderKey]candidate, inFlightKeys, blocked map[orderKey]bool) []candidate {
	var out []candidate
	for _, c := range cands {
		if c.Key != "" {
			k := c.orderKey()
			if heads[k].ID != c.ID || inFlightKeys[k] || blocked[k] {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// choosePicks applies the limit and the suspect rule to the eligible
// candidates (in claim order): when the oldest is a suspect (it was in
// flight when its lane was taken over, and may be what crashed its
// process), it is returned alone, or nothing at all to a busy caller
// (one with deliveries in flight: it must drain first, or another
// delivery's crash charges the suspect; variant SUSPECT_BUSY); otherwise
// suspects wait and the rest are taken up to limit. room bounds the picks
// per lane (MaxInFlightPerLane minus what each lane has in flight).
func choosePicks(eligible []candidate, limit int, room map[int32]int, busy bool) []candidate {
	if len(eligible) == 0 {
		return nil
	}
	if eligible[0].Suspect {
		if busy || room[eligible[0].LaneID] < 1 {
			return nil
		}
		return eligible[:1]
	}
	var out []candidate
	used := map[int32]int{}
	for _, c := range eligible {
		if len(out) == limit {
			break
		}
		if c.Suspect || used[c.LaneID] >= room[c.LaneID] {
			continue
		}
		used[c.LaneID]++
		out = append(out, c)
	}
	return out
}

// suspectFirst reports that the oldest eligible candidate is a suspect:
// the claim returns it alone (nothing, to a busy caller) and takes no
// more lanes.
func suspectFirst(eligible []candidate) bool { return len(eligible) > 0 && eligible[0].Suspect }

// rankLanes orders the lanes of probe rows (in claim order) by their
// oldest due delivery and returns at most n of them, skipping skip.
func rankLanes(rows []probeRow, n int, skip map[int32]bool) []int32 {
	slices.SortStableFunc(rows, func(a, b probeRow) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	var out []int32
	seen := map[int32]bool{}
	for _, r := range rows {
		if len(out) == n {
			break
		}
		if skip[r.LaneID] || seen[r.LaneID] {
			continue
		}
		seen[r.LaneID] = true
		out = append(out, r.LaneID)
	}
	return out
}

// probeRow is one row of a probe: a due delivery of a free lane.
type probeRow struct {
	ID     bson.ObjectID `bson:"_id"`
	LaneID int32         `bson:"laneId"`
	DueAt  time.Time     `bson:"dueAt"`
}

// probeRows is how many rows a probe for n lanes reads: a lane with an
// old backlog fills many rows, so read well past n.
func probeRows(n int) int64 { return int64(min(4*n+32, MaxProbeRows)) }

// chunkLanes splits lanes into runs of at most MaxLanesPerSortedQuery.
func chunkLanes(lanes []int32) [][]int32 {
	var out [][]int32
	for len(lanes) > MaxLanesPerSortedQuery {
		out = append(out, lanes[:MaxLanesPerSortedQuery])
		lanes = lanes[MaxLanesPerSortedQuery:]
	}
	if len(lanes) > 0 {
		out = append(out, lanes)
	}
	return out
}

// claimLane is one lane a claim works with.
type claimLane struct {
	id    int32
	epoch int64
	// taken: by this claim (a free or expired lane); otherwise held
	// before it.
	taken bool
	// inFlight and lost as the claim read them.
	inFlight []bson.ObjectID
	lost     []bson.ObjectID
	parked   []parkedKey
	// usable: its lost ids are charged, so its candidates may be claimed.
	usable bool
	// gone: ids of inFlight that no longer exist as pending deliveries
	// (completed, so deleted).
	gone []bson.ObjectID
	// drained: parked keys that have no pending delivery left.
	drained []parkedKey
}

// exclude is what a candidate read of the lane must leave out: what is
// in flight or lost there.
func (l *claimLane) exclude() []bson.ObjectID {
	return append(slices.Clone(l.inFlight), l.lost...)
}

// remaining is how many of the lane's inFlight ids are still in flight.
func (l *claimLane) remaining() int { return len(l.inFlight) - len(l.gone) }

// laneWrite is the write a claim makes to one lane, and what a matched
// write means.
type laneWrite struct {
	lane     int32
	epoch    int64
	picks    []bson.ObjectID
	handBack bool
	model    mongo.WriteModel
}

// laneWrites plans the claim's one write per lane that changes:
//
//   - a lane with picks, gone ids or drained keys gets recordLanePipeline;
//   - a lane that ends with nothing in flight, nothing picked and
//     nothing lost is handed back (handBackPipeline), so a dispatcher
//     holds only the lanes it needs and other dispatchers can take the
//     rest;
//   - any other lane is not written: its lease is renewed by LeaseExtend,
//     and an unchanged lane costs no write;
//   - a lane that is not usable (taken over during the claim) is not
//     written.
//
// Each write is conditional on (owner, holder) and the epoch the claim
// read (recordLaneFilter), so a lane taken over meanwhile is not touched.
func laneWrites(lanes []*claimLane, picks []candidate, owner, holder string, expiresAt time.Time) []laneWrite {
	byLane := map[int32][]bson.ObjectID{}
	for _, p := range picks {
		byLane[p.LaneID] = append(byLane[p.LaneID], p.ID)
	}
	var out []laneWrite
	for _, l := range lanes {
		if !l.usable {
			// Its lost ids could not be charged because it was taken
			// over meanwhile: nothing of it is ours to write.
			continue
		}
		picked := byLane[l.id]
		w := laneWrite{lane: l.id, epoch: l.epoch, picks: picked}
		switch {
		case len(picked) == 0 && l.remaining() == 0 && len(l.lost) == 0:
			w.handBack = true
			w.model = mongo.NewUpdateOneModel().
				SetFilter(handBackFilter(l.id, l.epoch, owner, holder, l.gone)).
				SetUpdate(handBackPipeline(l.drained))
		case len(picked) > 0 || len(l.gone) > 0 || len(l.drained) > 0:
			w.model = mongo.NewUpdateOneModel().
				SetFilter(recordLaneFilter(l.id, l.epoch, owner, holder)).
				SetUpdate(recordLanePipeline(l.gone, picked, l.drained, expiresAt))
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

// parkRequest asks to park one key's backlog in one lane.
type parkRequest struct {
	lane     int32
	epoch    int64
	key      parkedKey
	afterSeq int64
}

// parkRequests chooses the backlogs to park after a claim: keys of usable
// lanes with at least ParkBacklogMin due followers behind a head that
// cannot run now (blocked, in flight, or just picked: either way the
// followers wait for it), largest backlogs first, at most
// MaxParksPerClaim. A lane whose parkedKeys is full parks nothing more
// (the lane write would not match; filtered here to save the round
// trip), unless the key is listed already.
func parkRequests(lanes map[int32]*claimLane, heads map[orderKey]candidate, followers map[orderKey]int) []parkRequest {
	var out []parkRequest
	for k, n := range followers {
		if n < ParkBacklogMin {
			continue
		}
		h := heads[k]
		l := lanes[h.LaneID]
		if l == nil || !l.usable {
			continue
		}
		key := parkedKey{Handler: k.handler, Key: k.key}
		if len(l.parked) >= MaxParkedKeysPerLane && !slices.Contains(l.parked, key) {
			continue
		}
		out = append(out, parkRequest{lane: l.id, epoch: l.epoch, key: key, afterSeq: h.Sequence})
	}
	slices.SortFunc(out, func(a, b parkRequest) int {
		ka, kb := orderKey{a.key.Handler, a.key.Key}, orderKey{b.key.Handler, b.key.Key}
		return cmp.Or(cmp.Compare(followers[kb], followers[ka]), cmp.Compare(ka.handler, kb.handler), cmp.Compare(ka.key, kb.key))
	})
	if len(out) > MaxParksPerClaim {
		out = out[:MaxParksPerClaim]
	}
	return out
}
