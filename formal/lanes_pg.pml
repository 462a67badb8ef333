/*
 * lanes_pg.pml: the 0.2.0 lane-lease protocol (docs/lane-protocol.md) as
 * the PostgreSQL store runs it, with PostgreSQL's row locks and READ
 * COMMITTED statements.
 *
 * Instance: NW workers (dispatcher processes, default 2), each with NS = 2
 * handler slots, NL = 2 lanes and ND = 5 deliveries of one handler:
 *
 *   d0 key k0 seq 1 lane 0     d2 key k1 seq 1 lane 1
 *   d1 key k0 seq 2 lane 0     d3 key k1 seq 2 lane 1
 *   d4 no key       lane 0     (lane 0 holds two keys' worth of work)
 *
 * A worker crashes at any step (NCRASH times) and restarts at once as a
 * new store instance (a new holder); the server aborts its open
 * transactions. A lease expires whenever its holder is dead, and up to
 * NSPUR times while its holder is alive but slow. A worker stops
 * gracefully NSTOP times (releases what it has not run, relinquishes its
 * lanes, restarts). Handlers succeed (plain or transactional completion,
 * whose transaction may still roll back) or fail (reschedule or bury).
 *
 * Scenario -DPOISON: d4 crashes its worker every time it runs, the other
 * deliveries always succeed, no other crash, no slow holder.
 *
 * Scenario -DDBCRASH: the database server crashes NDBCRASH times (default
 * 1), at any step, and loses its unflushed commits (see "The server's
 * WAL" below); the workers keep running with the tokens they were given.
 *
 * State (shared, committed values):
 *   deliveries  dex, ddead, dsus: bit masks (row exists, status dead,
 *               suspect); datt[], dcl[]: attempts and claims counters;
 *               dlk[]: the transaction holding the row lock (0: none)
 *   lanes       lep[] epoch, lown[] owner (worker + 1, 0 free), lhold[]
 *               holder (the owner's incarnation), lexp: lease expired
 *               (mask), lif[] in_flight (mask of deliveries)
 *   lane locks  lw[]: the transaction holding FOR NO KEY UPDATE or FOR
 *               UPDATE (they conflict with each other), lupd: it is FOR
 *               UPDATE (mask), lks[]: holders of FOR KEY SHARE (mask)
 * Uncommitted writes live in the writer's local variables and are applied
 * at its commit, so every other statement reads committed values (READ
 * COMMITTED); a statement that waits for a row lock re-reads the latest
 * committed row when it gets it (PostgreSQL's re-check of an updated row).
 *
 * Ghost state (the specification, never read by the protocol):
 *   live[d]  the claim (worker slot) whose lease on d is current, 0 none
 *   gatt[d]  attempts as the spec counts them: one per failed attempt,
 *            one per live claim ended by a takeover (a lost attempt)
 *   hw[d]    commits of a transactional handler's writes
 *
 * Properties (assertions; check.sh matches the first violated one):
 *   P1 no double commit      assert(hw[x] <= 1)
 *   P2 fencing               assert(live[x] == CID(s)) at every committing
 *                            fenced write (a stale holder writes nothing)
 *   P3 per-key order         a completion commits only when no lower
 *                            sequence of its key is still pending
 *   P4 accounting            assert(datt[x] == gatt[x]): attempts are what
 *                            failed or was lost, never a release
 *   P5 poison                a delivery dies only as the poison, after
 *                            exactly MAXATT runs (scenario POISON)
 *   P6 in_flight is exact    INV: a pending delivery is in its lane's
 *                            in_flight iff it has a live claim
 *   P7 nothing stranded      every execution ends with every delivery
 *                            completed or dead: an end state before that
 *                            is invalid (process Done), and, with -DLIVE,
 *                            the LTL formula <> ALLDONE under weak fairness
 *   P8 tokens are unique     (DBCRASH) each token a claim returns for a
 *                            delivery is above the last one returned for
 *                            it, (epoch, claims) >= in both and > in one,
 *                            so no token is ever issued twice
 *
 * Variants (one flag each; check.sh expects each to fail):
 *   TX_NOLOCK          transactional completion takes no lane lock
 *   NOCLAIMS           the takeover's charge does not raise claims
 *   NOEPOCH            a takeover does not raise the epoch
 *   NOPRED_INFLIGHT    the per-key rule ignores an in-flight predecessor
 *   NOHOLDER           own lanes matched by owner only (no holder)
 *   LITERAL_ABANDONED  "abandoned" needs a non-empty in_flight (the
 *                      protocol text before the fix)
 *   STRICT_DUE         an abandoned lane's in_flight is not "due work"
 *   RELEASE_CHARGES    release spends an attempt
 *   NO_ISOLATE         suspects are claimed and run with others (POISON)
 *   ISOLATE_HANDLERS   a suspect waits for other handlers, not for their
 *                      completions (POISON)
 *   DELETE_FENCED      (with TX_NOLOCK) the DELETE re-checks claims
 *   ASYNC_CLAIM        (DBCRASH) claims commit asynchronously
 *                      (synchronous_commit off, relaybus/postgres 0.2.1)
 *   NO_FENCE, NO_ORDER, NO_TOKEN switch an assertion off, to show the
 *                      next one
 *
 * The server's WAL (-DDBCRASH). The committed state above is what the
 * server has in memory (volatile); dur holds what is on disk (durable),
 * the state as of the last WAL flush. A synchronous commit (completions,
 * reschedules, burials, releases, relinquishes, renewals, and claims)
 * returns once durable: it flushes, and since the WAL is sequential the
 * flush makes every earlier commit durable too (FLUSHALL copies it all).
 * With ASYNC_CLAIM a claim commits without waiting: it updates only the
 * volatile state until a later synchronous commit or the WAL writer's
 * background flush (Env) copies it. The crash (Env) resets the volatile
 * state to dur, aborts every open transaction (all locks gone) and fails
 * every statement in progress; each worker learns it later (dbab) and
 * goes on with the tokens it holds. A claim may also lose its reply: the
 * server crashes after the commit is durable and before the reply
 * reaches the worker, whose claim returns an error (no token issued).
 * The ghost live[] and gatt[] describe the rows, so they are flushed and
 * reverted with them; gep[], gcl[] (P8) describe what clients were given
 * and are never reverted.
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

/* Scenarios: which faults happen, and how often. Each run of check.sh
 * picks one; the budgets are small because each fault multiplies the
 * state space. */
#if defined(CRASH)
#define NCRASH 1   /* worker 0 crashes once, at any step */
#elif defined(SLOW)
#define NSPUR 1    /* one lease expires while its holder is alive */
#elif defined(STOP)
#define NSTOP 1    /* one graceful stop (release, relinquish, restart) */
#elif defined(POISON)
#define PID 4      /* d4 crashes its worker whenever it runs */
#define NCRASH 1   /* and worker 0 crashes once for another reason */
#ifndef DEX
#define DEX 21     /* d0 d2 d4: the poison and two deliveries that may fail */
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
#if defined(DBCRASH) && !defined(NDBCRASH)
#define NDBCRASH 1 /* the server crashes once, at any step */
#endif

#define B(x)      (1 << (x))
#define HAS(m, x) ((((m) >> (x)) & 1) == 1)

/* static data of the instance */
#define LANE(d)    (((d) == 2 || (d) == 3) -> 1 : 0)
#define LMASK(l)   ((l) == 0 -> 19 : 12)   /* lane 0: d0 d1 d4; lane 1: d2 d3 */
#define HASPRED(d) ((d) == 1 || (d) == 3)  /* its predecessor is d - 1 */
#ifndef TXM
#define TXM 3     /* key k0's handler is transactional: d0 d1 */
#endif
#ifndef FAILM
#define FAILM 5   /* handlers that may fail: d0 (also its transaction may roll back), d2 */
#endif

/* slot phases */
#define FREE 0
#define HELD 1   /* claimed; the handler runs (for as long as it likes) */
#define PC2  2   /* plain completion: its DELETE waits to reach the row */
#define TC2  3   /* transactional completion without lane lock: check */
#define TC3  4   /*   DELETE (TX_NOLOCK only: check and DELETE separate) */
#define TC4  5   /* the handler's transaction commits or rolls back */
#define RSW  6   /* a rolled-back handler transaction: reschedule next */
#define PC1  7   /* a plain completion to send again (DBCRASH: failed) */

/* committed state */
#ifndef DEX
#define DEX 31
#endif
byte dex = DEX;
byte ddead;
byte dsus;
byte datt[ND];
byte dcl[ND];
byte dlk[ND];
byte lep[NL];
byte lown[NL];
byte lhold[NL];
byte lexp;
byte lif[NL];
byte lw[NL];
byte lupd;
byte lks[NL];

byte inc[NW];          /* a worker's current incarnation = its holder id */
byte crashes = NCRASH;
byte spurious = NSPUR;
byte stops = NSTOP;      /* graceful stops, any worker */

/* ghost state */
byte live[ND];
byte gatt[ND];
byte hw[ND];
byte startedP;
byte lostP;    /* deliveries whose last lost claim was lost to the poison */

#define LOSTC 15   /* ghost (DBCRASH): a claim whose reply was lost, held by no slot */
#ifdef DBCRASH
/* the durable state: what the WAL on disk holds (see the header) */
typedef Rows {
	byte dex = DEX; byte ddead; byte dsus; byte datt[ND]; byte dcl[ND];
	byte lep[NL]; byte lown[NL]; byte lhold[NL]; byte lexp; byte lif[NL];
	byte live[ND]; byte gatt[ND]   /* ghost, of the rows */
};
Rows dur;
byte dbcrashes = NDBCRASH;
byte dbab;     /* workers that have not yet learnt of the crash (mask) */
#ifdef ASYNC_CLAIM
bit unfl;      /* the volatile state has commits not yet flushed */
#endif
byte gep[ND];  /* ghost: the last token returned for each delivery */
byte gcl[ND];

#define CP5(f) dur.f[0] = f[0]; dur.f[1] = f[1]; dur.f[2] = f[2]; dur.f[3] = f[3]; dur.f[4] = f[4]
#define CP2(f) dur.f[0] = f[0]; dur.f[1] = f[1]
#define BK5(f) f[0] = dur.f[0]; f[1] = dur.f[1]; f[2] = dur.f[2]; f[3] = dur.f[3]; f[4] = dur.f[4]
#define BK2(f) f[0] = dur.f[0]; f[1] = dur.f[1]
/* a WAL flush: everything committed so far becomes durable */
#define FLUSHALL dur.dex = dex; dur.ddead = ddead; dur.dsus = dsus; CP5(datt); CP5(dcl); \
	CP2(lep); CP2(lown); CP2(lhold); dur.lexp = lexp; CP2(lif); CP5(live); CP5(gatt)
/* the crash: the volatile state is what was durable */
#define REVERT dex = dur.dex; ddead = dur.ddead; dsus = dur.dsus; BK5(datt); BK5(dcl); \
	BK2(lep); BK2(lown); BK2(lhold); lexp = dur.lexp; BK2(lif); BK5(live); BK5(gatt)
/* SYNC and CLAIM_COMMIT follow a commit's last statement without a
 * separator: each expands to "; <the commit's WAL effect>", or to nothing
 * without DBCRASH (so the other scenarios' models are unchanged) */
#ifdef ASYNC_CLAIM
#define SYNC         ; FLUSHALL; unfl = 0
#define CLAIM_COMMIT ; unfl = 1  /* synchronous_commit off */
#else
#define SYNC         ; FLUSHALL
#define CLAIM_COMMIT SYNC        /* the fix: a claim's commit is durable */
#endif
#define UP (!HAS(dbab, w))       /* the worker's transactions are not dead */
/* P8: a new token for x is above the last one returned for it */
#ifdef NO_TOKEN
#define TOKEN(x) skip
#else
#define TOKEN(x) assert(lep[LANE(x)] >= gep[x] && dcl[x] >= gcl[x] && (lep[LANE(x)] > gep[x] || dcl[x] > gcl[x]))
#endif
#define ISSUE(x) TOKEN(x); gep[x] = lep[LANE(x)]; gcl[x] = dcl[x];
/* a lane whose in_flight lists a delivery whose claim lost its reply:
 * no slot holds its token, so nobody renews the lease */
#define ORPHL(l) ((l) == 0 -> (live[0] == LOSTC || live[1] == LOSTC || live[4] == LOSTC) : (live[2] == LOSTC || live[3] == LOSTC))
#else
#define SYNC
#define CLAIM_COMMIT
#define UP true
#define ISSUE(x)
#define ORPHL(l) false
#endif

#define PEND       (dex & ~ddead)
#define PENDING(d) (HAS(dex, d) && !HAS(ddead, d))
#define ALLDONE    (PEND == 0)

#ifdef LIVE
ltl live { <> ALLDONE }
#endif

/* per-key rule: mask of deliveries whose predecessor does not block,
 * given a mask P of pending deliveries */
#ifdef NOPRED_INFLIGHT
#define PREDIF(p) || HAS(lif[LANE(p)], p)
#else
#define PREDIF(p)
#endif
#define PREDOK(P) (21 | ((!HAS(P, 0) PREDIF(0)) -> 2 : 0) | ((!HAS(P, 2) PREDIF(2)) -> 8 : 0))

/* transactions and claims of worker w */
#define TXC     (w * 3 + 1)
#define TXS(s)  (w * 3 + 2 + (s))
#define KSB(s)  B(w * NS + (s))
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
#define DUE(l) ((LMASK(l) & PEND & ~lif[l]) != 0)
#else
#define DUE(l) ((LMASK(l) & PEND) != 0)
#endif
#define OWNCANDS(l) (LMASK(l) & PEND & ~lif[l] & PREDOK(PEND))
/* a claim would pick, take or hand back something (an idle poll that
 * would change nothing is not modelled; it only extends own leases) */
#define LANEWORK(l) ((OWNLIVE(l) && (OWNCANDS(l) != 0 || (lif[l] & PEND) == 0)) || (TAKEABLE(l) && DUE(l)))
#define WORK (LANEWORK(0) || LANEWORK(1))

#define FREESLOTS ((sph[0] == FREE) + (sph[1] == FREE))
#define HOLDS_SUSPECT ((sph[0] != FREE && ssus[0]) || (sph[1] != FREE && ssus[1]))
#define POP5(m) (HAS(m, 0) + HAS(m, 1) + HAS(m, 2) + HAS(m, 3) + HAS(m, 4))
#define ROWSFREE(m) ((!HAS(m, 0) || dlk[0] == 0) && (!HAS(m, 1) || dlk[1] == 0) && \
	(!HAS(m, 2) || dlk[2] == 0) && (!HAS(m, 3) || dlk[3] == 0) && (!HAS(m, 4) || dlk[4] == 0))

/* Suspects run alone. Fixed protocol: a claim returns a suspect only to
 * a caller with nothing in flight (SUSPECTOK), and a takeover buries only
 * a suspect (BURYOK): a delivery that was not one may have been beside
 * the crasher. SUSPECT_BUSY: the text before the fix (the claim returns a
 * suspect alone whenever it is the oldest; the dispatcher waits until its
 * other deliveries are done before running it). BURY_ANY: the takeover
 * buries whatever its charge spends. */
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

#ifdef TX_NOLOCK
#define TCLOCKOK(s) true
#define TCLOCK(s)   skip
#else
#define TCLOCKOK(s) (!(lw[LANE(sd[s])] != 0 && HAS(lupd, LANE(sd[s]))))
#define TCLOCK(s)   lks[LANE(sd[s])] = lks[LANE(sd[s])] | KSB(s)
#endif

/* properties */
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
#define INVD(d) ((live[d] != 0) == (PENDING(d) && HAS(lif[LANE(d)], d)))
#ifdef NO_INV
#define CHECK_INV skip
#else
#define CHECK_INV assert(INVD(0) && INVD(1) && INVD(2) && INVD(3) && INVD(4))
#endif
#ifdef POISON
/* P5: only the poison dies, and after exactly its budget of runs; a
 * failed attempt of another delivery (d0, d2 may fail) may bury it only
 * through bury itself */
#define ON_DEAD(x) assert(x == PID && startedP == MAXATT || x != PID && !HAS(lostP, x))
#define ON_BURY(x) assert(x != PID)
/* P5b: a suspect poison crashes its worker with nothing else in flight */
#define ISOLATED(s) assert(!ssus[s] || sph[1 - (s)] == FREE)
#else
#define ON_DEAD(x) skip
#define ON_BURY(x) skip
#endif

/* LeaseExtend: one statement over the lanes of the worker's leases; a
 * lane is renewed when still held by (owner, holder) at the lease's epoch
 * (it need not be unexpired: a superset of implementations that also
 * require that). Only an expired lease's renewal changes the model. */
#define RENEWS(s, l) (sph[s] != FREE && LANE(sd[s]) == l && lep[l] == sep[s] && HAS(lif[l], sd[s]))
#define RENEWABLE(l) (HAS(lexp, l) && MINE(l) && lw[l] == 0 && (RENEWS(0, l) || RENEWS(1, l)))

inline free_slot(s) {
	sph[s] = FREE; sd[s] = 0; sep[s] = 0; scl[s] = 0; ssus[s] = 0; sok[s] = 0
}

/* The worker's process dies: the server aborts its transactions (locks
 * released, uncommitted writes gone); it restarts as a new holder. */
inline crash(bypoison) {
#ifdef POISON
	/* ghost: the claims this crash loses (those of its slots), and
	 * whether the poison did it */
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
	for (x : 0 .. NL - 1) {
		if
		:: lw[x] == TXC || lw[x] == TXS(0) || lw[x] == TXS(1) ->
			lw[x] = 0; lupd = lupd & ~B(x)
		:: else -> skip
		fi;
		lks[x] = lks[x] & ~(KSB(0) | KSB(1))
	};
	for (x : 0 .. ND - 1) {
		if
		:: dlk[x] == TXC || dlk[x] == TXS(0) || dlk[x] == TXS(1) -> dlk[x] = 0
		:: else -> skip
		fi
	};
	x = 0; y = 0; cph = 0; own = 0; tk = 0; ab = 0; chg = 0; cand = 0;
	free_slot(0); free_slot(1);
	stopping = 0; drain = 0;
#ifdef DBCRASH
	dbab = dbab & ~B(w);   /* a new process, new connections */
#endif
	inc[w]++;
	printf("w%d: CRASH; restarts as holder %d\n", w, inc[w])
}

/* DeliveryCompleteMany, one row: DELETE ... WHERE id = $id AND claims =
 * $claims AND (SELECT the lane's epoch and in_flight) fence. The lane
 * subquery is evaluated on the statement's snapshot (sok, taken when the
 * handler returns); the row is re-checked at its latest committed version
 * once its lock is free (PC2). */
inline plain_commit(s) {
	x = sd[s];
	if
	:: HAS(dex, x) && dcl[x] == scl[s] && sok[s] ->
		FENCE(x, s); ORDER(x);
		dex = dex & ~B(x); live[x] = 0 SYNC;
		printf("w%d: d%d completed (plain DELETE committed)\n", w, x)
	:: else -> printf("w%d: d%d plain completion: false (lease lost)\n", w, x)
	fi;
	free_slot(s); x = 0;
	CHECK_INV
}

/* DeliveryCompleteTx: check the fence (with the lane locked FOR KEY
 * SHARE, except in TX_NOLOCK) */
inline tc_check(s) {
	x = sd[s]; y = LANE(x);
	if
	:: lep[y] == sep[s] && HAS(lif[y], x) && HAS(dex, x) && dcl[x] == scl[s] ->
		sph[s] = TC3
	:: else ->   /* false: the caller rolls back */
		printf("w%d: d%d transactional completion: fence false, rollback\n", w, x);
		lks[y] = lks[y] & ~KSB(s); free_slot(s)
	fi;
	x = 0; y = 0
}

/* ... then DELETE the row by id (waits for its lock) */
inline tc_delete(s) {
	x = sd[s];
	if
	:: HAS(dex, x) ->
#ifdef DELETE_FENCED
		if
		:: dcl[x] != scl[s] ->   /* 0 rows: false, the caller rolls back */
			lks[LANE(x)] = lks[LANE(x)] & ~KSB(s); free_slot(s)
		:: else -> dlk[x] = TXS(s); sph[s] = TC4
		fi
#else
		dlk[x] = TXS(s); sph[s] = TC4
#endif
	:: else ->
#ifdef DELETE_FENCED
		/* 0 rows: false, the caller rolls back */
		lks[LANE(x)] = lks[LANE(x)] & ~KSB(s); free_slot(s)
#else
		sph[s] = TC4   /* the row is gone: 0 rows, but the check said true */
#endif
	fi;
	x = 0
}

inline tc_commit(s) {
	x = sd[s]; y = LANE(x);
	hw[x]++;
	printf("w%d: d%d handler transaction commits (handler writes #%d)\n", w, x, hw[x]);
	assert(hw[x] <= 1);   /* P1 */
	FENCE(x, s); ORDER(x);
	if
	:: dlk[x] == TXS(s) -> dex = dex & ~B(x); dlk[x] = 0
	:: else -> skip
	fi;
	if
	:: live[x] == CID(s) -> live[x] = 0
	:: else -> skip
	fi;
	lks[y] = lks[y] & ~KSB(s); free_slot(s); x = 0; y = 0 SYNC;
	CHECK_INV
}

inline tc_rollback(s) {
	x = sd[s];
	if
	:: dlk[x] == TXS(s) -> dlk[x] = 0
	:: else -> skip
	fi;
	lks[LANE(x)] = lks[LANE(x)] & ~KSB(s);
	printf("w%d: d%d handler transaction rolls back\n", w, x); x = 0
}

/* DeliveryReschedule / DeliveryBury (fail = 1) and DeliveryRelease
 * (fail = 0): lock the lane FOR NO KEY UPDATE, check the fence, update
 * the row, remove it from in_flight, commit. One step: while the lane is
 * locked no takeover can touch the fence, and the row's lock is free
 * (guard) whenever the lane's is. */
inline end_attempt(s, fail) {
	x = sd[s]; y = LANE(x);
	if
	:: lep[y] == sep[s] && HAS(lif[y], x) && HAS(dex, x) && dcl[x] == scl[s] ->
		FENCE(x, s);
		dcl[x]++;
		lif[y] = lif[y] & ~B(x);
		if
		:: fail ->
			datt[x]++; gatt[x]++; dsus = dsus & ~B(x);
			if
			:: datt[x] >= MAXATT -> ddead = ddead | B(x); ON_BURY(x)
			:: else -> skip
			fi
		:: else ->
#ifdef RELEASE_CHARGES
			datt[x]++
#else
			skip
#endif
		fi;
		live[x] = 0;
		if
		:: fail && HAS(ddead, x) -> printf("w%d: d%d buried, attempts %d\n", w, x, datt[x])
		:: fail && !HAS(ddead, x) -> printf("w%d: d%d rescheduled, attempts %d\n", w, x, datt[x])
		:: else -> printf("w%d: d%d released, attempts %d\n", w, x, datt[x])
		fi;
		CHECK_ATT(x) SYNC
	:: else -> printf("w%d: d%d end of attempt: false (lease lost)\n", w, x)
	fi;
	free_slot(s); x = 0; y = 0;
	CHECK_INV
}
#define ENDOK(s) (lw[LANE(sd[s])] == 0 && dlk[sd[s]] == 0)

/* The handler runs while the slot is HELD, for any length of time; its
 * outcome is one of the options below, each starting with the first
 * statement of what the dispatcher does next. */
#ifdef POISON
#define NOTP(s) sd[s] != PID &&
#define NOTHOLDINGP ((sph[0] == FREE || sd[0] != PID) && (sph[1] == FREE || sd[1] != PID))
#define POISONRUN(s) \
	:: atomic { sph[s] == HELD && STARTOK(s) && sd[s] == PID -> ISOLATED(s); startedP++; printf("w%d: poison d%d runs\n", w, PID); crash(1) }
#else
#define NOTP(s)
#define NOTHOLDINGP true
#define POISONRUN(s)
#endif
#define OUTCOMES(s) \
	POISONRUN(s) \
	:: atomic { sph[s] == HELD && STARTOK(s) && NOTP(s) !HAS(TXM, sd[s]) -> PLAIN(s) } \
	:: atomic { sph[s] == HELD && STARTOK(s) && NOTP(s) HAS(TXM, sd[s]) && UP && TCLOCKOK(s) && dlk[sd[s]] == 0 -> TXSTART(s) } \
	:: atomic { sph[s] == HELD && STARTOK(s) && NOTP(s) HAS(FAILM, sd[s]) && ENDOK(s) -> end_attempt(s, 1) }
#define TXROLLBACK(s) \
	:: atomic { sph[s] == TC4 && UP && HAS(FAILM, sd[s]) -> tc_rollback(s); sph[s] = RSW } \
	:: atomic { sph[s] == RSW && ENDOK(s) -> end_attempt(s, 1) }

/* plain success: the DELETE's snapshot of the lane */
#define PLAIN(s) printf("w%d: d%d handler done, plain completion: snapshot of lane\n", w, sd[s]); sok[s] = (lep[LANE(sd[s])] == sep[s] && HAS(lif[LANE(sd[s])], sd[s])); sph[s] = PC2
#ifdef TX_NOLOCK
#define TXSTART(s) printf("w%d: d%d handler done, transactional completion (no lane lock)\n", w, sd[s]); sph[s] = TC2
#else
/* FOR KEY SHARE on the lane, check, DELETE: one step, because nothing
 * can change the fence while the lane is share-locked (a takeover needs
 * FOR UPDATE; the holder's own writes keep a live delivery in in_flight) */
#define TXSTART(s) printf("w%d: d%d handler done, transactional completion: FOR KEY SHARE\n", w, sd[s]); TCLOCK(s); tc_check(s); if :: sph[s] == TC3 -> tc_delete(s) :: else -> skip fi
#endif

#define SLOT(s) \
	OUTCOMES(s) \
	:: atomic { sph[s] == HELD && stopping && ENDOK(s) -> end_attempt(s, 0) } \
	:: atomic { sph[s] == PC2 && UP && dlk[sd[s]] == 0 -> plain_commit(s) } \
	:: atomic { sph[s] == TC2 && UP -> tc_check(s) } \
	:: atomic { sph[s] == TC3 && UP && dlk[sd[s]] == 0 -> tc_delete(s) } \
	:: atomic { sph[s] == TC4 && UP -> tc_commit(s) } \
	TXROLLBACK(s) \
	RETRY(s) \


#ifdef DBCRASH
/* a plain completion whose statement failed is sent again: a new snapshot */
#define RETRY(s) :: atomic { sph[s] == PC1 -> PLAIN(s) }

/* The server crashes: what was not flushed is lost, every transaction
 * is aborted (no lock survives), every worker's statements in progress
 * fail (dbab: each worker learns it at its next step, dbabort). */
inline dbcrash() {
	REVERT;
#ifdef ASYNC_CLAIM
	unfl = 0;
#endif
	lw[0] = 0; lw[1] = 0; lupd = 0; lks[0] = 0; lks[1] = 0;
	dlk[0] = 0; dlk[1] = 0; dlk[2] = 0; dlk[3] = 0; dlk[4] = 0;
	dbab = B(NW) - 1;
	printf("SERVER CRASH: unflushed commits lost\n");
	CHECK_INV
}

/* A worker learns of the crash: its claim in progress fails (nothing
 * returned), a plain completion is sent again, and a transactional
 * handler's transaction is gone (the handler's next statement or the
 * commit fails: the dispatcher reschedules, fenced). */
inline dbslot(s) {
	if
	:: sph[s] == PC2 -> sph[s] = PC1
	:: sph[s] == TC2 || sph[s] == TC3 || sph[s] == TC4 || sph[s] == HELD && HAS(TXM, sd[s]) -> sph[s] = RSW
	:: else -> skip
	fi
}
inline dbabort() {
	if
	:: cph == 4 || cph == 5 -> printf("w%d: claim failed (server crash)\n", w)
	:: else -> skip
	fi;
	cph = 0; own = 0; tk = 0; ab = 0; chg = 0; cand = 0;
	dbslot(0); dbslot(1);
	dbab = dbab & ~B(w)
}
#else
#define RETRY(s)
#endif

/* OwnerRelinquish, one lane: release what is in flight, hand it back */
#define RELQ(l) (MINE(l) && lw[l] == 0 && ROWSFREE(lif[l]))
inline relinquish(l) {
	for (x : 0 .. ND - 1) {
		if
		:: HAS(lif[l] & PEND, x) -> dcl[x]++; live[x] = 0
		:: else -> skip
		fi
	};
	x = 0;
	lown[l] = 0; lhold[l] = 0; lif[l] = 0; lexp = lexp & ~B(l);
	printf("w%d: relinquishes lane %d\n", w, l) SYNC;
	CHECK_INV
}

proctype Worker(byte w) {
	byte cph, own, tk, ab, chg, cand, picks, rest, dies, pv, nl, x, y;
	byte sd[NS], sep[NS], scl[NS], sph[NS];
	bit ssus[NS], sok[NS];
	bit stopping;
	bit drain;      /* a suspect waits: claim again only when idle */
#ifdef DBCRASH
	bit rlost;      /* this claim's reply is lost */
#endif

end_w:
	do
	/* ---- DeliveryClaim: one transaction in two steps ----
	 * Step A takes every lock and reads: own lanes FOR NO KEY UPDATE
	 * (waits while another transaction holds a conflicting lock), their
	 * candidates, and, when those do not fill the free slots, free or
	 * abandoned lanes with due work FOR UPDATE SKIP LOCKED, whose in_flight
	 * rows still pending are charged (UPDATE: waits for each row lock, then
	 * re-checks the row). Step B picks, records and commits. Between the
	 * two the locks are held and every other process runs. */
	:: atomic { cph == 0 && UP && !stopping && FREESLOTS > 0 && !HOLDS_SUSPECT && (!drain || FREESLOTS == NS) && WORK &&
	            (!OWNLIVE(0) || lw[0] == 0) && (!OWNLIVE(1) || lw[1] == 0) ->
		drain = 0;
		own = (OWNLIVE(0) -> B(0) : 0) | (OWNLIVE(1) -> B(1) : 0);
		for (x : 0 .. NL - 1) {
			if
			:: HAS(own, x) -> lw[x] = TXC
			:: else -> skip
			fi
		};
		cand = ((HAS(own, 0) -> OWNCANDS(0) : 0) | (HAS(own, 1) -> OWNCANDS(1) : 0));
		if
		:: POP5(cand) < FREESLOTS ->
			for (x : 0 .. NL - 1) {
				if
				:: !HAS(own, x) && TAKEABLE(x) && DUE(x) && lw[x] == 0 && lks[x] == 0 ->
					tk = tk | B(x); lw[x] = TXC; lupd = lupd | B(x);
					if
					:: lown[x] != 0 -> ab = ab | B(x)
					:: else -> skip
					fi
				:: else -> skip
				fi
			};
			x = 0;
			cph = 4
		:: else -> cph = 5
		fi }
	/* the takeover's charge UPDATE waits for the rows' locks */
	:: atomic { cph == 4 && UP && ROWSFREE((HAS(ab, 0) -> lif[0] : 0) | (HAS(ab, 1) -> lif[1] : 0)) ->
		chg = ((HAS(ab, 0) -> lif[0] : 0) | (HAS(ab, 1) -> lif[1] : 0)) & PEND;
		for (x : 0 .. ND - 1) {
			if
			:: HAS(chg, x) -> dlk[x] = TXC
			:: else -> skip
			fi
		};
		x = 0; cph = 5 }
	/* step B: candidates of taken lanes, suspects alone, record, commit */
	:: atomic { cph == 5 && UP ->
		for (x : 0 .. ND - 1) {
			if
			:: HAS(chg, x) && datt[x] + 1 >= MAXATT && BURYOK(x) -> dies = dies | B(x)
			:: else -> skip
			fi
		};
		pv = PEND & ~dies;
		cand = cand | (((HAS(tk, 0) -> LMASK(0) : 0) | (HAS(tk, 1) -> LMASK(1) : 0)) & pv & PREDOK(pv));
		/* the oldest candidate: any (available_at is abstracted) */
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
			:: HAS(dsus | chg, x) && SUSPECTOK -> rest = 0   /* a suspect runs alone */
			:: HAS(dsus | chg, x) && !SUSPECTOK ->
				/* the oldest is a suspect and the caller is busy: nothing;
				 * the dispatcher stops claiming until it is idle */
				picks = 0; rest = 0; drain = 1
			:: else -> rest = cand & ~B(x) & ~(dsus | chg)
			fi;
#endif
			/* up to the free slots */
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
		/* the takeover's charges: attempts + 1, claims + 1, suspect, dead
		 * when the budget is spent */
		for (x : 0 .. ND - 1) {
			if
			:: HAS(chg, x) ->
				datt[x]++;
#ifndef NOCLAIMS
				dcl[x]++;
#endif
				if
				:: datt[x] >= MAXATT && BURYOK(x) -> ddead = ddead | B(x); ON_DEAD(x)
				:: else -> skip
				fi;
				dsus = dsus | B(x);
				dlk[x] = 0;
				if
				:: live[x] != 0 -> gatt[x]++; live[x] = 0
				:: else -> skip
				fi;
				CHECK_ATT(x)
			:: else -> skip
			fi
		};
		if
		:: tk != 0 -> printf("w%d: takes lanes %d (abandoned %d), charges deliveries %d (masks)\n", w, tk, ab, chg)
		:: else -> skip
		fi;
		/* record: one write per locked lane; hand back what runs nothing */
		for (x : 0 .. NL - 1) {
			if
			:: HAS(own | tk, x) ->
				nl = (HAS(ab, x) -> 0 : (lif[x] & PEND)) | (picks & LMASK(x));
#ifndef NOEPOCH
				if
				:: HAS(tk, x) -> lep[x]++
				:: else -> skip
				fi;
#endif
				if
				:: nl == 0 -> lown[x] = 0; lhold[x] = 0
				:: else -> lown[x] = w + 1; lhold[x] = inc[w]
				fi;
				lif[x] = nl; lexp = lexp & ~B(x);
				lw[x] = 0; lupd = lupd & ~B(x)
			:: else -> skip
			fi
		};
#ifdef DBCRASH
		/* the server may crash once this commit is durable, before its
		 * reply reaches the worker: the claim returns an error */
		if
		:: dbcrashes > 0 && picks != 0 -> rlost = 1
		:: true
		fi;
#endif
		/* return the picks: token lane:epoch:claims */
		for (x : 0 .. ND - 1) {
			if
#ifdef DBCRASH
			:: HAS(picks, x) && rlost ->
				assert(live[x] == 0);
				printf("w%d: claims d%d: reply lost\n", w, x);
				live[x] = LOSTC
			:: HAS(picks, x) && !rlost ->
#else
			:: HAS(picks, x) ->
#endif
				assert(live[x] == 0);   /* one live claim per delivery */
				ISSUE(x)
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
		x = 0; y = 0; cph = 0; own = 0; tk = 0; ab = 0; chg = 0; cand = 0;
		picks = 0; rest = 0; dies = 0; pv = 0; nl = 0 CLAIM_COMMIT;
#ifdef DBCRASH
		if
		:: rlost -> rlost = 0; dbcrashes--; dbcrash()
		:: else -> skip
		fi;
#endif
		CHECK_INV }

	/* ---- handler slots ---- */
	SLOT(0)
	SLOT(1)

	/* ---- LeaseExtend ---- */
	:: atomic { RENEWABLE(0) || RENEWABLE(1) ->
		if
		:: RENEWABLE(0) -> lexp = lexp & ~B(0); printf("w%d: renews lane 0\n", w)
		:: else -> skip
		fi;
		if
		:: RENEWABLE(1) -> lexp = lexp & ~B(1); printf("w%d: renews lane 1\n", w)
		:: else -> skip
		fi SYNC }

	/* ---- graceful stop: release unstarted work, relinquish, restart ---- */
	:: atomic { !stopping && stops > 0 && cph == 0 -> stopping = 1; stops--; printf("w%d: graceful stop\n", w) }
	:: atomic { stopping && sph[0] == FREE && sph[1] == FREE && cph == 0 && RELQ(0) -> relinquish(0) }
	:: atomic { stopping && sph[0] == FREE && sph[1] == FREE && cph == 0 && RELQ(1) -> relinquish(1) }
	:: atomic { stopping && sph[0] == FREE && sph[1] == FREE && cph == 0 && !MINE(0) && !MINE(1) ->
		stopping = 0; inc[w]++ }

#ifdef DBCRASH
	/* ---- the worker learns that the server crashed ---- */
	:: atomic { HAS(dbab, w) -> dbabort() }
#endif

	/* ---- crash at any step (worker 0; the workers are symmetric) ---- */
	:: atomic { w == 0 && crashes > 0 && NOTHOLDINGP -> crashes--; crash(0) }
	od
}

/* Time: a lease expires when its holder is dead (no one renews it), or,
 * NSPUR times, while its holder is alive but too slow to renew. */
#define EXPIRABLE(l) (lown[l] != 0 && !HAS(lexp, l) && (DEADHOLDER(l) || spurious > 0 || ORPHL(l)))
#ifdef DBCRASH
/* time passes for the rows on disk too; a lease also expires when nobody
 * holds its token (a claim whose reply was lost) */
#define EXPIRE(l) if \
	:: !DEADHOLDER(l) && !ORPHL(l) -> spurious--; printf("lane %d: lease expires (holder alive but slow)\n", l) \
	:: !DEADHOLDER(l) && ORPHL(l) -> printf("lane %d: lease expires (a claim's reply was lost: nobody renews)\n", l) \
	:: else -> printf("lane %d: lease expires (holder dead)\n", l) \
	fi; lexp = lexp | B(l); dur.lexp = dur.lexp | B(l)
#else
#define EXPIRE(l) if :: !DEADHOLDER(l) -> spurious--; printf("lane %d: lease expires (holder alive but slow)\n", l) :: else -> printf("lane %d: lease expires (holder dead)\n", l) fi; lexp = lexp | B(l)
#endif
proctype Env() {
end_env:
	do
	:: atomic { EXPIRABLE(0) -> EXPIRE(0) }
	:: atomic { EXPIRABLE(1) -> EXPIRE(1) }
#ifdef DBCRASH
	:: atomic { dbcrashes > 0 -> dbcrashes--; dbcrash() }
#endif
#ifdef ASYNC_CLAIM
	:: atomic { unfl -> FLUSHALL; unfl = 0; printf("WAL writer: flush\n") }
#endif
	od
}

/* P7: blocked here (an invalid end state) if the system stops before
 * every delivery is completed or dead */
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
