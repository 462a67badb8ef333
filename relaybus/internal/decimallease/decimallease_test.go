package decimallease

import (
	"errors"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func TestParse(t *testing.T) {
	got, err := Parse(relaytype.Lease{DeliveryID: "42", Token: "7:3:1"})
	if err != nil || got != (Lease{ID: 42, Token: driver.LaneToken{Lane: 7, Epoch: 3, Claims: 1}}) {
		t.Fatalf("Parse(42, 7:3:1) = %+v, %v", got, err)
	}
	for _, l := range []relaytype.Lease{
		{DeliveryID: "0", Token: "7:3:1"},   // IDs start at 1
		{DeliveryID: "042", Token: "7:3:1"}, // not canonical
		{DeliveryID: "-1", Token: "7:3:1"},
		{DeliveryID: "x", Token: "7:3:1"},
		{DeliveryID: "42", Token: "7:3"},     // a token of another form
		{DeliveryID: "42", Token: "256:3:1"}, // no such lane
	} {
		if _, err := Parse(l); !errors.Is(err, relaytype.ErrInvalid) {
			t.Errorf("Parse(%+v): %v, want relaytype.ErrInvalid", l, err)
		}
	}
	if ls, err := ParseAll([]relaytype.Lease{{DeliveryID: "1", Token: "0:1:0"}, {DeliveryID: "2", Token: "bad"}}); err == nil || ls != nil {
		t.Errorf("one bad lease of two: %v, %v", ls, err)
	}
}
