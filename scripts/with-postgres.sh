#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL 15 beside it, then remove the server and its data.
# Exports GPUCLOUD_TEST_POSTGRES_URL for the command. The server runs as the `postgres` user
# (initdb refuses root) on a unix socket in a private temp dir and a free loopback port.
# Set GPUCLOUD_TEST_POSTGRES_URL yourself to use an existing server instead.
set -euo pipefail

if [ -n "${GPUCLOUD_TEST_POSTGRES_URL:-}" ]; then
  exec "$@"
fi

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
  echo "with-postgres: PostgreSQL server binaries not found (apt-get install postgresql-15)" >&2
  exit 1
fi

run_as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

dir=$(mktemp -d /tmp/gpucloud-pg.XXXXXX)
chmod 0700 "$dir"
[ "$(id -u)" = 0 ] && chown postgres: "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

cleanup() {
  run_as_postgres "$pg_bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

run_as_postgres "$pg_bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
run_as_postgres "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o \
  "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }

export GPUCLOUD_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
echo "with-postgres: PostgreSQL on 127.0.0.1:$port (throwaway)" >&2
"$@"
