#!/usr/bin/env bash
# Model-checks the Spin models in formal/ (README.md says what each one
# models): every real model must verify with no error, each broken variant
# must fail with the violation it is meant to show, and a few variants are
# expected to verify (findings, explained in README.md). Exits 1 on any
# other outcome, 2 if spin or cc is missing. Needs spin and cc.
#
#   formal/check.sh            every row
#   formal/check.sh pg         rows whose name starts with "pg" (any prefix)
#   FORMAL_JOBS=2 formal/check.sh   two rows at a time (default 1)
#
# A row that must verify is compiled with -O1, a variant expected to fail
# (its search takes well under a second) with -O0: compiling pan.c costs
# more than the search otherwise.
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
only="${1:-}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The first violation Spin reports, by property (the numbers are those of
# lanes_pg.pml's header and README.md; K1-K3 are perkey.pml's; P8 is
# lanes_pg.pml's, with -DDBCRASH).
declare -A pat=(
	[K1]='assertion violated \(busy\[k\]==1\)'
	[K2]='assertion violated \(seqOf\[b0\]>lastDone\[k\]\)'
	[K3]='invalid end state'
	[P1]='assertion violated \(hw\[x\]<=1\)'
	[P2]='assertion violated \(live\[x\]==\(\(\(w\*2\)'
	[P3]='assertion violated \( !\(\(\(x==1\)\|\|\(x==3\)\)\)'
	[P4]='assertion violated \(datt\[x\]==gatt\[x\]\)'
	[P4b]='assertion violated \(live\[x\]==0\)'
	[P5]='assertion violated .*startedP=='
	[P5b]='assertion violated \( !\(ssus\['
	[P6]='assertion violated \(\(\(\(\(\(live\[0\]!=0\)'
	[P7]='invalid end state'
	[P7L]='acceptance cycle'
	[P8]='assertion violated \(\(\(lep\['
)

# name | model | spin flags | mode (perkey, safety, live) | expected: ok or a property above | what
runs=(
	"perkey|perkey.pml||perkey|ok|P1-P4 of perkey hold"
	"perkey-no-busy-guard|perkey.pml|-DNOBUSY|perkey|K1|P1 one batch per key"
	"perkey-no-busy-guard-order|perkey.pml|-DNOBUSY -DNO_P1|perkey|K2|P2 per-key order"
	"perkey-split-take|perkey.pml|-DSPLIT_TAKE|perkey|K1|P1 one batch per key"
	"perkey-split-admit|perkey.pml|-DSPLIT_ADMIT|perkey|K3|P3 no stranded caller"

	"pg-crash|lanes_pg.pml|-DCRASH|safety|ok|P1-P7 hold"
	"pg-slow-keys|lanes_pg.pml|-DSLOW -DDEX=15|safety|ok|P1-P7 hold"
	"pg-slow-lane|lanes_pg.pml|-DSLOW -DDEX=21|safety|ok|P1-P7 hold"
	"pg-stop|lanes_pg.pml|-DSTOP -DDEX=21|safety|ok|P1-P7 hold"
	"pg-poison|lanes_pg.pml|-DPOISON|safety|ok|P1-P7 hold"
	"pg-dbcrash-keys|lanes_pg.pml|-DDBCRASH -DDEX=15|safety|ok|P1-P8 hold"
	"pg-dbcrash-lane|lanes_pg.pml|-DDBCRASH -DDEX=21|safety|ok|P1-P8 hold"
	"pg-live|lanes_pg.pml|-DLIVE -DCRASH -DDEX=15|live|ok|P7 <>alldone, weak fairness"
	"pg-tx-nolock|lanes_pg.pml|-DSLOW -DDEX=15 -DTX_NOLOCK -DNO_FENCE -DNO_INV|safety|P1|P1 no double commit"
	"pg-tx-nolock-fenced-delete|lanes_pg.pml|-DSLOW -DDEX=15 -DTX_NOLOCK -DDELETE_FENCED|safety|ok|finding: fenced DELETE suffices"
	"pg-no-claims|lanes_pg.pml|-DSLOW -DDEX=21 -DNOCLAIMS|safety|P2|P2 fencing"
	"pg-no-epoch|lanes_pg.pml|-DSLOW -DDEX=21 -DNOEPOCH|safety|ok|finding: claims fences"
	"pg-no-epoch-no-claims|lanes_pg.pml|-DSLOW -DDEX=21 -DNOEPOCH -DNOCLAIMS|safety|P2|P2 fencing"
	"pg-pred-inflight|lanes_pg.pml|-DNOPRED_INFLIGHT|safety|P3|P3 per-key order"
	"pg-no-holder|lanes_pg.pml|-DCRASH -DNOHOLDER|safety|P7|P7 nothing stranded"
	"pg-literal-abandoned|lanes_pg.pml|-DCRASH -DLITERAL_ABANDONED|safety|P7|P7 nothing stranded"
	"pg-literal-abandoned-live|lanes_pg.pml|-DLIVE -DCRASH -DDEX=15 -DLITERAL_ABANDONED|live|P7L|P7 <>alldone"
	"pg-strict-due|lanes_pg.pml|-DCRASH -DSTRICT_DUE|safety|P7|P7 nothing stranded"
	"pg-release-charges|lanes_pg.pml|-DSTOP -DDEX=21 -DRELEASE_CHARGES|safety|P4|P4 release spends nothing"
	"pg-no-isolate|lanes_pg.pml|-DPOISON -DNO_ISOLATE|safety|P5b|P5 suspect alone"
	"pg-suspect-busy|lanes_pg.pml|-DPOISON -DSUSPECT_BUSY|safety|P5|P5 no collateral death"
	"pg-bury-any|lanes_pg.pml|-DPOISON -DBURY_ANY|safety|P5|P5 no collateral death"
	"pg-async-claim|lanes_pg.pml|-DDBCRASH -DDEX=12 -DASYNC_CLAIM|safety|P8|P8 a token issued once"
	"pg-async-claim-stale|lanes_pg.pml|-DDBCRASH -DDEX=12 -DASYNC_CLAIM -DNO_TOKEN|safety|P2|P2 fencing"

	"mongo-crash|lanes_mongo.pml|-DCRASH|safety|ok|P1-P7 hold"
	"mongo-slow-keys|lanes_mongo.pml|-DSLOW -DDEX=15|safety|ok|P1-P7 hold"
	"mongo-slow-lane|lanes_mongo.pml|-DSLOW -DDEX=21|safety|ok|P1-P7 hold"
	"mongo-stop|lanes_mongo.pml|-DSTOP -DDEX=21|safety|ok|P1-P7 hold"
	"mongo-poison|lanes_mongo.pml|-DPOISON|safety|ok|P1-P7 hold"
	"mongo-live|lanes_mongo.pml|-DLIVE -DCRASH -DDEX=15|live|ok|P7 <>alldone, weak fairness"
	"mongo-no-lost|lanes_mongo.pml|-DPOISON -DNOLOST -DNO_INV|safety|P4b|P4 every lost attempt charged"
	"mongo-seed-charge|lanes_mongo.pml|-DPOISON -DSEED_CHARGE -DNO_INV|safety|P5|P5 exact budget"
	"mongo-no-holder|lanes_mongo.pml|-DCRASH -DNOHOLDER|safety|P7|P7 nothing stranded"
	"mongo-no-claims|lanes_mongo.pml|-DSLOW -DDEX=7 -DNOCLAIMS|safety|ok|finding: epoch and lost fence"
	"mongo-no-epoch|lanes_mongo.pml|-DSLOW -DDEX=7 -DNOEPOCH|safety|ok|finding: claims and lost fence"
	"mongo-no-epoch-no-claims|lanes_mongo.pml|-DSLOW -DDEX=7 -DNOEPOCH -DNOCLAIMS|safety|P2|P2 fencing"
	"mongo-pred-inflight|lanes_mongo.pml|-DNOPRED_INFLIGHT|safety|P3|P3 per-key order"
	"mongo-literal-abandoned|lanes_mongo.pml|-DCRASH -DLITERAL_ABANDONED|safety|P7|P7 nothing stranded"
	"mongo-strict-due|lanes_mongo.pml|-DCRASH -DSTRICT_DUE|safety|P7|P7 nothing stranded"
	"mongo-release-charges|lanes_mongo.pml|-DSTOP -DDEX=21 -DRELEASE_CHARGES|safety|P4|P4 release spends nothing"
	"mongo-no-isolate|lanes_mongo.pml|-DPOISON -DNO_ISOLATE|safety|P5b|P5 suspect alone"
	"mongo-suspect-busy|lanes_mongo.pml|-DPOISON -DSUSPECT_BUSY|safety|P5|P5 no collateral death"
	"mongo-bury-any|lanes_mongo.pml|-DPOISON -DBURY_ANY|safety|P5|P5 no collateral death"
	"mongo-set-inflight|lanes_mongo.pml|-DSET_INFLIGHT|safety|P6|P6 in_flight exact"
)

# run_row NAME: spin, cc and pan for one row in $work/NAME; writes its
# table line to $work/NAME/line and "fail" to $work/NAME/failed when the
# result is not the expected one.
declare -A row
for r in "${runs[@]}"; do row[${r%%|*}]="$r"; done

run_row() {
	local name="$1" model flags mode expect property dir start wall log
	local errors states depth secs first verdict opt
	IFS='|' read -r name model flags mode expect property <<<"${row[$1]}"
	dir="$work/$name"
	mkdir -p "$dir"
	opt=-O1
	[ "$expect" = ok ] || opt=-O0
	start=$(date +%s.%N)
	if ! (
		cd "$dir"
		# shellcheck disable=SC2086 # flags are words
		spin $flags -a "$here/$model" >spin.log 2>&1
		case "$mode" in
		perkey) # the per-key batcher's own settings (formal/README.md)
			cc -O2 -w -DSAFETY -o pan pan.c >cc.log 2>&1
			./pan -m100000 >pan.log 2>&1 || true ;;
		safety) # assertions and end states; COLLAPSE compresses states
			cc "$opt" -w -DSAFETY -DNOCLAIM -DCOLLAPSE -o pan pan.c >cc.log 2>&1
			./pan -m100000 -w25 >pan.log 2>&1 || true ;;
		live) # the LTL formula <> ALLDONE under weak fairness
			cc "$opt" -w -DCOLLAPSE -o pan pan.c >cc.log 2>&1
			./pan -a -f -m100000 -w25 >pan.log 2>&1 || true ;;
		esac
	); then
		{ echo "$name: spin or cc failed:"; cat "$dir"/*.log; } >"$dir/line"
		echo fail >"$dir/failed"
		return 0
	fi
	wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
	log="$dir/pan.log"
	errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log" | head -1)"
	states="$(awk '/states, stored/ {print $1; exit}' "$log")"
	depth="$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$log" | head -1)"
	secs="$(sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' "$log" | head -1)"
	first="$(grep -m1 -E '^pan:[0-9]+: ' "$log" || true)"
	verdict=PASS
	if [ -z "$errors" ]; then
		verdict="FAIL (no result): $(tail -3 "$log" | tr '\n' ' ')"
	elif [ "$expect" = ok ]; then
		if [ "$errors" != 0 ]; then
			verdict="FAIL: ${first:0:100}"
		elif grep -qE 'Search not completed|max search depth too small|out of memory' "$log"; then
			verdict="FAIL: search incomplete"
		fi
	elif [ "$errors" = 0 ]; then
		verdict="FAIL: broken variant verified"
	elif ! grep -qE "${pat[$expect]}" <<<"$first"; then
		verdict="FAIL: wrong violation: ${first:0:100}"
	fi
	[ "$verdict" = PASS ] || echo fail >"$dir/failed"
	# shellcheck disable=SC2059 # fmt is the table's format
	printf "$fmt" "$name" "${model%.pml}" "${states:-?}" "${depth:-?}" "${secs:-?}" "$wall" "$property" "$verdict" >"$dir/line"
}

jobs_max="${FORMAL_JOBS:-1}"
fmt='%-28s %-12s %-9s %-6s %-7s %-7s %-31s %s\n'
total_start=$(date +%s)
# shellcheck disable=SC2059
printf "$fmt" run model states depth pan_s wall_s expected verdict
names=()
for r in "${runs[@]}"; do
	name="${r%%|*}"
	case "$name" in "$only"*) names+=("$name") ;; esac
done
if [ "$jobs_max" -le 1 ]; then
	for name in "${names[@]}"; do
		run_row "$name"
		cat "$work/$name/line"
	done
else
	running=0
	for name in "${names[@]}"; do
		if [ "$running" -ge "$jobs_max" ]; then
			wait -n
			running=$((running - 1))
		fi
		run_row "$name" &
		running=$((running + 1))
	done
	wait
	for name in "${names[@]}"; do cat "$work/$name/line"; done
fi

failed=0
for name in "${names[@]}"; do
	[ ! -e "$work/$name/failed" ] || failed=1
done
echo "check.sh: ${#names[@]} runs, $(( $(date +%s) - total_start ))s in total"
if [ "$failed" != 0 ]; then
	echo "check.sh: FAILED" >&2
	exit 1
fi
echo "check.sh: every real model verified; every broken variant fails as expected"
