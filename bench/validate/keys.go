package validate

// keyStates checks the store's per-key state after the drain
// (Final.Keys, reported by a worker that reads it) against itself and
// against the records, so that a key's events no record shows are seen:
//   - in the store, a key's counter, its event count and its highest
//     sequence agree (sequences 1..n, one event each, none deleted);
//   - the counter is the highest sequence a handle of the key reported:
//     after the drain every event the store holds was handled at least
//     once (ok, or failed until dead), and a dispatcher writes its handle
//     records before it completes, so a higher counter is a tail of
//     events that committed and that no process handled (published
//     records or not, certain or uncertain), and a lower one a sequence
//     the store never issued;
//   - every key the records name is in the store, and every key the
//     store holds is in the records.
//
// A worker that does not report the keys leaves them unchecked, noted.
func (c *checker) keyStates() {
	in, r := c.in, c.r
	if c.in.Expect.NoKeyOrder || len(c.keyIDs) == 0 && len(in.Final.Keys) == 0 {
		return
	}
	if !in.Final.KeysReported {
		c.note("keys not checked against the store's counters (a lost tail): the side's inspect does not report them (a worker older than the field, a peer, or a store whose counters it does not read)")
		return
	}
	highest := make([]int64, len(c.keyIDs))
	unknown := make([]int64, len(c.keyIDs))
	for i := range c.events {
		e := &c.events[i]
		switch {
		case e.key == "":
		case e.seq > 0:
			highest[e.keyID] = max(highest[e.keyID], e.seq)
		default:
			unknown[e.keyID]++
		}
	}
	seen := make([]bool, len(c.keyIDs))
	for _, k := range in.Final.Keys {
		if k.LastSequence != k.Events || k.MaxSequence != k.Events {
			r.KeyStateViolations++
			c.ex("key state: the store's counter of key %q is at %d, and it holds %d events of the key up to sequence %d", k.Key, k.LastSequence, k.Events, k.MaxSequence)
		}
		id, ok := c.keyIDs[k.Key]
		if !ok {
			r.KeyStateViolations++
			c.ex("key state: the store holds key %q (counter %d, %d events), which no record names", k.Key, k.LastSequence, k.Events)
			continue
		}
		seen[id] = true
		switch h := highest[id]; {
		case k.LastSequence < h:
			r.KeyStateViolations++
			c.ex("key state: the store's counter of key %q is at %d, below sequence %d that a handle reported", k.Key, k.LastSequence, h)
		case k.LastSequence > h:
			r.KeyStateViolations++
			c.ex("lost tail: the store's counter of key %q is at %d, the handles show sequences up to %d: %d committed events of the key were never handled (%d published records of the key have no handle)",
				k.Key, k.LastSequence, h, k.LastSequence-h, unknown[id])
		}
	}
	if in.Final.KeysTruncated {
		c.note("keys: the store reported only its first %d keys; the others were not checked", len(in.Final.Keys))
		return
	}
	names := make([]string, len(c.keyIDs))
	for k, id := range c.keyIDs {
		names[id] = k
	}
	for id, k := range names {
		if !seen[id] && highest[id] > 0 {
			r.KeyStateViolations++
			c.ex("key state: key %q, handled up to sequence %d, is not in the store's keys", k, highest[id])
		}
	}
}
