/*
 * lanes_mongo.pml: the 0.2.0 lane-lease protocol as the MongoDB store runs
 * it (seed, section "MongoDB"; docs/lane-protocol.md, section "MongoDB"):
 * lane documents {epoch, owner, holder, leaseExpiresAt, inFlight, lost},
 * single-document atomic writes, and snapshot-isolated multi-document
 * transactions in which a write to a document that another transaction
 * has written since this one's snapshot is a write conflict (the later
 * one aborts and retries). There are no locks.
 *
 * Instance, scenarios, ghost state and properties are those of
 * lanes_pg.pml (read its header); what differs:
 *
 *   - A claim is not a transaction: it reads, then takes lanes with one
 *     conditional update each (the takeover moves inFlight into lost and
 *     raises the epoch in that one write), then charges lost, then reads
 *     the candidates of the taken lanes, picks, and records with one
 *     conditional update per lane (filter: epoch, owner, holder; update
 *     $addToSet picks, $pull finished ids, expiry), or hands the lane back.
 *   - The charge of lost is one transaction that updates the charged
 *     deliveries and pulls them from lost (-DSEED_CHARGE: the seed's two
 *     writes, charge then clear; a crash between them charges again).
 *   - Completion (plain or the handler's) is a transaction: a snapshot
 *     (the fence is read there) and later the delete and the commit. The
 *     charge, reschedule, bury and release write the same delivery
 *     document, so whichever commits second conflicts, retries with a new
 *     snapshot and sees the fence broken. Completions write no lane, so
 *     two completions in one lane never conflict.
 *   - Reschedule, bury, release: a transaction that updates the delivery
 *     and pulls it from inFlight (so it also conflicts with writes of the
 *     lane document: renewals, records, takeovers).
 *
 * Conflict detection: ddirty[d] / ldirty[l] hold the open transactions
 * (bit per worker slot) whose snapshot predates a committed write of the
 * document; a transaction's write to a dirty document is a write conflict.
 * Every write commits in the step that makes it (a transaction's writes
 * and commit are one step), so no document is ever seen locked.
 *
 * Variants (check.sh expects each to fail):
 *   NOLOST        the takeover empties inFlight without recording the ids
 *                 in lost (the taker keeps them in memory for the charge)
 *   SEED_CHARGE   charge and clearing lost are two writes
 *   NOHOLDER      own lanes matched by owner only (no holder check)
 *   NOEPOCH       a takeover does not raise the epoch
 *   NOCLAIMS      the charge does not raise claims
 *   NOPRED_INFLIGHT, LITERAL_ABANDONED, STRICT_DUE, RELEASE_CHARGES,
 *   NO_ISOLATE, SUSPECT_BUSY, BURY_ANY   as in lanes_pg.pml
 *   SET_INFLIGHT  the record $sets inFlight to the value its claim read
 *                 (instead of $addToSet / $pull): a lost update
 *   NO_FENCE, NO_INV, NO_ORDER   switch an assertion off
 */

#ifndef NW
#define NW 2
#endif
#define NS 2
#define ND 5
#define NL 2
#ifndef MAXATT
#define MAXATT 2
#endif

#if defined(CRASH)
#define NCRASH 1
#elif defined(SLOW)
#define NSPUR 1
#elif defined(STOP)
#define NSTOP 1
#elif defined(POISON)
#define PID 4
#define NCRASH 1
#ifndef DEX
#define DEX 21
#endif
#endif
#ifndef NCRASH
#define NCRASH 0
#endif
#ifndef NSPUR
#define NSPUR 0
#endif
#ifndef NSTOP
#define NSTOP 0
#endif

#define B(x)      (1 << (x))
#define HAS(m, x) ((((m) >> (x)) & 1) == 1)

#define LANE(d)    (((d) == 2 || (d) == 3) -> 1 : 0)
#define LMASK(l)   ((l) == 0 -> 19 : 12)
#define HASPRED(d) ((d) == 1 || (d) == 3)
#ifndef TXM
#define TXM 3
#endif
#ifndef FAILM
#define FAILM 5
#endif

/* slot phases */
#define FREE 0
#define HELD 1   /* claimed; the handler runs */
#define CS   2   /* completion: transaction open, snapshot taken (sok) */
#define RS   3   /* reschedule/bury: transaction open, snapshot taken */
#define LS   4   /* release: transaction open, snapshot taken */

/* committed state */
#ifndef DEX
#define DEX 31
#endif
byte dex = DEX;
byte ddead;
byte dsus;
byte datt[ND];
byte dcl[ND];
byte lep[NL];
byte lown[NL];
byte lhold[NL];
byte lexp;
byte lif[NL];
byte llost[NL];
byte ddirty[ND];
byte ldirty[NL];
byte opentx;

byte inc[NW];
byte crashes = NCRASH;
byte spurious = NSPUR;
byte stops = NSTOP;

/* ghost state */
byte live[ND];
byte gatt[ND];
byte hw[ND];
byte startedP;
byte lostP;

#define PEND       (dex & ~ddead)
#define PENDING(d) (HAS(dex, d) && !HAS(ddead, d))
#define ALLDONE    (PEND == 0)

#ifdef LIVE
ltl live { <> ALLDONE }
#endif

#ifdef NOPRED_INFLIGHT
#define PREDIF(p) || HAS(lif[LANE(p)], p)
#else
#define PREDIF(p)
#endif
#define PREDOK(P) (21 | ((!HAS(P, 0) PREDIF(0)) -> 2 : 0) | ((!HAS(P, 2) PREDIF(2)) -> 8 : 0))

#define TB(s)   B(w * NS + (s))
#define CID(s)  (w * NS + (s) + 1)

#ifdef NOHOLDER
#define MINE(l) (lown[l] == w + 1)
#define DEADHOLDER(l) false
#else
#define MINE(l) (lown[l] == w + 1 && lhold[l] == inc[w])
#define DEADHOLDER(l) (lhold[l] != inc[lown[l] - 1])
#endif
#define OWNLIVE(l) (MINE(l) && !HAS(lexp, l))
#ifdef LITERAL_ABANDONED
#define ABANDONED(l) (lown[l] != 0 && HAS(lexp, l) && lif[l] != 0)
#else
#define ABANDONED(l) (lown[l] != 0 && HAS(lexp, l))
#endif
#define TAKEABLE(l) (!OWNLIVE(l) && (lown[l] == 0 || ABANDONED(l)))
#ifdef STRICT_DUE
#define DUE(l) ((LMASK(l) & PEND & ~lif[l] & ~llost[l]) != 0)
#else
#define DUE(l) ((LMASK(l) & PEND) != 0)
#endif
#define OWNCANDS(l) (LMASK(l) & PEND & ~lif[l] & ~llost[l] & PREDOK(PEND))
#define LANEWORK(l) ((OWNLIVE(l) && (OWNCANDS(l) != 0 || ((lif[l] | llost[l]) & PEND) == 0)) || (TAKEABLE(l) && DUE(l)))
#define WORK (LANEWORK(0) || LANEWORK(1))

#define FREESLOTS ((sph[0] == FREE) + (sph[1] == FREE))
#define HOLDS_SUSPECT ((sph[0] != FREE && ssus[0]) || (sph[1] != FREE && ssus[1]))
#define POP5(m) (HAS(m, 0) + HAS(m, 1) + HAS(m, 2) + HAS(m, 3) + HAS(m, 4))

#if defined(NO_ISOLATE) || defined(SUSPECT_BUSY)
#define SUSPECTOK true
#else
#define SUSPECTOK (FREESLOTS == NS)
#endif
#ifdef BURY_ANY
#define BURYOK(x) true
#else
#define BURYOK(x) HAS(dsus, x)
#endif
#if defined(NO_ISOLATE)
#define STARTOK(s) true
#else
#define STARTOK(s) (!ssus[s] || sph[1 - (s)] == FREE)
#endif

#ifdef NO_FENCE
#define FENCE(x, s) skip
#else
#define FENCE(x, s) assert(live[x] == CID(s))
#endif
#ifdef NO_ORDER
#define ORDER(x) skip
#else
#define ORDER(x) assert(!HASPRED(x) || !PENDING(x - 1))
#endif
#define CHECK_ATT(x) assert(datt[x] == gatt[x])
#define INVD(d) ((live[d] != 0) == (PENDING(d) && (HAS(lif[LANE(d)], d) || HAS(llost[LANE(d)], d))))
#ifdef NO_INV
#define CHECK_INV skip
#else
#define CHECK_INV assert(INVD(0) && INVD(1) && INVD(2) && INVD(3) && INVD(4))
#endif
#ifdef POISON
#define ON_DEAD(x) assert(x == PID && startedP == MAXATT || x != PID && !HAS(lostP, x))
#define ISOLATED(s) assert(!ssus[s] || sph[1 - (s)] == FREE)
#define NOTP(s) sd[s] != PID &&
#define NOTHOLDINGP ((sph[0] == FREE || sd[0] != PID) && (sph[1] == FREE || sd[1] != PID))
#else
#define ON_DEAD(x) skip
#define NOTP(s)
#define NOTHOLDINGP true
#endif

/* a committed write of a document: every open snapshot but the writer's
 * is now older than it */
#define DWROTE(d, me) ddirty[d] = ddirty[d] | (opentx & ~(me))
#define LWROTE(l, me) ldirty[l] = ldirty[l] | (opentx & ~(me))

/* the fence of slot s, read at its snapshot */
#define FENCEOK(s) (lep[LANE(sd[s])] == sep[s] && HAS(lif[LANE(sd[s])], sd[s]) && \
	HAS(dex, sd[s]) && dcl[sd[s]] == scl[s])

inline free_slot(s) {
	sph[s] = FREE; sd[s] = 0; sep[s] = 0; scl[s] = 0; ssus[s] = 0; sok[s] = 0
}

/* start a transaction in slot s: its snapshot is now */
inline begin(s, ph) {
	opentx = opentx | TB(s);
	for (x : 0 .. ND - 1) { ddirty[x] = ddirty[x] & ~TB(s) };
	for (x : 0 .. NL - 1) { ldirty[x] = ldirty[x] & ~TB(s) };
	x = 0;
	sok[s] = FENCEOK(s);
	sph[s] = ph
}

inline finish(s) {
	opentx = opentx & ~TB(s);
	for (x : 0 .. ND - 1) { ddirty[x] = ddirty[x] & ~TB(s) };
	for (x : 0 .. NL - 1) { ldirty[x] = ldirty[x] & ~TB(s) };
	x = 0;
	free_slot(s)
}

inline crash(bypoison) {
#ifdef POISON
	for (x : 0 .. NS - 1) {
		if
		:: sph[x] != FREE && live[sd[x]] == CID(x) ->
			if
			:: bypoison -> lostP = lostP | B(sd[x])
			:: else -> lostP = lostP & ~B(sd[x])
			fi
		:: else -> skip
		fi
	};
#endif
	/* the server aborts the open transactions */
	opentx = opentx & ~(TB(0) | TB(1));
	for (x : 0 .. ND - 1) { ddirty[x] = ddirty[x] & ~(TB(0) | TB(1)) };
	for (x : 0 .. NL - 1) { ldirty[x] = ldirty[x] & ~(TB(0) | TB(1)) };
	x = 0; y = 0; cph = 0; own = 0; tk = 0; cand = 0; mem = 0; oif0 = 0; oif1 = 0;
	free_slot(0); free_slot(1);
	stopping = 0; drain = 0;
	inc[w]++;
	printf("w%d: CRASH; restarts as holder %d\n", w, inc[w])
}

/* DeliveryCompleteMany / DeliveryCompleteTx: the transaction's delete
 * and commit. The fence was read at the snapshot; a write conflict on the
 * delivery aborts it and the driver retries from a new snapshot (the
 * handler's transaction runs the handler again). */
inline complete(s) {
	x = sd[s];
	if
	:: !sok[s] ->
		printf("w%d: d%d completion: fence false\n", w, x);
		finish(s)
	:: sok[s] && ((ddirty[x] & TB(s)) != 0) ->
		printf("w%d: d%d completion: write conflict, retry\n", w, x);
		begin(s, CS)
	:: sok[s] && !((ddirty[x] & TB(s)) != 0) ->
		/* the snapshot saw the row, and nobody wrote it since */
		if
		:: HAS(TXM, x) ->
			hw[x]++;
			printf("w%d: d%d handler transaction commits (handler writes #%d)\n", w, x, hw[x]);
			assert(hw[x] <= 1)   /* P1 */
		:: else -> printf("w%d: d%d completed (delete committed)\n", w, x)
		fi;
		FENCE(x, s); ORDER(x);
		dex = dex & ~B(x); DWROTE(x, TB(s));
		if
		:: live[x] == CID(s) -> live[x] = 0
		:: else -> skip
		fi;
		finish(s)
	fi;
	x = 0;
	CHECK_INV
}

/* DeliveryReschedule / DeliveryBury (fail = 1), DeliveryRelease (0): the
 * transaction updates the delivery and pulls it from inFlight */
inline end_attempt(s, fail) {
	x = sd[s]; y = LANE(x);
	if
	:: !sok[s] ->
		printf("w%d: d%d end of attempt: fence false\n", w, x);
		finish(s)
	:: sok[s] && (((ddirty[x] & TB(s)) != 0) || ((ldirty[y] & TB(s)) != 0)) ->
		printf("w%d: d%d end of attempt: write conflict, retry\n", w, x);
		begin(s, sph[s])
	:: sok[s] && !((ddirty[x] & TB(s)) != 0) && !((ldirty[y] & TB(s)) != 0) ->
		FENCE(x, s);
		dcl[x]++;
		lif[y] = lif[y] & ~B(x);
		if
		:: fail ->
			datt[x]++; gatt[x]++; dsus = dsus & ~B(x);
			if
			:: datt[x] >= MAXATT -> ddead = ddead | B(x);
				printf("w%d: d%d buried, attempts %d\n", w, x, datt[x])
			:: else -> printf("w%d: d%d rescheduled, attempts %d\n", w, x, datt[x])
			fi
		:: else ->
#ifdef RELEASE_CHARGES
			datt[x]++;
#endif
			printf("w%d: d%d released, attempts %d\n", w, x, datt[x])
		fi;
		DWROTE(x, TB(s)); LWROTE(y, TB(s));
		live[x] = 0;
		CHECK_ATT(x);
		finish(s)
	fi;
	x = 0; y = 0;
	CHECK_INV
}

/* the takeover's charge of one id: attempts + 1, claims + 1, suspect,
 * buried when it spends the budget of a delivery that was a suspect */
inline charge(x) {
	if
	:: PENDING(x) ->
		datt[x]++;
#ifndef NOCLAIMS
		dcl[x]++;
#endif
		if
		:: datt[x] >= MAXATT && BURYOK(x) -> ddead = ddead | B(x); ON_DEAD(x)
		:: else -> skip
		fi;
		dsus = dsus | B(x);
		DWROTE(x, 0);
		if
		:: live[x] != 0 -> gatt[x]++; live[x] = 0
		:: else -> skip
		fi;
		CHECK_ATT(x)
	:: else -> skip
	fi
}

#ifdef POISON
#define POISONRUN(s) \
	:: atomic { sph[s] == HELD && STARTOK(s) && sd[s] == PID -> ISOLATED(s); startedP++; \
		printf("w%d: poison d%d runs\n", w, PID); crash(1) }
#else
#define POISONRUN(s)
#endif

/* Outcomes of a handler. A transactional handler's transaction starts
 * with the handler (its snapshot); a plain handler's completion starts
 * its transaction when the handler has returned. Either way the snapshot
 * step and the delete-and-commit step are separate. */
#define SLOT(s) \
	POISONRUN(s) \
	:: atomic { sph[s] == HELD && STARTOK(s) && NOTP(s) true -> \
		printf("w%d: d%d handler runs; completion transaction snapshot\n", w, sd[s]); begin(s, CS) } \
	:: atomic { sph[s] == HELD && STARTOK(s) && NOTP(s) HAS(FAILM, sd[s]) -> \
		printf("w%d: d%d handler fails\n", w, sd[s]); begin(s, RS) } \
	:: atomic { sph[s] == HELD && stopping -> begin(s, LS) } \
	:: atomic { sph[s] == CS -> complete(s) } \
	:: atomic { sph[s] == CS && HAS(TXM & FAILM, sd[s]) -> \
		printf("w%d: d%d handler transaction rolls back\n", w, sd[s]); begin(s, RS) } \
	:: atomic { sph[s] == RS -> end_attempt(s, 1) } \
	:: atomic { sph[s] == LS -> end_attempt(s, 0) }

#define RENEWS(s, l) (sph[s] != FREE && LANE(sd[s]) == l && lep[l] == sep[s] && HAS(lif[l], sd[s]))
#define RENEWABLE(l) (HAS(lexp, l) && MINE(l) && (RENEWS(0, l) || RENEWS(1, l)))

proctype Worker(byte w) {
	byte cph, own, tk, cand, picks, rest, dies, pv, mem, oif0, oif1, x, y, z;
	byte sd[NS], sep[NS], scl[NS], sph[NS];
	bit ssus[NS], sok[NS];
	bit stopping;
	bit drain;

end_w:
	do
	/* ---- DeliveryClaim ----
	 * K1: read own lanes' candidates; when they do not fill the free
	 * slots, take free or abandoned lanes with due work, each with one
	 * conditional update: epoch + 1, owner, holder, expiry, and (a
	 * takeover) lost += inFlight, inFlight = []. */
	:: atomic { cph == 0 && !stopping && FREESLOTS > 0 && !HOLDS_SUSPECT &&
	            (!drain || FREESLOTS == NS) && WORK ->
		drain = 0;
		own = (OWNLIVE(0) -> B(0) : 0) | (OWNLIVE(1) -> B(1) : 0);
		oif0 = lif[0]; oif1 = lif[1];
		cand = ((HAS(own, 0) -> OWNCANDS(0) : 0) | (HAS(own, 1) -> OWNCANDS(1) : 0));
		if
		:: POP5(cand) < FREESLOTS ->
			for (x : 0 .. NL - 1) {
				if
				:: !HAS(own, x) && TAKEABLE(x) && DUE(x) ->
					tk = tk | B(x);
#ifndef NOEPOCH
					lep[x]++;
#endif
					lown[x] = w + 1; lhold[x] = inc[w]; lexp = lexp & ~B(x);
#ifdef NOLOST
					mem = mem | lif[x];
#else
					llost[x] = llost[x] | lif[x];
#endif
					lif[x] = 0;
					LWROTE(x, 0);
					printf("w%d: takes lane %d (epoch %d, lost %d)\n", w, x, lep[x], llost[x] | mem)
				:: else -> skip
				fi
			};
			x = 0;
			if
			:: ((HAS(tk, 0) -> llost[0] : 0) | (HAS(tk, 1) -> llost[1] : 0) | mem) != 0 -> cph = 2
			:: else -> cph = 3
			fi
		:: else -> cph = 3
		fi;
		CHECK_INV }
#ifdef SEED_CHARGE
	/* K2, the seed's form: charge the ids in lost (one update of each
	 * delivery), then, in a second write, clear lost */
	:: atomic { cph == 2 ->
		for (z : 0 .. NL - 1) {
			if
			:: HAS(tk, z) && lown[z] == w + 1 && lhold[z] == inc[w] ->
				for (y : 0 .. ND - 1) {
					if
					:: HAS(llost[z], y) -> charge(y)
					:: else -> skip
					fi
				}
			:: else -> skip
			fi
		};
		y = 0; z = 0;
		printf("w%d: charged lost\n", w);
		cph = 6 }
	:: atomic { cph == 6 ->
		for (z : 0 .. NL - 1) {
			if
			:: HAS(tk, z) && lown[z] == w + 1 && lhold[z] == inc[w] -> llost[z] = 0; LWROTE(z, 0)
			:: else -> skip
			fi
		};
		z = 0;
		printf("w%d: cleared lost\n", w);
		cph = 3;
		CHECK_INV }
#else
	/* K2: one transaction charges the ids in lost and pulls them from
	 * lost (a write conflict with a completion's delete: retried, and then
	 * the deleted delivery is not charged) */
	:: atomic { cph == 2 ->
		for (z : 0 .. NL - 1) {
			if
			:: HAS(tk, z) && lown[z] == w + 1 && lhold[z] == inc[w] ->
				for (y : 0 .. ND - 1) {
					if
					:: HAS(llost[z] | (mem & LMASK(z)), y) -> charge(y)
					:: else -> skip
					fi
				};
				llost[z] = 0; LWROTE(z, 0)
			:: else -> skip
			fi
		};
		y = 0; z = 0; mem = 0;
		printf("w%d: charged lost\n", w);
		cph = 3;
		CHECK_INV }
#endif
	/* K3: candidates of the taken lanes, suspects alone, then the record:
	 * one conditional update per lane (epoch, owner, holder unchanged):
	 * $addToSet the picks, $pull finished ids, expiry; a lane that runs
	 * nothing is handed back (conditional on its inFlight as read) */
	:: atomic { cph == 3 ->
		/* a lane we no longer hold (taken over meanwhile) is dropped */
		for (x : 0 .. NL - 1) {
			if
			:: HAS(own | tk, x) && !MINE(x) -> own = own & ~B(x); tk = tk & ~B(x);
				cand = cand & ~LMASK(x)
			:: else -> skip
			fi
		};
		pv = PEND;
		cand = cand | (((HAS(tk, 0) -> LMASK(0) : 0) | (HAS(tk, 1) -> LMASK(1) : 0)) & pv & ~lif[0] & ~lif[1] & ~llost[0] & ~llost[1] & PREDOK(pv));
		cand = cand & PEND;
		if
		:: cand == 0 -> skip
		:: else ->
			if
			:: HAS(cand, 0) -> x = 0
			:: HAS(cand, 1) -> x = 1
			:: HAS(cand, 2) -> x = 2
			:: HAS(cand, 3) -> x = 3
			:: HAS(cand, 4) -> x = 4
			fi;
			picks = B(x);
#ifdef NO_ISOLATE
			rest = cand & ~B(x);
#else
			if
			:: HAS(dsus, x) && SUSPECTOK -> rest = 0
			:: HAS(dsus, x) && !SUSPECTOK -> picks = 0; rest = 0; drain = 1
			:: else -> rest = cand & ~B(x) & ~dsus
			fi;
#endif
			if
			:: FREESLOTS >= 2 && rest != 0 ->
				if
				:: HAS(rest, 0) -> picks = picks | B(0)
				:: HAS(rest, 1) -> picks = picks | B(1)
				:: HAS(rest, 2) -> picks = picks | B(2)
				:: HAS(rest, 3) -> picks = picks | B(3)
				:: HAS(rest, 4) -> picks = picks | B(4)
				fi
			:: else -> skip
			fi
		fi;
		for (x : 0 .. NL - 1) {
			if
			:: HAS(own | tk, x) ->
#ifdef SET_INFLIGHT
				/* $set inFlight to what the claim read, minus the finished */
				lif[x] = ((x == 0 -> oif0 : oif1) & PEND) | (picks & LMASK(x));
#else
				lif[x] = (lif[x] & PEND) | (picks & LMASK(x));
#endif
				lexp = lexp & ~B(x);
				if
				:: lif[x] == 0 && llost[x] == 0 -> lown[x] = 0; lhold[x] = 0
				:: else -> skip
				fi;
				LWROTE(x, 0)
			:: else -> skip
			fi
		};
		for (x : 0 .. ND - 1) {
			if
			:: HAS(picks, x) ->
				assert(live[x] == 0);
				if
				:: sph[0] == FREE -> y = 0
				:: else -> y = 1
				fi;
				printf("w%d: claims d%d (token %d:%d:%d, attempt %d, suspect %d)\n", w, x, LANE(x), lep[LANE(x)], dcl[x], datt[x] + 1, HAS(dsus, x));
				sd[y] = x; sep[y] = lep[LANE(x)]; scl[y] = dcl[x];
				ssus[y] = HAS(dsus, x); sph[y] = HELD;
				live[x] = CID(y)
			:: else -> skip
			fi
		};
		x = 0; y = 0; cph = 0; own = 0; tk = 0; cand = 0; oif0 = 0; oif1 = 0;
		picks = 0; rest = 0; dies = 0; pv = 0;
		CHECK_INV }

	SLOT(0)
	SLOT(1)

	/* ---- LeaseExtend: one updateMany on lane documents ---- */
	:: atomic { RENEWABLE(0) || RENEWABLE(1) ->
		for (x : 0 .. NL - 1) {
			if
			:: RENEWABLE(x) -> lexp = lexp & ~B(x); LWROTE(x, 0); printf("w%d: renews lane %d\n", w, x)
			:: else -> skip
			fi
		};
		x = 0 }

	/* ---- graceful stop ---- */
	:: atomic { !stopping && stops > 0 && cph == 0 -> stopping = 1; stops--; printf("w%d: graceful stop\n", w) }
	/* OwnerRelinquish: one transaction per lane: release, hand back */
	:: atomic { stopping && sph[0] == FREE && sph[1] == FREE && cph == 0 && (MINE(0) || MINE(1)) ->
		for (z : 0 .. NL - 1) {
			if
			:: MINE(z) ->
				for (x : 0 .. ND - 1) {
					if
					:: HAS((lif[z] | llost[z]) & PEND, x) -> dcl[x]++; DWROTE(x, 0); live[x] = 0
					:: else -> skip
					fi
				};
				lown[z] = 0; lhold[z] = 0; lif[z] = 0; llost[z] = 0; lexp = lexp & ~B(z);
				LWROTE(z, 0);
				printf("w%d: relinquishes lane %d\n", w, z)
			:: else -> skip
			fi
		};
		x = 0; z = 0;
		CHECK_INV }
	:: atomic { stopping && sph[0] == FREE && sph[1] == FREE && cph == 0 && !MINE(0) && !MINE(1) ->
		stopping = 0; inc[w]++ }

	/* ---- crash at any step (worker 0) ---- */
	:: atomic { w == 0 && crashes > 0 && NOTHOLDINGP -> crashes--; crash(0) }
	od
}

#define EXPIRABLE(l) (lown[l] != 0 && !HAS(lexp, l) && (DEADHOLDER(l) || spurious > 0))
#define EXPIRE(l) if :: !DEADHOLDER(l) -> spurious--; printf("lane %d: lease expires (holder alive but slow)\n", l) :: else -> printf("lane %d: lease expires (holder dead)\n", l) fi; lexp = lexp | B(l)
proctype Env() {
end_env:
	do
	:: atomic { EXPIRABLE(0) -> EXPIRE(0) }
	:: atomic { EXPIRABLE(1) -> EXPIRE(1) }
	od
}

active proctype Done() {
	ALLDONE
}

init {
	byte i;
	atomic {
		for (i : 0 .. NW - 1) {
			run Worker(i)
		};
		run Env()
	}
}
