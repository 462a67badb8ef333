/*
 * Per-key batching protocol (docs/adr/0001-per-key-batching.md) as implemented by relaybus/batch.
 *
 * NI callers submit one input each (inputs 0, 1 and 3 share key 0, input
 * 2 has key 1); NW workers take batches of up to MAXB inputs of one key;
 * a closer stops admission and either lets the work finish or gives up
 * and releases every caller still waiting.
 *
 * Each `atomic` block is one critical section of PerKey.mu in the Go
 * code. Variants, selected with -D, break one of the atomic steps:
 *   -DNOBUSY       a worker may take a lane whose batch is in flight
 *   -DSPLIT_TAKE   "lane is free" is checked, and the lane taken and
 *                  marked busy, in two separate steps
 *   -DSPLIT_ADMIT  Submit checks "open" and enqueues in two steps
 *   -DNO_P1        do not assert P1 (with -DNOBUSY: shows P2 breaks too)
 *   -DNW=n         n workers (default 2)
 *
 * Properties:
 *   P1 one batch per key: assert busy[k] == 1 right after a take
 *   P2 per-key order: a completing batch starts after the last completed
 *      one of its key (sequence numbers are admission order)
 *   P3 no stranded caller: every caller ends with a result, a close
 *      error or a refusal; a caller left waiting is an invalid end state
 *   P4 exactly one answer per caller: assert at delivery
 */

#ifndef NW
#define NW 2
#endif
#define NK 2
#define NI 4
#define MAXB 2

#define NEW      0
#define QUEUED   1
#define INFLIGHT 2
#define DONE     3
#define CLOSEDERR 4
#define REFUSED  5

typedef Lane { byte item[NI]; byte head; byte tail };
Lane lane[NK];
byte keyOf[NI];
byte seqOf[NI];
byte status[NI];
byte answers[NI];
byte busy[NK];
byte lastDone[NK];
byte nextSeq = 1;
byte queued = 0;
bool open = true;

#define NONEMPTY(k) (lane[k].head < lane[k].tail)
#ifdef NOBUSY
#define FREE(k) true
#else
#define FREE(k) (busy[k] == 0)
#endif

inline enqueue(i, k) {
	lane[k].item[lane[k].tail] = i;
	lane[k].tail++;
	seqOf[i] = nextSeq;
	nextSeq++;
	status[i] = QUEUED;
	queued++
}

inline answer(i, s) {
	if
	:: status[i] == QUEUED || status[i] == INFLIGHT ->
		status[i] = s;
		answers[i]++;
		assert(answers[i] == 1)   /* P4 */
	:: else -> skip   /* already answered by a giving-up Close */
	fi
}

proctype Submitter(byte i) {
	byte k = keyOf[i];
#ifdef SPLIT_ADMIT
	bool ok;
	atomic { ok = open };
	if
	:: ok -> atomic { enqueue(i, k) }
	:: else -> status[i] = REFUSED
	fi;
#else
	atomic {
		if
		:: open -> enqueue(i, k)
		:: else -> status[i] = REFUSED
		fi
	};
#endif
	/* Wait for the one answer. Blocking here forever is P3's violation. */
	(status[i] == DONE || status[i] == CLOSEDERR || status[i] == REFUSED)
}

/* Take the next batch (up to MAXB inputs) from lane k and mark it busy. */
inline take(k) {
	b0 = lane[k].item[lane[k].head];
	lane[k].head++;
	status[b0] = INFLIGHT;
	queued--;
	n = 1;
	if
	:: NONEMPTY(k) ->
		b1 = lane[k].item[lane[k].head];
		lane[k].head++;
		status[b1] = INFLIGHT;
		queued--;
		n = 2
	:: else -> skip
	fi;
	busy[k]++;
#ifndef NO_P1
	assert(busy[k] == 1)   /* P1 */
#else
	skip   /* P1 unchecked, to show -DNOBUSY also breaks P2 */
#endif
}

/* Batch k has run: check order, answer its callers, unmark busy. The
 * batch function itself runs before this, outside any lock, so other
 * processes interleave with it. */
inline complete(k) {
	atomic {
		assert(seqOf[b0] > lastDone[k]);   /* P2 */
		lastDone[k] = seqOf[b0];
		answer(b0, DONE);
		if
		:: n == 2 -> lastDone[k] = seqOf[b1]; answer(b1, DONE)
		:: else -> skip
		fi;
		busy[k]--
	}
}

proctype Worker() {
	byte k, n, b0, b1;
end_idle:
	do
	/* A worker may pick any free non-empty lane: the Go code serves the
	 * ready line in order, which is one of these choices, so what holds
	 * for every choice holds for it. */
#ifdef SPLIT_TAKE
	:: atomic { NONEMPTY(0) && FREE(0) -> k = 0 };
	   atomic { if :: NONEMPTY(k) -> take(k) :: else -> goto end_idle fi };
	   complete(k)
	:: atomic { NONEMPTY(1) && FREE(1) -> k = 1 };
	   atomic { if :: NONEMPTY(k) -> take(k) :: else -> goto end_idle fi };
	   complete(k)
#else
	:: atomic { NONEMPTY(0) && FREE(0) -> k = 0; take(k) }; complete(k)
	:: atomic { NONEMPTY(1) && FREE(1) -> k = 1; take(k) }; complete(k)
#endif
	:: !open && queued == 0 -> break
	od
}

/* Close: stop admission; then either wait (the workers drain every lane
 * and exit) or give up at once, as when Close's context ends: every
 * caller still waiting, queued or in flight, gets a close error. */
proctype Closer() {
	byte i, k;
	open = false;
	if
	:: skip
	:: atomic {
		for (i : 0 .. NI - 1) {
			answer(i, CLOSEDERR)
		}
		for (k : 0 .. NK - 1) {
			lane[k].head = lane[k].tail
		}
		queued = 0
	   }
	fi
}

init {
	byte i;
	atomic {
		keyOf[0] = 0; keyOf[1] = 0; keyOf[2] = 1; keyOf[3] = 0;
		for (i : 0 .. NI - 1) {
			run Submitter(i)
		}
		for (i : 1 .. NW) {
			run Worker()
		}
		run Closer()
	}
}
