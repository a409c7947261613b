#!/usr/bin/env bash
# The OpenSearch peer of index_bench (Arkime's store, Diventi's baseline).
#   bench/opensearch.sh start DIR [PORT]   # builds if needed, starts, waits until green
#   bench/opensearch.sh stop DIR
# OpenSearch 2.19.6 from Maven Central's jars (bench/opensearch/pom.xml; the
# distribution archive is not published there), cached under
# $HOME/.cache/hindsight/opensearch. The node listens on 127.0.0.1 only and runs
# as a non-root user (hindsight-peer, created when run as root); DIR holds its
# jars, data and logs. Needs java 17 and mvn.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command="${1:-}"; dir="${2:-}"; port="${3:-9200}"
if [ -z "$command" ] || [ -z "$dir" ]; then
  echo "usage: $0 start DIR [PORT] | stop DIR" >&2; exit 2
fi
mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"

if [ "$command" = stop ]; then
  if [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null; then
    for _ in $(seq 60); do kill -0 "$(cat "$dir/pid")" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$dir/pid"; exit 0
fi
[ "$command" = start ] || { echo "$0: unknown command $command" >&2; exit 2; }

cache="$HOME/.cache/hindsight/opensearch"
stamp="$(cat "$here/opensearch/pom.xml" "$here/opensearch/OpenSearchNode.java" | sha256sum | cut -c1-16)"
if [ "$(cat "$cache/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$cache"; mkdir -p "$cache/classes"
  mvn -q -f "$here/opensearch/pom.xml" dependency:copy-dependencies -DoutputDirectory="$cache/lib" >&2
  javac -d "$cache/classes" -cp "$cache/lib/*" "$here/opensearch/OpenSearchNode.java"
  echo "$stamp" > "$cache/stamp"
fi
rm -rf "$dir/lib" "$dir/classes"; cp -r "$cache/lib" "$cache/classes" "$dir/"; mkdir -p "$dir/config"

run=()
if [ "$(id -u)" = 0 ]; then
  id hindsight-peer >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin hindsight-peer
  chown -R hindsight-peer "$dir"
  run=(runuser -u hindsight-peer --)
fi
heap="${OPENSEARCH_HEAP:-4g}"
nohup "${run[@]}" java -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -Djava.awt.headless=true \
  -Dlog4j2.disable.jmx=true -cp "$dir/classes:$dir/lib/*" hindsight.OpenSearchNode "$dir" "$port" \
  > "$dir/node.log" 2>&1 &
echo $! > "$dir/pid"
for _ in $(seq 240); do
  if curl -fsS "http://127.0.0.1:$port/_cluster/health?wait_for_status=yellow&timeout=1s" >/dev/null 2>&1; then
    echo "opensearch: 2.19.6 on 127.0.0.1:$port, home $dir" >&2; exit 0
  fi
  kill -0 "$(cat "$dir/pid")" 2>/dev/null || { echo "opensearch: the node exited; see $dir/node.log" >&2; tail -20 "$dir/node.log" >&2; exit 1; }
  sleep 0.5
done
echo "opensearch: not up after 120 s; see $dir/node.log" >&2; exit 1
