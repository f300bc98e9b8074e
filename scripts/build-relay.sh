#!/usr/bin/env bash
# Builds the compiled wire relay (topologies/impairments/wire_relay.c) into the venv, or says why
# it cannot and leaves the Python relay in use. Never fails: without a C compiler edgebed still
# runs, its delayed links then accurate only to ~7,500 packets/s per direction (every run says
# so, topologies/impairments/relay.py). scripts/setup.sh runs it.
#
#   scripts/build-relay.sh [BINARY]     # default .venv/bin/edgebed-wire-relay; CC=compiler (gcc)
#
# Rebuilt when the source or the compiler command changes (a stamp beside the binary holds
# their hash; file times would not do: a checkout or rebase touches the source either way).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source="$repo/topologies/impairments/wire_relay.c"
binary="${1:-$repo/.venv/bin/edgebed-wire-relay}"
compiler="${CC:-gcc}"
flags=(-O2 -Wall -Wextra)
stamp="$binary.stamp"
want="$( { cat "$source"; echo "$compiler ${flags[*]}"; } | sha256sum | cut -c1-16)"

say() { printf 'setup: %s\n' "$*"; }

if [ -x "$binary" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
# A binary of an older source must not run in its place.
rm -f "$binary" "$stamp"
fallback="delayed links use the Python relay (accurate to ~7,500 packets/s per direction)"
if ! command -v "$compiler" >/dev/null 2>&1; then
    say "WARNING: no C compiler ($compiler; apt-get install gcc libc6-dev) to build the compiled wire relay: $fallback" >&2
    exit 0
fi
if ! errors="$("$compiler" "${flags[@]}" -o "$binary.tmp" "$source" -lm 2>&1)"; then
    rm -f "$binary.tmp"
    say "WARNING: the compiled wire relay did not build ($compiler): $fallback" >&2
    printf '%s\n' "$errors" | head -20 >&2
    exit 0
fi
[ -z "$errors" ] || printf '%s\n' "$errors" >&2
mv "$binary.tmp" "$binary"
echo "$want" > "$stamp"
say "built the compiled wire relay $binary"
