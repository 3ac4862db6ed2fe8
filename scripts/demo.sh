#!/usr/bin/env bash
# make demo / make demo-destroy: the backend on embedded SQLite, the provider installed from a local
# filesystem mirror, and terraform init + apply of examples/terraform/quickstart.
# Everything the demo writes lives in .demo/ (data, mirror, CLI config, logs, API key).
set -euo pipefail
cd "$(dirname "$0")/.."

root=$(pwd)
demo="$root/.demo"
port="${GPUCLOUD_DEMO_PORT:-8080}"
endpoint="http://127.0.0.1:$port"
bin="$root/.venv/bin"
workdir="$root/examples/terraform/quickstart"

export TF_CLI_CONFIG_FILE="$demo/terraformrc"
export TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
export GPUCLOUD_DATA_DIR="$demo/data"
export GPUCLOUD_ENDPOINT="$endpoint"
export TF_DATA_DIR="$demo/terraform-data"
# The simulated datacenter runs real phase durations (a 2-node cluster takes ~20 minutes) at speed 1;
# the demo compresses time so the quickstart cluster is RUNNING in about ten seconds.
export GPUCLOUD_SIMULATION_SPEED="${GPUCLOUD_SIMULATION_SPEED:-120}"

say() { printf '\n==> %s\n' "$*"; }

backend_up() {
  if [ -f "$demo/backend.pid" ] && kill -0 "$(cat "$demo/backend.pid")" 2>/dev/null; then
    return
  fi
  say "Starting the backend on $endpoint (SQLite in $GPUCLOUD_DATA_DIR, log in .demo/backend.log)"
  nohup "$bin/gpucloud-backend" serve --host 127.0.0.1 --port "$port" >"$demo/backend.log" 2>&1 &
  echo $! >"$demo/backend.pid"
  for _ in $(seq 1 100); do
    "$bin/python" - "$endpoint/healthz" <<'PY' && return
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=1)
except Exception:
    sys.exit(1)
PY
    kill -0 "$(cat "$demo/backend.pid")" 2>/dev/null || { cat "$demo/backend.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "the backend did not become healthy; see .demo/backend.log" >&2
  exit 1
}

api_key() {
  if [ ! -s "$demo/api-key" ]; then
    say "Creating project 'demo' and an admin API key (kept in .demo/api-key, mode 0600)"
    "$bin/gpucloud-backend" create-project demo >/dev/null
    (umask 077 && "$bin/gpucloud-backend" create-api-key --project demo --role admin >"$demo/api-key")
  fi
  GPUCLOUD_API_KEY=$(cat "$demo/api-key")
  export GPUCLOUD_API_KEY
}

install_provider() {
  say "Installing terraform-provider-gpucloud into the local mirror .demo/mirror"
  "$bin/terraform-provider-gpucloud" install --mirror "$demo/mirror" >"$demo/terraformrc"
}

up() {
  mkdir -p "$demo"
  backend_up
  api_key
  install_provider
  say "terraform init (from the mirror; writes .terraform.lock.hcl)"
  terraform -chdir="$workdir" init -input=false -no-color >"$demo/init.log" || { cat "$demo/init.log"; exit 1; }
  tail -n 3 "$demo/init.log"
  say "terraform apply"
  terraform -chdir="$workdir" apply -input=false -auto-approve -no-color \
    -state="$demo/terraform.tfstate"
  say "Done. 'make demo-destroy' destroys what was created and stops the backend."
}

down() {
  if [ -f "$demo/terraform.tfstate" ] && [ -f "$demo/api-key" ]; then
    backend_up
    api_key
    say "terraform destroy"
    terraform -chdir="$workdir" destroy -input=false -auto-approve -no-color -state="$demo/terraform.tfstate"
    rm -f "$demo/terraform.tfstate" "$demo/terraform.tfstate.backup"
  fi
  if [ -f "$demo/backend.pid" ]; then
    say "Stopping the backend"
    kill "$(cat "$demo/backend.pid")" 2>/dev/null || true
    rm -f "$demo/backend.pid"
  fi
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
