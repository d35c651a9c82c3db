#!/usr/bin/env bash
# Model-check the queue protocol (queue.pml) with spin: the real protocol in
# each world must pass (no assertion violated, no invalid end state); each
# control must fail, so the model is known to be able to fail. Exits non-zero
# on any surprise. Needs spin and a C compiler.
set -euo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp queue.pml "$work/"
cd "$work"

# check NAME WANT FLAGS...: WANT is pass or fail.
status=0
check() {
	local name=$1 want=$2
	shift 2
	spin -a "$@" queue.pml >/dev/null
	gcc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=16000 -o pan pan.c
	local out
	out=$(./pan -m100000 2>&1 || true)
	local errors
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out")
	local states depth secs
	states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' <<<"$out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' <<<"$out")
	secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds/\1/p' <<<"$out")
	local what
	what=$(grep -m1 -E '^pan:[0-9]+: ' <<<"$out" | sed 's/^pan:[0-9]*: //' || true)
	if [[ -z $errors ]] || grep -q "max search depth too small\|out of memory" <<<"$out"; then
		echo "FAIL $name: the search did not complete"
		echo "$out" | tail -20
		status=1
		return
	fi
	local got=pass
	((errors == 0)) || got=fail
	printf '%-4s %-34s states=%-10s depth=%-4s time=%ss %s\n' \
		"$([[ $got == "$want" ]] && echo ok || echo FAIL)" "$name" "$states" "$depth" "$secs" \
		"${what:+($what)}"
	if [[ $got != "$want" ]]; then
		status=1
		[[ $got == fail ]] && spin -t -p "$@" queue.pml | tail -60
	fi
	if [[ $got == fail && $want == fail && -n ${TRAILS:-} ]]; then
		spin -t -p "$@" queue.pml >"$TRAILS/${name//\//_}.trail.txt" 2>&1 || true
	fi
}

only_enq=(-DREL_FAULTS=0 -DWATCH_FAULTS=0)
only_rel=(-DENQ_FAULTS=0 -DWATCH_FAULTS=0)
only_watch=(-DENQ_FAULTS=0 -DREL_FAULTS=0)

# The real protocol: Mutex (1 permit) and semaphore (2 permits), each fault
# class in its own world (together they exceed the machine's memory), each
# with one session expiry and one cancel.
for p in 1 2; do
	kind=mutex
	((p == 1)) || kind=semaphore
	# (the semaphore's with one attempt per client: two exceed 24 GiB)
	check "$kind/late-or-twice-enqueue" pass -DPERMITS=$p "${only_enq[@]}" $( ((p == 1)) || echo -DATTEMPTS0=1)
	check "$kind/unknown-release" pass -DPERMITS=$p "${only_rel[@]}"
	check "$kind/broken-watch" pass -DPERMITS=$p "${only_watch[@]}"
done

# Controls: each must find its violation.
check control/no-epoch-no-sweep fail -DNO_EPOCH -DNO_SWEEP -DNO_DUP "${only_enq[@]}"
check control/epoch-alone-no-dup pass -DNO_SWEEP -DNO_DUP "${only_enq[@]}"
check control/no-sweep fail -DNO_SWEEP "${only_enq[@]}"
check control/unguarded-delete fail -DUNGUARDED_DELETE "${only_rel[@]}"
check control/break-check fail -DBREAK_CHECK "${only_watch[@]}"
check control/semaphore-unguarded fail -DPERMITS=2 -DUNGUARDED_DELETE "${only_rel[@]}"

exit $status
