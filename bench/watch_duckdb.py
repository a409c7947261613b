#!/usr/bin/env python3
"""The DuckDB side of watch_bench: the same five analyses (the SQL files of
crates/watch/analyses) over the same windows of the same stream of connection
records, with the same history, in DuckDB.

The scripts are run as written but for what DuckDB spells differently:
`:name` parameters become `$name`, `date_bin` is `time_bucket`, a timestamp's
nanoseconds are `epoch_ns`, a stage is `CREATE OR REPLACE TEMPORARY TABLE`, and
hindsight's address functions are macros over addresses loaded as UHUGEINT
from the text the Parquet files hold (IPv4 only, as the benchmark's stream is).

Prints one JSON object: windows, seconds (all windows), per-window p50/p99,
and the rows each analysis answered.
"""

import argparse
import datetime
import json
import pathlib
import re
import statistics
import time

import duckdb

DURATION = re.compile(r"^(\d+)([smhdw])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def param_value(text):
    """As hindsight's param_value: integer, decimal, duration, else text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    match = DURATION.match(text)
    if match:
        return datetime.timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])
    return text


def declared(sql):
    """The parameters a script's heading declares, with their defaults."""
    params = {}
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        body = line.lstrip("-").strip()
        if body.startswith(":") and "=" in body:
            name, rest = body[1:].split("=", 1)
            params[name.strip()] = param_value(rest.split()[0])
    return params


def translate(sql):
    """The script's statements in DuckDB's spelling."""
    sql = re.sub(r"CAST\((\w+\.\w+) AS BIGINT\)", r"epoch_ns(\1)", sql)
    sql = sql.replace("date_bin(", "time_bucket(")
    sql = sql.replace("CREATE TEMPORARY TABLE", "CREATE OR REPLACE TEMPORARY TABLE")
    sql = re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"$\1", sql)
    sql = re.sub(r"--[^\n]*", "", sql)
    statements = [s.strip() for s in sql.split(";")]
    return [s for s in statements if s]


def network(text):
    """An IPv4 network as the inclusive range of its IPv4-mapped addresses."""
    address, _, bits = text.partition("/")
    value = 0
    for octet in address.split("."):
        value = value * 256 + int(octet)
    bits = int(bits or 32)
    host = (1 << (32 - bits)) - 1
    mapped = 0xFFFF << 32
    return mapped | (value & ~host), mapped | (value | host)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stream", required=True, help="the stream's connection records (Parquet)")
    parser.add_argument("--history", required=True, help="the archive's connection records (Parquet)")
    parser.add_argument("--analyses", required=True, help="crates/watch/analyses")
    parser.add_argument("--home", required=True, help="the home network, IPv4 CIDR")
    parser.add_argument("--slide-ns", type=int, default=1_000_000_000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    db = duckdb.connect()
    db.execute(f"SET threads = {args.threads}")
    low, high = network(args.home)
    db.execute(f"CREATE MACRO ip_home(a) AS (a BETWEEN {low}::UHUGEINT AND {high}::UHUGEINT)")
    db.execute(
        "CREATE MACRO ip_prefix(a, len) AS "
        "(a & ~(((1::UHUGEINT << (32 - len)::UHUGEINT) - 1)))"
    )
    db.execute(
        "CREATE MACRO ip_str(a) AS concat_ws('.', ((a >> 24) & 255)::INTEGER, "
        "((a >> 16) & 255)::INTEGER, ((a >> 8) & 255)::INTEGER, (a & 255)::INTEGER)"
    )
    # Addresses as numbers (the Parquet files hold them as text, IPv4 here),
    # loaded once, not counted in the windows' time.
    db.execute(
        "CREATE MACRO ip_u(a) AS (281470681743360::UHUGEINT "
        "+ (split_part(a, '.', 1)::UHUGEINT << 24) + (split_part(a, '.', 2)::UHUGEINT << 16) "
        "+ (split_part(a, '.', 3)::UHUGEINT << 8) + split_part(a, '.', 4)::UHUGEINT)"
    )
    load = (
        "SELECT * REPLACE (ip_u(src_addr) AS src_addr, ip_u(dst_addr) AS dst_addr) "
        "FROM read_parquet(?)"
    )
    db.execute(f"CREATE TABLE stream AS {load}", [args.stream])
    db.execute(f"CREATE TABLE flows AS {load}", [args.history])
    # The flow-record stream has no packets.
    db.execute(
        "CREATE TABLE live_packets (src_addr UHUGEINT, dst_addr UHUGEINT, "
        "dst_port USMALLINT, ip_proto UTINYINT, tcp_flags UTINYINT)"
    )

    analyses = []
    for path in sorted(pathlib.Path(args.analyses).glob("*.sql")):
        sql = path.read_text()
        slides = 10 if path.stem == "dispersion" else 1
        analyses.append((path.stem, translate(sql), declared(sql), slides))

    slide = args.slide_ns
    (first, last), = db.execute(
        "SELECT min(epoch_ns(last_ts)), max(epoch_ns(last_ts)) FROM stream"
    ).fetchall()
    per_window = []
    rows = {name: 0 for name, *_ in analyses}
    longest = max(slides for *_, slides in analyses)
    end = (first // slide + 1) * slide
    started = time.perf_counter()
    while end - slide <= last + (longest - 1) * slide:
        window_started = time.perf_counter()
        for name, statements, params, slides in analyses:
            start = end - slides * slide
            ts = lambda ns: datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc)
            db.execute(
                "CREATE OR REPLACE TEMPORARY TABLE live_flows AS SELECT * FROM stream "
                "WHERE last_ts >= $s AND last_ts < $e",
                {"s": ts(start), "e": ts(end)},
            )
            if db.execute("SELECT count(*) FROM live_flows").fetchone()[0] == 0:
                continue
            values = dict(params)
            values.update(
                window_start=ts(start),
                window_end=ts(end),
                window_slide=datetime.timedelta(microseconds=slide / 1000),
            )
            for statement in statements[:-1]:
                used = {k: v for k, v in values.items() if f"${k}" in statement}
                db.execute(statement, used)
            answer = statements[-1]
            used = {k: v for k, v in values.items() if f"${k}" in answer}
            rows[name] += len(db.execute(answer, used).fetchall())
        per_window.append(time.perf_counter() - window_started)
        end += slide
    seconds = time.perf_counter() - started
    per_window.sort()
    print(
        json.dumps(
            {
                "windows": len(per_window),
                "seconds": seconds,
                "p50": statistics.median(per_window) if per_window else 0,
                "p99": per_window[min(len(per_window) - 1, int(len(per_window) * 0.99))]
                if per_window
                else 0,
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
