#!/usr/bin/env bash
# Builds one of edgebed's compiled programs into the venv, or says why it cannot and leaves its
# Python counterpart in use. Never fails: without a C compiler edgebed still runs, slower (every
# run says so). scripts/setup.sh runs it for each program:
#
#   relay   the wire relay (topologies/impairments/wire_relay.c); without it delayed links are
#           accurate only to ~7,500 packets/s per direction (topologies/impairments/relay.py)
#   sender  the paced senders' send engine (agents/send_engine.c); without it each packet a
#           sending agent paces costs ~90 us of CPU (agents/send_engine.py)
#
#   scripts/build-compiled.sh PROGRAM [BINARY]   # default .venv/bin/edgebed-...; CC=compiler (gcc)
#
# Rebuilt when the source or the compiler command changes (a stamp beside the binary holds
# their hash; file times would not do: a checkout or rebase touches the source either way).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
    relay)
        source="$repo/topologies/impairments/wire_relay.c"
        name=edgebed-wire-relay
        what="the compiled wire relay"
        fallback="delayed links use the Python relay (accurate to ~7,500 packets/s per direction)" ;;
    sender)
        source="$repo/agents/send_engine.c"
        name=edgebed-send-engine
        what="the compiled send engine"
        fallback="paced agents send from Python (~90 us of CPU a packet)" ;;
    *)
        echo "usage: scripts/build-compiled.sh relay|sender [BINARY]" >&2
        exit 2 ;;
esac
binary="${2:-$repo/.venv/bin/$name}"
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
if ! command -v "$compiler" >/dev/null 2>&1; then
    say "WARNING: no C compiler ($compiler; apt-get install gcc libc6-dev) to build $what: $fallback" >&2
    exit 0
fi
if ! errors="$("$compiler" "${flags[@]}" -o "$binary.tmp" "$source" -lm 2>&1)"; then
    rm -f "$binary.tmp"
    say "WARNING: $what did not build ($compiler): $fallback" >&2
    printf '%s\n' "$errors" | head -20 >&2
    exit 0
fi
[ -z "$errors" ] || printf '%s\n' "$errors" >&2
mv "$binary.tmp" "$binary"
echo "$want" > "$stamp"
say "built $what $binary"
