#!/usr/bin/env bash
# The Terraform steps of a gpucloud pipeline, one mode per CI job. See docs/guides/ci.md.
#
#   terraform-ci.sh plan    init from the mirror (lock file read-only), fmt -check, validate,
#                           plan -out=$TF_PLAN_FILE -detailed-exitcode; exits 0 with or without changes
#   terraform-ci.sh apply   init (read-only lock), apply the saved plan $TF_PLAN_FILE, nothing else
#   terraform-ci.sh drift   init, plan -refresh-only -detailed-exitcode; exits 2 on drift with a summary
#   terraform-ci.sh lock    write .terraform.lock.hcl from the mirror (what plan does when it is missing)
#
# Environment:
#   TF_ROOT                    root module to run in (default: the current directory)
#   GPUCLOUD_PROVIDER_MIRROR   filesystem mirror holding registry.terraform.io/gpucloud/gpucloud
#                              (`terraform-provider-gpucloud install --mirror DIR` writes one)
#   GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY   read by the provider
#   TF_BACKEND_CONFIG          optional file of backend settings for `init -backend-config=` (remote state)
#   TF_PLAN_FILE               saved plan, relative to TF_ROOT (default: gpucloud.tfplan)
#   TERRAFORM                  Terraform command, may carry arguments (default: terraform)
#   PYTHON                     Python 3 for the drift summary (default: python3)
#   NO_COLOR                   set to anything for plain output
# In GitHub Actions it also writes `changes`/`drift` to $GITHUB_OUTPUT and the drift summary to
# $GITHUB_STEP_SUMMARY.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODE=${1:-}
TF_ROOT=${TF_ROOT:-.}
TF_PLAN_FILE=${TF_PLAN_FILE:-gpucloud.tfplan}
DRIFT_PLAN_FILE=${DRIFT_PLAN_FILE:-drift.tfplan}
PYTHON=${PYTHON:-python3}
PROVIDER=registry.terraform.io/gpucloud/gpucloud
read -r -a TF <<<"${TERRAFORM:-terraform}"
COLOR=()
if [[ -n ${NO_COLOR:-} ]]; then COLOR=(-no-color); fi

export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'terraform-ci: %s\n' "$*" >&2; exit 1; }
tf() { "${TF[@]}" "$@"; }
set_output() { if [[ -n ${GITHUB_OUTPUT:-} ]]; then echo "$1=$2" >>"$GITHUB_OUTPUT"; fi; }

# Install providers from the mirror only: a CLI configuration of our own, so nothing on the runner
# (a plugin cache, a ~/.terraformrc) changes which provider bytes run.
use_mirror() {
  [[ -n ${GPUCLOUD_PROVIDER_MIRROR:-} ]] || die "GPUCLOUD_PROVIDER_MIRROR must name the provider mirror"
  [[ -d $GPUCLOUD_PROVIDER_MIRROR ]] || die "provider mirror $GPUCLOUD_PROVIDER_MIRROR does not exist"
  local mirror
  mirror=$(cd "$GPUCLOUD_PROVIDER_MIRROR" && pwd)
  CLI_CONFIG=$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/terraform-ci.XXXXXX")
  trap 'rm -f "$CLI_CONFIG"' EXIT
  cat >"$CLI_CONFIG" <<EOF
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["registry.terraform.io/gpucloud/*"]
  }
  direct {
    exclude = ["registry.terraform.io/gpucloud/*"]
  }
}
EOF
  export TF_CLI_CONFIG_FILE=$CLI_CONFIG
  unset TF_PLUGIN_CACHE_DIR
}

# The lock file pins the provider's h1: hash. The mirror's launcher names the Python environment it
# runs, so its hash is per runner image: when the repository carries no lock file (the default, see
# docs/guides/ci.md) the plan job writes it from the mirror and hands it to the apply job with the
# plan; every init after that is read-only and fails if the provider bytes differ.
ensure_lock() {
  if [[ -f .terraform.lock.hcl ]]; then
    log "using the existing .terraform.lock.hcl"
    return
  fi
  local platform
  platform=$(tf version -json | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["platform"])')
  log "no .terraform.lock.hcl: locking $PROVIDER for $platform from the mirror"
  tf get "${COLOR[@]}" >/dev/null # providers lock reads the whole configuration, module calls too
  tf providers lock "${COLOR[@]}" -fs-mirror="$(cd "$GPUCLOUD_PROVIDER_MIRROR" && pwd)" \
    -platform="$platform" "$PROVIDER"
}

init() {
  use_mirror
  ensure_lock
  local backend=()
  if [[ -n ${TF_BACKEND_CONFIG:-} ]]; then backend=(-backend-config="$TF_BACKEND_CONFIG"); fi
  log "terraform init -lockfile=readonly"
  tf init "${COLOR[@]}" -input=false -lockfile=readonly "${backend[@]}"
}

check() {
  log "terraform fmt -check"
  tf fmt -check -recursive -diff "${COLOR[@]}" ||
    die "files are not formatted: run terraform fmt -recursive and commit the result"
  log "terraform validate"
  tf validate "${COLOR[@]}"
}

plan() {
  init
  check
  log "terraform plan -out=$TF_PLAN_FILE -detailed-exitcode"
  local code=0
  tf plan "${COLOR[@]}" -input=false -out="$TF_PLAN_FILE" -detailed-exitcode || code=$?
  case $code in
    0) log "no changes"; set_output changes false ;;
    2) log "changes present: the apply job applies $TF_PLAN_FILE"; set_output changes true ;;
    *) die "plan failed (exit $code)" ;;
  esac
}

apply() {
  [[ -f $TF_PLAN_FILE ]] || die "no saved plan $TF_PLAN_FILE in $TF_ROOT: run the plan job first"
  init
  log "terraform apply $TF_PLAN_FILE"
  tf apply "${COLOR[@]}" -input=false "$TF_PLAN_FILE"
}

drift() {
  init
  log "terraform plan -refresh-only -detailed-exitcode"
  local code=0
  tf plan "${COLOR[@]}" -input=false -refresh-only -detailed-exitcode -out="$DRIFT_PLAN_FILE" || code=$?
  case $code in
    0) log "no drift"; set_output drift false; return 0 ;;
    2) ;;
    *) die "refresh-only plan failed (exit $code)" ;;
  esac
  # Exit code 2 alone is not proof of drift: Terraform also returns it when the refresh only changed
  # provider-private data, and before 1.15 when it changed nothing at all (hashicorp/terraform#36403).
  # The saved plan says what really changed.
  local summary status=0
  summary=$(tf show -json "$DRIFT_PLAN_FILE" | "$PYTHON" "$SCRIPT_DIR/drift_summary.py") || status=$?
  printf '%s\n' "$summary"
  if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
    # shellcheck disable=SC2016  # the backquotes are Markdown, not command substitution
    printf '### Drift in `%s`\n\n```\n%s\n```\n' "$TF_ROOT" "$summary" >>"$GITHUB_STEP_SUMMARY"
  fi
  case $status in
    0) set_output drift false; return 0 ;;
    2) set_output drift true; exit 2 ;;
    *) die "could not summarise the drift plan (exit $status)" ;;
  esac
}

cd "$TF_ROOT"
case $MODE in
  plan) plan ;;
  apply) apply ;;
  drift) drift ;;
  lock) use_mirror; ensure_lock ;;
  *) die "usage: terraform-ci.sh plan|apply|drift|lock (got '${MODE}')" ;;
esac
