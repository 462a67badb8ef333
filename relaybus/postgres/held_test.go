package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHeldLanes plays the held-lane set through a claim's life: the first
// lock reads every lane, later ones the lanes the set holds; a lane found
// not held leaves it unless it was gained after the lock was sent; a
// failed round trip, or heldRecheck passing, makes the next lock read
// every lane again; owners do not share a set.
func TestHeldLanes(t *testing.T) {
	var h heldLanes
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

	l := h.lock("a", t0)
	require.Nil(t, l.lanes, "the first lock reads every lane")
	h.locked("a", l, t0, []int16{1, 2}, []int16{3})
	l = h.lock("a", t0.Add(time.Millisecond))
	require.Equal(t, []int16{1, 2, 3}, l.lanes)

	// A concurrent claim of the same owner takes lane 5 after this lock
	// was sent; the lock finds 1 held, 2 and 3 not.
	h.gained("a", []int16{5})
	h.locked("a", l, t0.Add(2*time.Millisecond), []int16{1}, nil)
	require.Equal(t, []int16{1, 5}, h.lock("a", t0.Add(3*time.Millisecond)).lanes, "lane 5 was gained after the lock was sent")

	// Another owner has a set of its own, which starts with a full read.
	require.Nil(t, h.lock("b", t0).lanes)
	h.gained("b", []int16{9}) // not trusted yet: nothing to add to
	require.Nil(t, h.lock("b", t0).lanes)
	require.Equal(t, []int16{1, 5}, h.lock("a", t0.Add(3*time.Millisecond)).lanes)

	// A failed round trip: the next lock reads every lane, and its
	// result replaces the set.
	h.distrust("a")
	l = h.lock("a", t0.Add(4*time.Millisecond))
	require.Nil(t, l.lanes)
	h.locked("a", l, t0.Add(4*time.Millisecond), []int16{7}, nil)
	require.Equal(t, []int16{7}, h.lock("a", t0.Add(5*time.Millisecond)).lanes)

	// At most heldRecheck after the last full read, the next reads every
	// lane again; so does a clock that went back.
	require.NotNil(t, h.lock("a", t0.Add(4*time.Millisecond+heldRecheck-time.Nanosecond)).lanes)
	require.Nil(t, h.lock("a", t0.Add(4*time.Millisecond+heldRecheck)).lanes)
	require.Nil(t, h.lock("a", t0).lanes)
}
