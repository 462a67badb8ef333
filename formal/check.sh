#!/usr/bin/env bash
# Model-checks formal/perkey.pml with Spin: the real protocol must verify
# with no errors, and each broken variant must violate the property it
# is meant to break. Exits non-zero otherwise. Needs spin and cc.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v spin >/dev/null 2>&1; then
	echo "check.sh: spin is not installed (Debian: apt-get install -y spin)" >&2
	exit 2
fi
if ! command -v cc >/dev/null 2>&1; then
	echo "check.sh: no C compiler (cc) to build Spin's verifier" >&2
	exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# name | spin flags | expected outcome: "ok" or a pattern the error must match
runs=(
	"real|                     |ok"
	"no-busy-guard|-DNOBUSY    |assertion violated \\(busy\\[k\\]==1\\)"
	"no-busy-guard-order|-DNOBUSY -DNO_P1|assertion violated \\(seqOf\\[b0\\]>lastDone\\[k\\]\\)"
	"split-take|-DSPLIT_TAKE   |assertion violated \\(busy\\[k\\]==1\\)"
	"split-admit|-DSPLIT_ADMIT |invalid end state"
)
declare -A property=(
	[real]="P1-P4 hold"
	[no-busy-guard]="P1 one batch per key"
	[no-busy-guard-order]="P2 per-key order"
	[split-take]="P1 one batch per key"
	[split-admit]="P3 no stranded caller"
)

failed=0
printf '%-22s %-26s %-24s %-10s %-8s %s\n' variant flags expected errors states verdict
for r in "${runs[@]}"; do
	IFS='|' read -r name flags expect <<<"$r"
	flags="$(sed 's/^ *//; s/ *$//' <<<"$flags")"
	expect="$(sed 's/^ *//; s/ *$//' <<<"$expect")"
	dir="$work/$name"
	mkdir -p "$dir"
	(
		cd "$dir"
		# shellcheck disable=SC2086 # flags are words
		spin $flags -a "$here/perkey.pml" >spin.log 2>&1
		cc -O2 -w -DSAFETY -o pan pan.c >cc.log 2>&1
		./pan -m100000 >pan.log 2>&1 || true
	) || { echo "$name: spin or cc failed:"; cat "$dir"/*.log; failed=1; continue; }
	errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/pan.log" | head -1)"
	states="$(awk '/states, stored/ {print $1; exit}' "$dir/pan.log")"
	first="$(grep -m1 -E '^pan:[0-9]+: ' "$dir/pan.log" || true)"
	verdict=PASS
	if [ -z "$errors" ]; then
		verdict="FAIL (no result)"
	elif [ "$expect" = ok ]; then
		[ "$errors" = 0 ] || verdict="FAIL: $first"
	else
		if [ "$errors" = 0 ]; then
			verdict="FAIL: broken variant verified"
		elif ! grep -qE "$expect" <<<"$first"; then
			verdict="FAIL: wrong violation: $first"
		fi
	fi
	[ "$verdict" = PASS ] || failed=1
	printf '%-22s %-26s %-24s %-10s %-8s %s\n' "$name" "${flags:--}" "${property[$name]}" "${errors:-?}" "${states:-?}" "$verdict"
done

if [ "$failed" != 0 ]; then
	echo "check.sh: FAILED" >&2
	exit 1
fi
echo "check.sh: real model verified; every broken variant violates its property"
