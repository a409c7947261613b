#!/usr/bin/env bash
# Stenographer as a peer for archive_bench (issue 2): Stenographer only archives
# packets it captures live, so this script gives it a live link it owns.
#
#   bench/stenographer.sh start CAPTURE   install Debian's stenographer if missing,
#                                         create network namespace hs-steno with a
#                                         veth pair, run stenographer on one end,
#                                         replay CAPTURE into the other with
#                                         tcpreplay, wait until it is indexed;
#                                         prints "captured N packets" (stenotype's
#                                         own count, to show capture loss)
#   bench/stenographer.sh query 'QUERY'   stenographer query → pcap on stdout
#   bench/stenographer.sh stop            stop stenographer, delete the namespace
#                                         and the work directory
#
# Needs root (network namespace, AF_PACKET). Test traffic stays inside the
# namespace this script creates. The work directory is $HS_STENO_DIR
# (default /var/tmp/hindsight-steno).
set -euo pipefail

NS=hs-steno
DIR=${HS_STENO_DIR:-/var/tmp/hindsight-steno}
PORT=${HS_STENO_PORT:-1234}
CONFIG=$DIR/config

die() {
	echo "stenographer.sh: $*" >&2
	exit 1
}

in_ns() { ip netns exec "$NS" "$@"; }

install_if_missing() {
	local missing=()
	command -v stenotype >/dev/null || missing+=(stenographer)
	command -v stenoread >/dev/null || missing+=(stenographer-client)
	command -v tcpreplay >/dev/null || missing+=(tcpreplay)
	command -v jq >/dev/null || missing+=(jq)
	command -v curl >/dev/null || missing+=(curl)
	if ((${#missing[@]})); then
		echo "installing ${missing[*]}" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
	fi
	# The package makes the TLS certificates stenoread and the server share.
	[[ -r /etc/stenographer/certs/client_key.pem ]] ||
		die "no /etc/stenographer/certs: reinstall the stenographer package"
}

stop() {
	if [[ -f $DIR/stenographer.pid ]]; then
		kill "$(cat "$DIR/stenographer.pid")" 2>/dev/null || true
		sleep 1
	fi
	ip netns pids "$NS" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$DIR"
}

start() {
	local capture=$1
	[[ -r $capture ]] || die "cannot read capture $capture"
	[[ $(id -u) == 0 ]] || die "needs root (network namespace and AF_PACKET capture)"
	install_if_missing
	stop

	mkdir -p "$DIR/packets" "$DIR/index"
	chown -R stenographer:stenographer "$DIR"
	# Files rotate every 10 s so that everything replayed is on disk and indexed
	# soon after the replay; the watchdogs are off because they abort stenotype
	# when a burst keeps its threads busy (seen on this 2-core machine).
	cat >"$CONFIG" <<EOF
{
  "Threads": [
    { "PacketsDirectory": "$DIR/packets", "IndexDirectory": "$DIR/index",
      "MaxDirectoryFiles": 30000, "DiskFreePercentage": 1 }
  ],
  "StenotypePath": "/usr/sbin/stenotype",
  "Interface": "vB",
  "Port": $PORT,
  "Host": "127.0.0.1",
  "Flags": ["--no_watchdogs", "--blocks=2048", "--fileage_sec=10", "--blockage_sec=1", "-v"],
  "CertPath": "/etc/stenographer/certs"
}
EOF
	chmod 644 "$CONFIG"

	ip netns add "$NS"
	ip link add vA type veth peer name vB
	ip link set vA netns "$NS"
	ip link set vB netns "$NS"
	in_ns ip link set lo up
	in_ns ip link set vA up mtu 9000
	in_ns ip link set vB up mtu 9000
	for dev in vA vB; do
		in_ns ethtool -K "$dev" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
	done

	in_ns runuser -u stenographer -- stenographer -config "$CONFIG" -syslog=false \
		>"$DIR/stenographer.log" 2>&1 &
	echo $! >"$DIR/stenographer.pid"
	wait_for "stenographer to listen" 30 \
		bash -c "STENOGRAPHER_CONFIG=$CONFIG ip netns exec $NS stenocurl /query --silent -o /dev/null"
	# stenotype allocates its ring before it reads packets; replaying earlier loses them.
	wait_for "stenotype to read packets" 60 grep -q 'starting to process packets' "$DIR/stenographer.log"

	in_ns tcpreplay --intf1=vA --topspeed --quiet "$capture" >"$DIR/tcpreplay.log" 2>&1 ||
		die "tcpreplay failed: $(cat "$DIR/tcpreplay.log")"
	# A file is readable once it is rotated (fileage_sec) and indexed.
	sleep 15
	wait_for "stenographer to index" 120 bash -c \
		"! ls $DIR/packets | grep -q '^\.' && [ \$(ls $DIR/index | wc -l) -ge \$(ls $DIR/packets | wc -l) ]"
	# Count what stenographer answers for all time until two counts agree.
	local captured=-1 previous=-2
	for _ in $(seq 30); do
		[[ $captured == "$previous" ]] && break
		sleep 5
		previous=$captured
		captured=$(STENOGRAPHER_CONFIG=$CONFIG in_ns stenocurl /query -d 'after 1970-01-01T00:00:00Z' --silent |
			tcpdump -r - -nn 2>/dev/null | wc -l)
	done
	echo "captured $captured packets"
}

wait_for() {
	local what=$1 seconds=$2
	shift 2
	for _ in $(seq "$seconds"); do
		"$@" && return 0
		sleep 1
	done
	die "timed out waiting for $what; log: $DIR/stenographer.log"
}

query() {
	STENOGRAPHER_CONFIG=$CONFIG in_ns stenocurl /query -d "$1" --silent --show-error --fail
}

case ${1:-} in
start) start "${2:?usage: $0 start CAPTURE}" ;;
query) query "${2:?usage: $0 query QUERY}" ;;
stop) stop ;;
*) die "usage: $0 start CAPTURE | query QUERY | stop" ;;
esac
