package validate

// The store's dead letters against the planted poison and the records.

// deadLetters compares the store's dead letters with the planted poison,
// deduplicated and in the store's order so the examples are
// deterministic, and checks their attempts against the budget.
func (c *checker) deadLetters() {
	in, r := c.in, c.r
	dead := make(map[[2]string]bool, len(in.Final.DeadLetters))
	for _, dl := range in.Final.DeadLetters {
		d := [2]string{dl.EventID, dl.Handler}
		if dead[d] {
			continue
		}
		dead[d] = true
		ei, known := c.eventIdx[dl.EventID]
		_, knownHandler := c.handlerIdx[dl.Handler]
		if !known || !knownHandler || !c.events[ei].poison {
			r.DeadUnexpected++
			c.ex("dead unexpected: event %s handler %s is dead-lettered but was not planted as poison", dl.EventID, dl.Handler)
		}
		pair := [2]int32{ei, c.handlerIdx[dl.Handler]}
		lost := known && knownHandler && c.lostPairs[pair]
		if known && knownHandler {
			c.deadAgainstRecords(dl, c.failedPairs[pair])
		}
		if b := in.Expect.MaxAttempts; b > 0 && dl.Attempts != b && !(lost && dl.Attempts == b+1) {
			r.OverBudget++
			c.ex("over budget: dead letter %s handler %s has %d attempts, the budget is %d", dl.EventID, dl.Handler, dl.Attempts, b)
		}
	}
	if !in.Final.DeadLettersTruncated && in.Final.Dead > int64(len(dead)) {
		r.DeadUnexpected += in.Final.Dead - int64(len(dead))
		c.ex("dead unexpected: the store counts %d dead deliveries but lists %d", in.Final.Dead, len(dead))
	}
	if in.Final.Dead < int64(len(dead)) {
		r.DeadLetterMismatches++
		c.ex("dead letters: the store counts %d dead deliveries but lists %d", in.Final.Dead, len(dead))
	}
	if in.Final.DeadLettersTruncated {
		r.DeadLettersUnverified = true
		c.ex("dead letters truncated: the store listed only part of its %d dead deliveries", in.Final.Dead)
	}
	c.dead = dead
}

// deadAgainstRecords checks a dead letter's attempts against the handles
// recorded for its delivery (pair, in handling order): no attempt failed
// on record beyond its count, and every attempt it counts failed on
// record, except in a fault cell the ones a fault explains: an attempt a
// killed process ran before its kill (its last records may never have
// been written, and the attempt in flight is charged at the takeover),
// which is any attempt below the lowest one recorded after the kill, and
// one more per database restart or crash.
func (c *checker) deadAgainstRecords(dl DeadLetter, pair []int32) {
	if dl.Attempts <= 0 {
		return
	}
	recorded := make([]bool, dl.Attempts+1)
	most := 0
	for _, k := range pair {
		if rec := c.rec(&c.handles[k]).h; !rec.OK {
			most = max(most, rec.Attempt)
			if rec.Attempt >= 1 && rec.Attempt <= dl.Attempts {
				recorded[rec.Attempt] = true
			}
		}
	}
	if most > dl.Attempts {
		c.r.DeadLetterMismatches++
		c.ex("dead letters: %s handler %s is dead with %d attempts, but attempt %d failed on record", dl.EventID, dl.Handler, dl.Attempts, most)
		return
	}
	// killedBelow: attempts below it may have been run by a killed
	// process, unrecorded.
	killedBelow, spare := 0, 0
	if c.in.Expect.AllowRedelivery {
		for _, f := range c.in.Expect.Faults {
			if isDBFault(f.Kind) {
				spare++
				continue
			}
			low := dl.Attempts + 1 // the lowest attempt recorded after the kill
			for _, k := range pair {
				if rec := c.rec(&c.handles[k]).h; rec.HandleNs > f.EndNs {
					low = min(low, rec.Attempt)
				}
			}
			killedBelow = max(killedBelow, low)
		}
	}
	missing := 0
	for a := 1; a <= dl.Attempts; a++ {
		if !recorded[a] && a >= killedBelow {
			missing++
		}
	}
	if missing > spare {
		n := 0
		for _, r := range recorded {
			if r {
				n++
			}
		}
		c.r.DeadLetterMismatches++
		c.ex("dead letters: %s handler %s is dead with %d attempts, but the records show %d failed attempts and no fault explains %d of the others",
			dl.EventID, dl.Handler, dl.Attempts, n, missing-spare)
	}
}
