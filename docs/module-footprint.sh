#!/usr/bin/env bash
# What a service that imports relaybus/ and relaybus/postgres gets in its
# module graph, for the layouts weighed in docs/modules.md. For each
# layout it copies the committed tree (git archive of HEAD, or of the
# commit $FOOTPRINT_REF names) into a temporary directory, reshapes it,
# makes a scratch consumer module that requires it through a replace
# directive, runs `go mod tidy` there with an empty module cache, and
# prints what the consumer sees: the lines of its go.sum and how many
# modules named there only the harness needs ("of which": Testcontainers,
# Docker, moby, gonum, plot, tablewriter), the module zips tidy downloaded
# and their size, the modules of `go list -m all` and the edges of `go mod
# graph`, how many of those modules only the harness needs, and the
# packages outside the standard library its build links.
#
#   docs/module-footprint.sh [layout ...]
#   FOOTPRINT_REF=82eafe0 docs/module-footprint.sh today   # an older commit
#
# Layouts (all by default):
#   today          the repository as committed: one module
#   harness-apart  bench/ and cmd/ removed, as if the harness were a module
#                  of its own; internal/dbenv stays with the library
#   lean-tests     one module, but without the library's test files that
#                  import internal/dbenv (as if their server came from no
#                  helper at all)
#   library-only   relaybus/ alone, without those test files: the library
#                  as a module of its own, the harness and dbenv elsewhere
#
# It downloads modules (go mod tidy) into a temporary cache, removed at
# the end; it writes nothing into the repository.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
ref="$(git -C "$root" rev-parse --verify "${FOOTPRINT_REF:-HEAD}^{commit}")"
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(today harness-apart lean-tests library-only)

work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
gover="$(sed -n 's/^go //p' "$root/go.mod")"

shape() { # layout dir
	local layout=$1 dir=$2
	mkdir -p "$dir"
	case $layout in
	today) git -C "$root" archive "$ref" | tar -x -C "$dir" ;;
	harness-apart) git -C "$root" archive "$ref" go.mod go.sum relaybus internal | tar -x -C "$dir" ;;
	lean-tests)
		git -C "$root" archive "$ref" | tar -x -C "$dir"
		grep -rl --include='*_test.go' 'internal/dbenv' "$dir/relaybus" | xargs -r rm -f
		;;
	library-only)
		git -C "$root" archive "$ref" go.mod go.sum relaybus | tar -x -C "$dir"
		grep -rl --include='*_test.go' 'internal/dbenv' "$dir/relaybus" | xargs -r rm -f
		;;
	*) echo "module-footprint: unknown layout $layout" >&2; exit 2 ;;
	esac
	# The reshaped library keeps only the requirements its packages and
	# tests still need.
	(cd "$dir" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
}

consumer() { # dir libdir
	local dir=$1 lib=$2
	mkdir -p "$dir"
	cat >"$dir/go.mod" <<EOF
module example.com/consumer

go $gover

require github.com/berkcansavur/relaybus v0.0.0

replace github.com/berkcansavur/relaybus => $lib
EOF
	cat >"$dir/main.go" <<'EOF'
package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

func main() {
	pool, err := pgxpool.New(context.Background(), "")
	if err != nil {
		panic(err)
	}
	store, err := postgres.New(pool, nil)
	if err != nil {
		panic(err)
	}
	if _, err := relaybus.New[pgx.Tx](store, relaybus.Config{}); err != nil {
		panic(err)
	}
}
EOF
}

harness_only='testcontainers|moby|docker|gonum|plot|tablewriter'
echo "commit $(git -C "$root" rev-parse --short=12 "$ref"), $(go version | cut -d' ' -f3)"
printf '%-14s %7s %9s %6s %5s %8s %6s %13s %s\n' layout go.sum "of which" zips MiB "list -m" graph "harness-only" "built packages (not std)"
for layout in "${layouts[@]}"; do
	lib="$work/$layout/lib"
	con="$work/$layout/consumer"
	cache="$work/$layout/modcache"
	GOMODCACHE="$cache" shape "$layout" "$lib"
	consumer "$con" "$lib"
	rm -rf "$cache"
	(cd "$con" && GOMODCACHE="$cache" GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
	sum=$(wc -l <"$con/go.sum")
	zips=$(find "$cache/cache/download" -name '*.zip' | wc -l)
	mib=$(du -sm "$cache/cache/download" | cut -f1)
	list=$(cd "$con" && GOMODCACHE="$cache" go list -m all | wc -l)
	graph=$(cd "$con" && GOMODCACHE="$cache" go mod graph | wc -l)
	sumheavy=$(cut -d' ' -f1 "$con/go.sum" | sort -u | grep -cE "$harness_only" || true)
	heavy=$(cd "$con" && GOMODCACHE="$cache" go list -m all | grep -cE "$harness_only" || true)
	built=$(cd "$con" && GOMODCACHE="$cache" go list -deps . | grep -c '^[^/]*\.' || true)
	printf '%-14s %7s %9s %6s %5s %8s %6s %13s %s\n' "$layout" "$sum" "$sumheavy" "$zips" "$mib" "$list" "$graph" "$heavy" "$built"
done
