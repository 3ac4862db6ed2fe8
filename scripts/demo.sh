#!/usr/bin/env bash
# make demo / make demo-destroy: the backend on embedded SQLite, the provider installed from a local
# filesystem mirror, and terraform init + apply of examples/terraform/quickstart: real nodes you can
# log into as root on Linux (the local driver), the simulated datacenter elsewhere.
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

# As root on Linux the demo runs real nodes (the local driver: namespaces with Slurm and sshd);
# elsewhere, or when this machine cannot run them, the simulated datacenter. The choice is kept in
# .demo/driver so `make demo-destroy` restarts the backend the same way.
choose_driver() {
  if [ -s "$demo/driver" ]; then
    GPUCLOUD_DRIVER=$(cat "$demo/driver")
  elif [ -n "${GPUCLOUD_DRIVER:-}" ]; then
    :
  elif [ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ]; then
    local missing
    missing=$("$bin/python" -c 'from backend.provisioning.drivers.local.preflight import missing_packages as m; print(" ".join(m()))')
    if [ -n "$missing" ]; then
      say "Installing what real nodes need: $missing"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      # shellcheck disable=SC2086  # one word per package
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
    if GPUCLOUD_DRIVER=local "$bin/gpucloud-backend" doctor >"$demo/doctor.log" 2>&1; then
      GPUCLOUD_DRIVER=local
    else
      GPUCLOUD_DRIVER=simulated
      say "This machine cannot run real nodes ($(grep '^local' "$demo/doctor.log" | head -n 1)); using the simulated datacenter"
    fi
  else
    GPUCLOUD_DRIVER=simulated
    say "Not root on Linux: using the simulated datacenter (real nodes need root; see docs/local-driver.md)"
  fi
  export GPUCLOUD_DRIVER
  echo "$GPUCLOUD_DRIVER" >"$demo/driver"
  if [ "$GPUCLOUD_DRIVER" = local ]; then
    # The cluster's login key: a demo key of its own, so the proof below never needs a passphrase.
    [ -f "$demo/id_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C "gpucloud demo" -f "$demo/id_ed25519"
    TF_VAR_ssh_public_key=$(cat "$demo/id_ed25519.pub")
    export TF_VAR_ssh_public_key
  fi
}

# Real nodes: log in with `gpucloud ssh`, which checks the host key the API published, and run a job on
# both nodes. Its known_hosts file stays in .demo/ (XDG_CONFIG_HOME), not in the user's ~/.config.
prove_real() {
  say "The cluster is real: gpucloud ssh quickstart -- -i .demo/id_ed25519 srun -N2 hostname"
  XDG_CONFIG_HOME="$demo/config" GPUCLOUD_ENDPOINT="$endpoint" "$bin/gpucloud" ssh quickstart -- \
    -i "$demo/id_ed25519" -o BatchMode=yes -o LogLevel=ERROR srun -N2 hostname
}

backend_up() {
  if [ -f "$demo/backend.pid" ] && kill -0 "$(cat "$demo/backend.pid")" 2>/dev/null; then
    return
  fi
  say "Starting the backend on $endpoint (SQLite in $GPUCLOUD_DATA_DIR, $GPUCLOUD_DRIVER driver, log in .demo/backend.log)"
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
  choose_driver
  backend_up
  api_key
  install_provider
  say "terraform init (from the mirror; writes .terraform.lock.hcl)"
  terraform -chdir="$workdir" init -input=false -no-color >"$demo/init.log" || { cat "$demo/init.log"; exit 1; }
  tail -n 3 "$demo/init.log"
  say "terraform apply"
  terraform -chdir="$workdir" apply -input=false -auto-approve -no-color \
    -state="$demo/terraform.tfstate"
  [ "$GPUCLOUD_DRIVER" != local ] || prove_real
  say "Web console: http://127.0.0.1:$port/console (sign in with the API key in .demo/api-key)"
  say "Done. 'make demo-destroy' destroys what was created and stops the backend."
}

down() {
  if [ -f "$demo/terraform.tfstate" ] && [ -f "$demo/api-key" ]; then
    choose_driver
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
  rm -f "$demo/driver"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
