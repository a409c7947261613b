#!/usr/bin/env python3
"""The DuckDB side of aggregate_bench: aggregations over the same segment
files (the archive's packets/*.parquet), each run --runs times.

Reads a JSON list of {"name", "sql"} on stdin; `packets` in the SQL is a view
over the files. Prints one JSON object per query and line: name, the median
milliseconds, and the answer's checksum (the sum of its last column) and rows,
so that the benchmark can check both tools answered the same.
"""

import argparse
import json
import statistics
import sys
import time

import duckdb


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", required=True, help="glob of the segment files")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    queries = json.load(sys.stdin)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW packets AS SELECT * FROM read_parquet('{args.files}')")
    for query in queries:
        samples = []
        rows = []
        for _ in range(args.runs):
            started = time.perf_counter()
            rows = con.execute(query["sql"]).fetchall()
            samples.append(time.perf_counter() - started)
        checksum = sum(int(row[-1]) for row in rows if row[-1] is not None)
        print(
            json.dumps(
                {
                    "name": query["name"],
                    "ms": statistics.median(samples) * 1e3,
                    "rows": len(rows),
                    "checksum": checksum,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
