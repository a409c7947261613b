#!/usr/bin/env python3
"""The peers of bench/src/bin/index_bench.rs: the same connection-index entries
in DuckDB (ART index on the address) and PostgreSQL (inet column, GiST index with
inet_ops), and the same queries, timed one by one from a client in this process.

With a third argument, HOST:PORT of an OpenSearch node (bench/opensearch.sh
starts one), the same entries go into OpenSearch too (an `ip` field, its points
index), loaded by the bulk API and queried with a term query.

Usage: index_peers.py ENTRIES.csv QUERIES.csv [OPENSEARCH_HOST:PORT]
ENTRIES.csv: addr,ts_ns,peer,port,peer_port,proto,reverse,bytes,packets (two rows
per connection, as the index keys them). QUERIES.csv: address,expected count.
Prints one line per query: peer,address,found,microseconds; one per peer:
insert,peer,entries,seconds (loaded, indexed and searchable); and note lines.
Needs: python3 modules duckdb and psycopg, a running PostgreSQL the current user
can create a database in (bench/index-peers-setup.sh sets that up).
"""
import http.client
import json
import os
import sys
import threading
import tempfile
import time

entries, queries_path = sys.argv[1], sys.argv[2]
queries = [line.split(",") for line in open(queries_path).read().split()]
work = os.path.dirname(os.path.abspath(entries))
opensearch = sys.argv[3] if len(sys.argv) > 3 else None

def note(peer, text):
    print(f"note,{peer},{text}", flush=True)

def run_duckdb():
    import duckdb
    path = os.path.join(work, "peers.duckdb")
    for suffix in ("", ".wal"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    db = duckdb.connect(path)
    started = time.perf_counter()
    db.execute(
        "CREATE TABLE conn AS SELECT * FROM read_csv(?, header=false, columns={"
        "'addr':'VARCHAR','ts':'BIGINT','peer':'VARCHAR','port':'INTEGER',"
        "'peer_port':'INTEGER','proto':'INTEGER','reverse':'INTEGER',"
        "'bytes':'BIGINT','packets':'BIGINT'})",
        [entries],
    )
    db.execute("CREATE INDEX conn_addr ON conn(addr)")
    db.execute("CHECKPOINT")
    loaded = time.perf_counter() - started
    note("duckdb", f"duckdb {duckdb.__version__}: loaded and indexed in {loaded:.1f} s (one CSV scan)")
    print(f"insert,duckdb,{db.execute('SELECT count(*) FROM conn').fetchone()[0]},{loaded:.3f}", flush=True)
    statement = "SELECT * FROM conn WHERE addr = ?"
    for address, expected in queries:
        t = time.perf_counter()
        rows = db.execute(statement, [address]).fetchall()
        us = (time.perf_counter() - t) * 1e6
        assert len(rows) == int(expected), (address, len(rows), expected)
        print(f"duckdb,{address},{len(rows)},{us:.1f}")
    db.close()

def run_postgres():
    import psycopg
    with psycopg.connect("dbname=postgres", autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS hindsight_bench")
        admin.execute("CREATE DATABASE hindsight_bench")
    with psycopg.connect("dbname=hindsight_bench", autocommit=True) as db:
        version = db.execute("SHOW server_version").fetchone()[0]
        started = time.perf_counter()
        db.execute(
            "CREATE TABLE conn (addr inet, ts bigint, peer inet, port int, peer_port int,"
            " proto int, reverse int, bytes bigint, packets bigint)"
        )
        with db.cursor().copy("COPY conn FROM STDIN WITH (FORMAT csv)") as copy:
            with open(entries, "rb") as f:
                while chunk := f.read(1 << 20):
                    copy.write(chunk)
        db.execute("CREATE INDEX conn_addr ON conn USING gist (addr inet_ops)")
        db.execute("VACUUM ANALYZE conn")
        loaded = time.perf_counter() - started
        note("postgres", f"PostgreSQL {version}: loaded and indexed in {loaded:.1f} s (COPY, then the index)")
        rows = db.execute("SELECT count(*) FROM conn").fetchone()[0]
        print(f"insert,postgres,{rows},{loaded:.3f}", flush=True)
        cursor = db.cursor()
        statement = "SELECT * FROM conn WHERE addr = %s::inet"
        plan = db.execute("EXPLAIN " + statement.replace("%s", "'10.0.0.1'")).fetchall()
        note("postgres", "plan: " + " / ".join(row[0].strip() for row in plan))
        for address, expected in queries:
            t = time.perf_counter()
            rows = cursor.execute(statement, [address], prepare=True).fetchall()
            us = (time.perf_counter() - t) * 1e6
            assert len(rows) == int(expected), (address, len(rows), expected)
            print(f"postgres,{address},{len(rows)},{us:.1f}")

FIELDS = ("addr", "ts", "peer", "port", "peer_port", "proto", "reverse", "bytes", "packets")
BULK_DOCS = 10_000

def run_opensearch():
    host, port = opensearch.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=600)

    def call(method, path, body=None, content_type="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers={"Content-Type": content_type} if body else {})
        response = conn.getresponse()
        data = response.read()
        if response.status >= 300 and not (method == "DELETE" and response.status == 404):
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return json.loads(data) if data else None

    version = call("GET", "/")["version"]["number"]
    call("DELETE", "/conn")
    call("PUT", "/conn", {
        "settings": {"number_of_shards": 1, "number_of_replicas": 0,
                     "refresh_interval": "-1", "translog.durability": "async"},
        "mappings": {"properties": {
            "addr": {"type": "ip"}, "ts": {"type": "long"}, "peer": {"type": "ip"},
            "port": {"type": "integer"}, "peer_port": {"type": "integer"},
            "proto": {"type": "short"}, "reverse": {"type": "byte"},
            "bytes": {"type": "long"}, "packets": {"type": "long"}}},
    })
    # The bulk bodies are made before the clock starts: the client's work is not
    # the server's.
    bodies, lines, docs = [], [], 0
    with open(entries) as f:
        for line in f:
            v = line.rstrip("\n").split(",")
            doc = {"addr": v[0], "peer": v[2]}
            for i in (1, 3, 4, 5, 6, 7, 8):
                doc[FIELDS[i]] = int(v[i])
            lines.append('{"index":{}}\n' + json.dumps(doc, separators=(",", ":")) + "\n")
            docs += 1
            if len(lines) == BULK_DOCS:
                bodies.append("".join(lines).encode())
                lines = []
    if lines:
        bodies.append("".join(lines).encode())
    errors = []

    def load(part):
        c = http.client.HTTPConnection(host, int(port), timeout=600)
        for body in part:
            c.request("POST", "/conn/_bulk", body=body, headers={"Content-Type": "application/x-ndjson"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200 or b'"errors":true' in data[:100]:
                errors.append(f"bulk: {r.status} {data[:300]!r}")
                return
        c.close()

    clients = 2
    started = time.perf_counter()
    threads = [threading.Thread(target=load, args=(bodies[i::clients],)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    loaded = time.perf_counter() - started
    call("POST", "/conn/_refresh")
    searchable = time.perf_counter() - started
    count = call("GET", "/conn/_count")["count"]
    assert count == docs, (count, docs)
    note("opensearch", f"OpenSearch {version}: {docs} documents in {BULK_DOCS}-document bulk requests from "
         f"{clients} clients: loaded in {loaded:.1f} s, searchable after the refresh at {searchable:.1f} s")
    print(f"insert,opensearch,{docs},{searchable:.3f}", flush=True)
    size = 10_000
    for address, expected in queries:
        t = time.perf_counter()
        body = {"query": {"term": {"addr": address}}, "size": size, "track_total_hits": True}
        result = call("POST", "/conn/_search", body)
        hits = result["hits"]["hits"]
        found = len(hits)
        if result["hits"]["total"]["value"] > found:
            # More than one page: all of it through a scroll, as a client must.
            body["sort"] = ["_doc"]
            result = call("POST", "/conn/_search?scroll=1m", body)
            found = 0
            while result["hits"]["hits"]:
                found += len(result["hits"]["hits"])
                result = call("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": result["_scroll_id"]})
            call("DELETE", "/_search/scroll", {"scroll_id": result["_scroll_id"]})
        us = (time.perf_counter() - t) * 1e6
        assert found == int(expected), (address, found, expected)
        print(f"opensearch,{address},{found},{us:.1f}")
    call("DELETE", "/conn")

peers = [("duckdb", run_duckdb), ("postgres", run_postgres)]
if opensearch:
    peers.append(("opensearch", run_opensearch))
for name, run in peers:
    try:
        run()
    except Exception as error:  # a peer that cannot run is reported, not fatal
        note(name, f"not run: {type(error).__name__}: {error}")
