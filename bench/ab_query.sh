#!/usr/bin/env bash
# Compares the query time of hindsight binaries side by side: each binary
# ingests CAPTURE into an archive of its own once (so each reads the format it
# writes), then ROUNDS rounds each run every binary's `query FILTER -o pcap` in
# turn (the archive in the page cache after the first round). Prints each
# binary's wall times in ms, sorted, and their median.
#
#   bench/ab_query.sh ROUNDS CAPTURE FILTER BINARY...
#   bench/ab_query.sh 15 /tmp/hindsight-bench/replicated-5000000.pcap 'host 172.30.100.1' /tmp/hindsight-before target/release/hindsight
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 ROUNDS CAPTURE FILTER BINARY..." >&2
    exit 2
fi
rounds=$1
capture=$2
filter=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A times archives
i=0
for binary in "$@"; do
    i=$((i + 1))
    archives[$binary]="$work/archive-$i"
    "$binary" ingest -q "$capture" --archive "${archives[$binary]}" > /dev/null
done
for round in $(seq "$((rounds + 1))"); do
    for binary in "$@"; do
        start=$(date +%s%N)
        "$binary" query "$filter" --archive "${archives[$binary]}" -o "$work/out.pcap"
        end=$(date +%s%N)
        # The first round warms the page cache and is not counted.
        if [ "$round" -gt 1 ]; then
            times[$binary]="${times[$binary]:-} $(( (end - start) / 1000 ))"
        fi
    done
done
for binary in "$@"; do
    sorted=$(tr ' ' '\n' <<< "${times[$binary]}" | grep . | sort -n)
    median=$(awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}' <<< "$sorted")
    echo "$binary: $(tr '\n' ' ' <<< "$sorted" | awk '{for (i = 1; i <= NF; i++) printf "%.1f ", $i / 1000}')median $(awk -v m="$median" 'BEGIN {printf "%.1f", m / 1000}') ms"
done
