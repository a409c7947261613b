#!/usr/bin/env python3
"""The peers of bench/src/bin/index_bench.rs: the same connection-index entries
in DuckDB (ART index on the address) and PostgreSQL (inet column, GiST index with
inet_ops), and the same queries, timed one by one from a client in this process.

Usage: index_peers.py ENTRIES.csv QUERIES.csv
ENTRIES.csv: addr,ts_ns,peer,port,peer_port,proto,reverse,bytes,packets (two rows
per connection, as the index keys them). QUERIES.csv: address,expected count.
Prints one line per query: peer,address,found,microseconds; and note lines.
Needs: python3 modules duckdb and psycopg, a running PostgreSQL the current user
can create a database in (bench/index-peers-setup.sh sets that up).
"""
import os
import sys
import tempfile
import time

entries, queries_path = sys.argv[1], sys.argv[2]
queries = [line.split(",") for line in open(queries_path).read().split()]
work = os.path.dirname(os.path.abspath(entries))

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
    note("duckdb", f"duckdb {duckdb.__version__}: loaded and indexed in {time.perf_counter() - started:.1f} s")
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
        note("postgres", f"PostgreSQL {version}: loaded and indexed in {time.perf_counter() - started:.1f} s")
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

for name, run in (("duckdb", run_duckdb), ("postgres", run_postgres)):
    try:
        run()
    except Exception as error:  # a peer that cannot run is reported, not fatal
        note(name, f"not run: {type(error).__name__}: {error}")
