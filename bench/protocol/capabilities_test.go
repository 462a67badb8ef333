package protocol

import "testing"

func TestPeerName(t *testing.T) {
	for _, tc := range []struct {
		caps []string
		want string
	}{
		{nil, ""},
		{[]string{"store:postgres", "record:v1"}, ""},
		{[]string{"peer:river"}, ""}, // a name without the peer capability is not a peer
		{[]string{"peer", "peer:river", "no-key-order"}, "river"},
		{[]string{"peer"}, "unnamed peer"},
		{[]string{"peer", "peer:"}, "unnamed peer"},
	} {
		if got := PeerName(tc.caps); got != tc.want {
			t.Errorf("PeerName(%q) = %q, want %q", tc.caps, got, tc.want)
		}
	}
	if !HasCapability([]string{"peer", CapabilityNoKeyOrder}, "no-key-order") || HasCapability(nil, CapabilityNoKeyOrder) {
		t.Error("HasCapability")
	}
}
