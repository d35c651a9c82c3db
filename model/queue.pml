/*
 * dlock's etcd queue protocol (internal/queue), modelled for spin.
 *
 * One linearizable store with revisions and leases (etcd), three clients,
 * each on a session of its own, each making up to ATTEMPTS acquires of one
 * lock name. PERMITS 1 is the Mutex (queue.Exclusive: a waiter watches its
 * predecessor); PERMITS 2 is a semaphore of 2 permits (queue.Shared: a
 * waiter counts the entries before it). Every step names the Go function it
 * stands for. What is abstracted away, and why, is in README.md.
 *
 * Switches (spin -D...):
 *   NO_EPOCH          the enqueue does not compare the session's epoch;
 *                     with NO_SWEEP too, must find the late-enqueue stall
 *                     (with the sweep it lasts one heartbeat, no stall)
 *   NO_SWEEP          the heartbeat does not delete strays (keys of the
 *                     session under names no attempt holds): must find the
 *                     stall of an enqueue applied twice, the second copy
 *                     after the attempt's Release
 *   UNGUARDED_DELETE  Release deletes the key by name, not guarded by its
 *                     create revision: must find the stale-Unlock double
 *                     grant (etcd issue #22082)
 *   NO_DUP            no enqueue is applied twice (only unknown outcomes):
 *                     the world of the NO_EPOCH control
 *   BREAK_CHECK       a deliberate break: the waiter's check does not look
 *                     for a predecessor (grants itself when its own key
 *                     exists): must find a double grant
 */

#define N 3
#ifndef ATTEMPTS
#define ATTEMPTS 1 /* acquires of clients 1 and 2 */
#endif
#ifndef ATTEMPTS0
#define ATTEMPTS0 2 /* acquires of client 0 (a second attempt reuses the key name) */
#endif
#ifndef PERMITS
#define PERMITS 1
#endif
#ifndef ENQ_FAULTS
#define ENQ_FAULTS 1 /* enqueues with an unknown outcome, or applied and sent again */
#endif
#ifndef REL_FAULTS
#define REL_FAULTS 1 /* Releases with an unknown outcome (applied late, or not at all) */
#endif
#ifndef WATCH_FAULTS
#define WATCH_FAULTS 1 /* watches that break */
#endif
#ifndef EXPIRIES
#define EXPIRIES 1 /* sessions whose local deadline fires (then the lease expires) */
#endif
#ifndef CANCELS
#define CANCELS 1  /* waiters whose ctx ends */
#endif

/* ---- etcd: one store, linearizable ---- */
byte rev = 1;      /* the store's revision */
byte crev[N];      /* client i's queue key (sequential attempts of a session reuse one name, state.reserveName): create revision, 0 absent */
byte erev[N];      /* client i's epoch key for the queue (Queue.epochKey): mod revision, 0 absent */
bool lease[N];     /* client i's lease exists on the server */

/* ---- requests in flight: applied late, or a second time ---- */
bool penq[N];      /* an enqueue Txn of client i not yet applied */
byte penqE[N];     /* the epoch it compares */
bool prel[N];      /* a Release delete of client i not yet applied */
byte prelR[N];     /* the create revision it is guarded by */

/* ---- the clients' view ---- */
bool late[N];      /* client i's session passed its local deadline (session.Session's Done) */
bool cs[N];        /* client i acts as holder */
bool busy[N];      /* client i's key name is held by an attempt (state.reserveName until state.freeSlot) */
byte lastTok;      /* the token of the latest grant */

byte enqFaults = ENQ_FAULTS;
byte relFaults = REL_FAULTS;
byte watchFaults = WATCH_FAULTS;
byte expiries = EXPIRIES;
byte cancels = CANCELS;

#ifdef NO_EPOCH
#define EPOCH_OK(i, e) true
#else
#define EPOCH_OK(i, e) (erev[i] == e)
#endif


#ifdef UNGUARDED_DELETE
#define OWNED(i, r)    (crev[i] != 0)
#else
#define OWNED(i, r)    (crev[i] == r)   /* entry.Owned: CreateRevision(key) = r */
#endif

/*
 * The enqueue Txn (Queue.enqueue): If(the key name is free, the session's
 * epoch unmoved) Then(the rule's reads, put the key with the lease, move
 * A put under a lease that is gone fails the whole Txn.
 */
inline enqueueTxn(i, e, ok) {
	if
	:: lease[i] && crev[i] == 0 && EPOCH_OK(i, e) ->
		rev++; crev[i] = rev; ok = true
	:: else -> ok = false
	fi
}

/* The entry created last before revision r (the Exclusive rule's read, Queue.readPredecessor): pc its client, pr its revision (0: none). */
inline lastBefore(r, pc, pr) {
	pr = 0; pc = 0; j = 0;
	do
	:: j < N ->
		if
		:: crev[j] != 0 && crev[j] < r && crev[j] > pr -> pr = crev[j]; pc = j
		:: else
		fi;
		j++
	:: else -> break
	od;
	j = 0
}

/* Entries created before revision r (the Shared rule's count: the enqueue's
   count read, then Queue.watchCount's count of deletions). */
#define B(k, r) ((crev[k] != 0 && crev[k] < r) -> 1 : 0)
#define BEFORE(r) (B(0, r) + B(1, r) + B(2, r))

/*
 * The grant (Queue.Acquire → newHold): refused if the session ended first
 * (a holder told of its grant whose session then ends is not counted).
 * Exclusion: among holders whose session has not passed its local deadline,
 * at most PERMITS. Tokens (create revisions) of successive Mutex grants
 * strictly increase.
 */
inline grant(i, r, ok) {
	d_step {
		if
		:: late[i] -> ok = false
		:: else ->
			ok = true;
			cs[i] = true;
			c = 0; j = 0;
			do
			:: j < N -> if :: cs[j] && !late[j] -> c++ :: else fi; j++
			:: else -> break
			od;
			j = 0;
			assert(c <= PERMITS);
			if
			:: PERMITS == 1 -> assert(r > lastTok)
			:: else
			fi;
			lastTok = r;
			c = 0
		fi
	}
}

proctype client(byte i) {
	byte a = 0;     /* attempts made */
	byte e = 0;     /* the epoch this session believes (state.epoch) */
	byte r = 0;     /* this attempt's create revision: its token */
	byte pc = 0, pr = 0; /* the predecessor watched (client, create revision) */
	byte tries = 0;
	byte pe = 0;    /* the epoch the last enqueue compared */
	byte c = 0, j = 0;
	bool ok = false;

	/* Each etcd request is one atomic step, together with the client's
	   local bookkeeping around it (d_step: no interleaving inside). */
next:
	c = 0;
	if
	:: d_step { a < (i == 0 -> ATTEMPTS0 : ATTEMPTS) && !late[i] -> a++; busy[i] = true; r = 0; pc = 0; pr = 0; tries = 0; ok = false; pe = 0 }
	:: true -> goto idle   /* the client stops using the lock */
	fi;

enqueue: /* Queue.enqueue */
	c = 0;
	if
	:: d_step { enqFaults > 0 && !penq[i] -> enqFaults--;
		/* the Txn's outcome is unknown (a timeout): it stays in flight */
		penq[i] = true; penqE[i] = e };
		goto abandonUnknown
	:: d_step { true -> pe = e; enqueueTxn(i, e, ok);
		if
		:: ok -> r = crev[i]
		:: else
		fi };
		if
#ifndef NO_DUP
		:: d_step { ok && enqFaults > 0 && !penq[i] -> enqFaults--;
			/* applied, and a copy sent again by etcd's client retry is in flight */
			penq[i] = true; penqE[i] = pe }
#endif
		:: ok -> pe = 0
		:: else -> /* why the compare failed, read in a second request */
			d_step { e = erev[i]; /* Queue.adoptEpoch */
				if
				:: crev[i] != 0 -> crev[i] = 0 /* Queue.removeStray: our own stray, guarded by its revision (the one read) */
				:: else
				fi;
				tries++ };
			if
			:: tries < 2 -> goto enqueue
			:: else -> busy[i] = false; goto next /* errNoProgress */
			fi
		fi
	fi;

wait:
#if PERMITS == 1
	/* Exclusive.wait → Queue.waitFirst: the enqueue's read, then a check after each deletion */
	d_step { lastBefore(r, pc, pr) };
	do
	:: pr == 0 -> break
	:: else ->
		if
		:: crev[pc] != pr -> skip  /* Queue.waitDelete: the predecessor's key was deleted */
		:: d_step { watchFaults > 0 -> watchFaults-- } /* the watch broke: re-read */
		:: late[i] -> goto ended  /* bind: the acquire stops when the session ends */
		:: d_step { cancels > 0 -> cancels-- }; goto abandon
		fi;
		if
		:: crev[i] != r -> goto abandon /* Queue.readPredecessor: ErrEntryGone (one request with the next step) */
		:: else ->
#ifdef BREAK_CHECK
			pr = 0
#else
			d_step { lastBefore(r, pc, pr) } /* Queue.readPredecessor: the last entry created before ours */
#endif
		fi
	od;
#else
	/* Shared.wait → Queue.waitShared: the enqueue's count, then counts from the watch of the queue */
	do
	:: BEFORE(r) < PERMITS -> break
	:: d_step { watchFaults > 0 -> watchFaults-- }  /* the watch broke: count again */
	:: late[i] -> goto ended
	:: d_step { cancels > 0 -> cancels-- }; goto abandon
	od;
	if
	:: crev[i] != r -> goto abandon /* Queue.readHolders: ErrEntryGone */
	:: else
	fi;
#endif
	grant(i, r, ok);  /* Queue.Acquire: newHold, then h.Err(): refused once the session ended */
	if
	:: !ok -> goto ended
	:: else
	fi;

hold:
	/* The holder acts until it releases or learns that its session ended (Hold.Done). */
	if
	:: cs[i] = false
	:: late[i] -> cs[i] = false; goto idle
	fi;

release:
	c = 0; /* Hold.Release → Queue.leave → Queue.remove: delete guarded by the create revision */
	if
	:: d_step { relFaults > 0 && !prel[i] -> relFaults--; prel[i] = true; prelR[i] = r };
		/* unknown outcome: the caller retries Release */
		goto release
	:: d_step { true ->
		if
		:: OWNED(i, r) -> crev[i] = 0
		:: else
		fi;
		busy[i] = false }
	fi;
	goto next;

abandonUnknown:
	c = 0;
	/* Queue.abandon(unknown): one Txn deletes the key and moves the epoch;
	   nothing is sent once the session ended (the lease removes the key) */
	d_step {
		if
		:: late[i] || !lease[i]
		:: else -> rev++; crev[i] = 0; erev[i] = rev; e = rev
		fi;
		busy[i] = false
	}
	goto next;

abandon: /* Queue.abandon after a cancel or ErrEntryGone: the key name is this attempt's alone */
	c = 0;
	d_step {
		if
		:: late[i]
		:: else -> crev[i] = 0
		fi;
		busy[i] = false
	}
	goto next;

ended:	/* ErrSessionEnded: the key goes with the lease */
idle:
end_idle:
	skip
}

/* A session's life: its local deadline fires (no heartbeat answered in
   time), later the server expires the lease and deletes its keys. */
proctype session(byte i) {
	if
	:: atomic { expiries > 0 -> expiries--; late[i] = true }
		atomic { lease[i] = false; crev[i] = 0; erev[i] = 0 }
	:: skip
	fi
end_session:
	skip
}

/* The heartbeat's check (state.Heartbeat → state.removeStrays): after each
   keepalive, delete the session's keys under names no attempt holds. */
proctype heartbeat(byte i) {
end_heartbeat:
	do
#ifndef NO_SWEEP
	:: d_step { lease[i] && !late[i] && !busy[i] && crev[i] != 0 -> crev[i] = 0 }
#endif
	:: false
	od
}

/* The network applies requests in flight, late, in any order. */
#define APPLY(i) \
	:: d_step { penq[i] -> penq[i] = false; enqueueTxn(i, penqE[i], ok); penqE[i] = 0; ok = false } \
	:: d_step { prel[i] -> prel[i] = false; if :: OWNED(i, prelR[i]) -> crev[i] = 0 :: else fi; prelR[i] = 0 }

proctype network() {
	bool ok;
end_network:
	do
	APPLY(0)
	APPLY(1)
	APPLY(2)
	od
}

init {
	atomic {
		lease[0] = true; lease[1] = true; lease[2] = true;
		run client(0); run client(1); run client(2);
		run session(0); run session(1); run session(2);
		run heartbeat(0); run heartbeat(1); run heartbeat(2);
		run network()
	}
}
