#!/usr/bin/env bash
# Installs and starts the peers of index_bench: DuckDB and psycopg (PyPI) and
# PostgreSQL 15 (Debian), with a superuser role for the current user so the
# benchmark can create its database. Run as root; safe to rerun.
set -euo pipefail
if ! command -v pg_ctlcluster >/dev/null || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
version="$(ls /etc/postgresql | sort -n | tail -1)"
pg_ctlcluster "$version" main start 2>/dev/null || true
user="$(id -un)"
runuser -u postgres -- psql -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$user'" | grep -q 1 \
  || runuser -u postgres -- createuser --superuser "$user"
python3 -c 'import duckdb, psycopg' 2>/dev/null \
  || python3 -m pip install --quiet 'duckdb' 'psycopg[binary]'
echo "index-peers-setup: PostgreSQL $version running, duckdb and psycopg importable" >&2
