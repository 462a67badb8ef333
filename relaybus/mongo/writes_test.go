package mongo

import (
	"reflect"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// A lease's fence, one condition at a time: each one that fails makes
// the lease not current.
func TestFenceHolds(t *testing.T) {
	t.Parallel()
	ref := leaseRef{id: testID1, tok: driver.LaneToken{Lane: 7, Epoch: 3, Claims: 2}}
	lane := func() *laneDoc { return &laneDoc{ID: 7, Epoch: 3, InFlight: []bson.ObjectID{testID2, testID1}} }
	doc := func() *deliveryDoc {
		return &deliveryDoc{ID: testID1, Status: statusPending, LaneID: 7, Claims: 2}
	}
	if !fenceHolds(ref, lane(), doc()) {
		t.Fatal("a current lease does not hold")
	}
	tests := map[string]func(l *laneDoc, d *deliveryDoc) *deliveryDoc{
		"lane taken over (epoch raised)":        func(l *laneDoc, d *deliveryDoc) *deliveryDoc { l.Epoch = 4; return d },
		"not in flight (released, handed back)": func(l *laneDoc, d *deliveryDoc) *deliveryDoc { l.InFlight = nil; return d },
		"delivery gone (completed)":             func(*laneDoc, *deliveryDoc) *deliveryDoc { return nil },
		"claim ended (charged, rescheduled)":    func(_ *laneDoc, d *deliveryDoc) *deliveryDoc { d.Claims = 3; return d },
		"dead":                                  func(_ *laneDoc, d *deliveryDoc) *deliveryDoc { d.Status = statusDead; return d },
		"another lane's delivery":               func(_ *laneDoc, d *deliveryDoc) *deliveryDoc { d.LaneID = 8; return d },
	}
	for name, spoil := range tests {
		l := lane()
		d := spoil(l, doc())
		if fenceHolds(ref, l, d) {
			t.Errorf("%s: the fence holds", name)
		}
	}
}

func TestCompleteFences(t *testing.T) {
	t.Parallel()
	tok := driver.LaneToken{Lane: 7, Epoch: 3, Claims: 0}
	refs := []leaseRef{
		{id: oid(1), tok: tok},
		{id: oid(2), tok: tok}, // stale: claims moved
		{id: oid(1), tok: tok}, // the first lease again
		{id: oid(3), tok: driver.LaneToken{Lane: 8, Epoch: 1, Claims: 0}}, // lane 8 not read (no such lane)
		{id: oid(4), tok: tok}, // unusable (foreign id in the call)
		{id: oid(5), tok: tok},
	}
	usable := []bool{true, true, true, true, false, true}
	lanes := map[int32]laneDoc{7: {ID: 7, Epoch: 3, InFlight: []bson.ObjectID{oid(1), oid(2), oid(4), oid(5)}}}
	docs := map[bson.ObjectID]*deliveryDoc{
		oid(1): {ID: oid(1), Status: statusPending, LaneID: 7},
		oid(2): {ID: oid(2), Status: statusPending, LaneID: 7, Claims: 1},
		oid(4): {ID: oid(4), Status: statusPending, LaneID: 7},
		oid(5): {ID: oid(5), Status: statusPending, LaneID: 7},
	}
	ok, del := completeFences(refs, usable, lanes, docs)
	if want := []bool{true, false, false, false, false, true}; !reflect.DeepEqual(ok, want) {
		t.Errorf("results %v, want %v (a lease named twice completes once)", ok, want)
	}
	if want := []bson.ObjectID{oid(1), oid(5)}; !reflect.DeepEqual(del, want) {
		t.Errorf("deletes %v, want %v", del, want)
	}
}

func TestLeaseRenewed(t *testing.T) {
	t.Parallel()
	ref := leaseRef{id: testID1, tok: driver.LaneToken{Lane: 7, Epoch: 3}}
	exp := testNow.Add(time.Minute)
	o, h := "o", "hid"
	good := func() *laneDoc {
		e := exp
		return &laneDoc{ID: 7, Epoch: 3, Owner: &o, Holder: &h, LeaseExpiresAt: &e, InFlight: []bson.ObjectID{testID1}}
	}
	if !leaseRenewed(ref, good(), "o", "hid", exp) {
		t.Fatal("a renewed lease is not reported")
	}
	later := exp.Add(time.Hour)
	l := good()
	l.LeaseExpiresAt = &later
	if !leaseRenewed(ref, l, "o", "hid", exp) {
		t.Error("a lane renewed further ($max) is not a renewed lease")
	}
	other, otherHolder := "p", "x"
	spoilers := map[string]func(*laneDoc){
		"epoch raised":           func(l *laneDoc) { l.Epoch = 4 },
		"another owner":          func(l *laneDoc) { l.Owner = &other },
		"another holder":         func(l *laneDoc) { l.Holder = &otherHolder },
		"handed back":            func(l *laneDoc) { l.Owner, l.Holder, l.LeaseExpiresAt = nil, nil, nil },
		"expiry not reached":     func(l *laneDoc) { e := exp.Add(-time.Second); l.LeaseExpiresAt = &e },
		"delivery not in flight": func(l *laneDoc) { l.InFlight = nil },
	}
	for name, spoil := range spoilers {
		l := good()
		spoil(l)
		if leaseRenewed(ref, l, "o", "hid", exp) {
			t.Errorf("%s: reported renewed", name)
		}
	}
}
