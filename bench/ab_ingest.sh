#!/usr/bin/env bash
# Compares the ingest CPU time (user + sys) of hindsight binaries side by side:
# ROUNDS rounds, each running every binary once on the same capture, in turn,
# with the capture read once before each run so that every run finds it in the
# page cache. Prints each binary's times, sorted, and their median.
#
#   bench/ab_ingest.sh ROUNDS CAPTURE BINARY...
#   bench/ab_ingest.sh 9 /tmp/hindsight-bench/replicated-5000000.pcap /tmp/hindsight-before target/release/hindsight
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 ROUNDS CAPTURE BINARY..." >&2
    exit 2
fi
rounds=$1
capture=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A times
for _ in $(seq "$rounds"); do
    for binary in "$@"; do
        cat "$capture" > /dev/null
        rm -rf "$work/archive"
        /usr/bin/time -o "$work/time" -f "%U %S" "$binary" ingest -q "$capture" --archive "$work/archive" > /dev/null
        times[$binary]="${times[$binary]:-} $(awk '{print $1 + $2}' "$work/time")"
    done
done
for binary in "$@"; do
    sorted=$(tr ' ' '\n' <<< "${times[$binary]}" | grep . | sort -n)
    median=$(awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}' <<< "$sorted")
    echo "$binary: $(tr '\n' ' ' <<< "$sorted")median $median CPU s"
done
