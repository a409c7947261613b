#!/usr/bin/env bash
# The distributed engine's recipe, timed (issue 22): a capture ingested into an
# archive that copies its segments to SeaweedFS (scripts/setup builds it), then
# the same statements through `hindsight sql` on the archive's files and through
# `hindsight-ballista sql` on a Ballista scheduler with two executors reading
# the copies; prints the median of RUNS runs of each and their ratio, and checks
# that the rows are the same.
#
#   cargo build --release -p hindsight -p hindsight-bench -p hindsight-ballista
#   bench/ballista.sh [CAPTURE] [COPIES] [RUNS]
#
# CAPTURE defaults to shared/data/lan-hour-2012.pcap; COPIES (default 1) copies
# of it, each shifted by one hour with editcap, make the archive; RUNS defaults
# to 5. Everything listens on 127.0.0.1; the work directory is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."

capture=${1:-../shared/data/lan-hour-2012.pcap}
copies=${2:-1}
runs=${3:-5}
bin=${CARGO_TARGET_DIR:-target}/release
weed=${HINDSIGHT_CACHE:-$HOME/.cache/hindsight}/bin/weed
for tool in "$bin/hindsight" "$bin/hindsight-ballista" "$weed"; do
	[ -x "$tool" ] || { echo "ballista.sh: $tool is missing (cargo build --release ...; scripts/setup)" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
free_pair() { # a port with the one 10,000 above it free (SeaweedFS's gRPC)
	while :; do
		p=$(port)
		if [ "$p" -lt 55000 ] && python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',$p+10000))" 2>/dev/null; then
			echo "$p"; return
		fi
	done
}

# The store.
s3=$(free_pair)
mkdir -p "$work/seaweedfs"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$weed" server -dir="$work/seaweedfs" \
	-ip=127.0.0.1 -ip.bind=127.0.0.1 -s3 -master.port="$(free_pair)" -volume.port="$(free_pair)" \
	-filer.port="$(free_pair)" -s3.port="$s3" -volume.max=16 -master.volumeSizeLimitMB=256 \
	>"$work/weed.log" 2>&1 &
pids+=($!)
for _ in $(seq 400); do
	[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$s3/bench")" = 200 ] && break
	sleep 0.3
done
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret

# The archive, copied as it is ingested.
inputs=()
for n in $(seq 0 $((copies - 1))); do
	if [ "$n" = 0 ]; then inputs+=("$capture"); else
		editcap -t $((n * 3600)) "$capture" "$work/copy-$n.pcap"
		inputs+=("$work/copy-$n.pcap")
	fi
done
mkdir -p "$work/archive"
cat >"$work/archive/config.toml" <<EOF
[archive]
object_store = "s3://bench/recorder-1"
endpoint = "http://127.0.0.1:$s3"
EOF
"$bin/hindsight" ingest "${inputs[@]}" --archive "$work/archive" >/dev/null 2>"$work/ingest.log" \
	|| { cat "$work/ingest.log" >&2; exit 1; }

# The cluster: a scheduler and two executors of one task each (the machine's cores).
sched=$(port)
RUST_LOG=warn "$bin/hindsight-ballista" scheduler --bind-port "$sched" >"$work/scheduler.log" 2>&1 &
pids+=($!)
for n in 1 2; do
	mkdir -p "$work/executor-$n"
	RUST_LOG=info "$bin/hindsight-ballista" executor --scheduler-port "$sched" --bind-port "$(port)" \
		--bind-grpc-port "$(port)" --concurrent-tasks 1 --work-dir "$work/executor-$n" \
		>"$work/executor-$n.log" 2>&1 &
	pids+=($!)
done
for n in 1 2; do
	for _ in $(seq 200); do grep -qs "registration succeed" "$work/executor-$n.log" && break; sleep 0.1; done
done

packets=$("$bin/hindsight" sql 'SELECT count(*) FROM packets' --archive "$work/archive" -F csv | tail -1)
records=$("$bin/hindsight" sql 'SELECT count(*) FROM flows' --archive "$work/archive" -F csv | tail -1)
echo "archive: $copies copies of $(basename "$capture"): $packets packets, $records connection records"
echo "ballista: a scheduler and 2 executors of 1 task each, reading s3://bench/recorder-1 (SeaweedFS)"
echo

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_ms() { # prints the wall time of "$@" in ms, its output to $out
	local start end
	start=$(date +%s%N)
	"$@" >"$out"
	end=$(date +%s%N)
	echo $(((end - start) / 1000000))
}

statements=(
	"SELECT ip_str(src_addr) AS src, count(*) AS records, sum(bytes_out + bytes_in) AS bytes FROM flows GROUP BY src ORDER BY bytes DESC, src LIMIT 20"
	"SELECT dst_port, ip_proto, count(*) AS records, count(DISTINCT src_addr) AS clients FROM flows GROUP BY dst_port, ip_proto ORDER BY records DESC, dst_port, ip_proto LIMIT 20"
	"SELECT time_bucket(INTERVAL '5 minutes', ts) AS t, count(*) AS packets, sum(wire_len) AS bytes FROM packets GROUP BY t ORDER BY t"
)
printf '%-58s %14s %14s %7s\n' "statement" "hindsight sql" "ballista" "ratio"
for sql in "${statements[@]}"; do
	local_times=() remote_times=()
	for _ in $(seq "$runs"); do
		out=$work/local.csv local_times+=("$(time_ms "$bin/hindsight" sql "$sql" --archive "$work/archive" -F csv)")
		out=$work/remote.csv remote_times+=("$(time_ms "$bin/hindsight-ballista" sql "$sql" --format csv \
			--scheduler "df://127.0.0.1:$sched" --archive s3://bench/recorder-1 --endpoint "http://127.0.0.1:$s3")")
	done
	cmp -s "$work/local.csv" "$work/remote.csv" || { echo "ballista.sh: different rows for: $sql" >&2; diff "$work/local.csv" "$work/remote.csv" | head >&2; exit 1; }
	l=$(printf '%s\n' "${local_times[@]}" | median)
	r=$(printf '%s\n' "${remote_times[@]}" | median)
	printf '%-58s %11s ms %11s ms %6.1fx\n' "${sql:0:58}" "$l" "$r" "$(echo "$r / $l" | bc -l)"
done
tasks=$(cat "$work"/executor-*.log | grep -c "Execute task" || true)
echo
echo "same rows from both; executors ran $tasks tasks ($(grep -c "Execute task" "$work/executor-1.log" || true) and $(grep -c "Execute task" "$work/executor-2.log" || true))"
