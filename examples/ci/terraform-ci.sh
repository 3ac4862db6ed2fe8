#!/usr/bin/env bash
# The Terraform steps of a gpucloud pipeline, one mode per CI job. See docs/guides/ci.md.
#
#   terraform-ci.sh plan    init from the backend's network mirror (committed lock file, read-only),
#                           fmt -check, validate, plan -out=$TF_PLAN_FILE -detailed-exitcode; exits 0
#                           with or without changes
#   terraform-ci.sh apply   init (read-only lock), apply the saved plan $TF_PLAN_FILE, nothing else
#   terraform-ci.sh drift   init, plan -refresh-only -detailed-exitcode; exits 2 on drift with a summary
#   terraform-ci.sh lock    write .terraform.lock.hcl for $GPUCLOUD_LOCK_PLATFORMS, to commit (run it
#                           once, and again after a provider upgrade)
#
# Environment:
#   TF_ROOT                    root module to run in (default: the current directory)
#   GPUCLOUD_ENDPOINT, GPUCLOUD_API_KEY   read by the provider; the endpoint also names the mirror
#   GPUCLOUD_PROVIDER_MIRROR_URL   the backend's provider network mirror (default:
#                              $GPUCLOUD_ENDPOINT/v1/mirror/); https:// only, as Terraform requires
#   SSL_CERT_FILE              a CA bundle, when the backend's certificate is signed by a private CA
#   GPUCLOUD_LOCK_PLATFORMS    platforms the lock mode records (default: linux_amd64 darwin_arm64)
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
read -r -a LOCK_PLATFORMS <<<"${GPUCLOUD_LOCK_PLATFORMS:-linux_amd64 darwin_arm64}"
COLOR=()
if [[ -n ${NO_COLOR:-} ]]; then COLOR=(-no-color); fi

export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'terraform-ci: %s\n' "$*" >&2; exit 1; }
tf() { "${TF[@]}" "$@"; }
set_output() { if [[ -n ${GITHUB_OUTPUT:-} ]]; then echo "$1=$2" >>"$GITHUB_OUTPUT"; fi; }

# The backend's network mirror: GPUCLOUD_PROVIDER_MIRROR_URL, else /v1/mirror/ of the API endpoint.
mirror_url() {
  local url=${GPUCLOUD_PROVIDER_MIRROR_URL:-}
  if [[ -z $url ]]; then
    [[ -n ${GPUCLOUD_ENDPOINT:-} ]] ||
      die "set GPUCLOUD_ENDPOINT (or GPUCLOUD_PROVIDER_MIRROR_URL): the backend serves the provider"
    url="${GPUCLOUD_ENDPOINT%/}/v1/mirror/"
  fi
  [[ $url == https://* ]] || die "the provider mirror $url must be https:// (Terraform installs \
providers over HTTPS only): serve the backend with --tls-cert/--tls-key or behind a TLS proxy"
  printf '%s/\n' "${url%/}"
}

# Install gpucloud/gpucloud from the backend's network mirror, every other provider from its registry:
# a CLI configuration of our own, so nothing on the runner (a plugin cache, a ~/.terraformrc) changes
# which provider bytes run, and registry.terraform.io is never asked for gpucloud/gpucloud.
use_mirror() {
  MIRROR_URL=$(mirror_url)
  CLI_CONFIG=$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/terraform-ci.XXXXXX")
  trap 'rm -f "$CLI_CONFIG"' EXIT
  cat >"$CLI_CONFIG" <<EOF
provider_installation {
  network_mirror {
    url     = "$MIRROR_URL"
    include = ["$PROVIDER"]
  }
  direct {
    exclude = ["$PROVIDER"]
  }
}
EOF
  export TF_CLI_CONFIG_FILE=$CLI_CONFIG
  unset TF_PLUGIN_CACHE_DIR
}

# The committed lock file pins the provider's hashes for every platform the team uses. CI never writes
# it: init is read-only, so what runs is the provider the reviewed commit names.
require_lock() {
  [[ -f .terraform.lock.hcl ]] || die "no .terraform.lock.hcl in $TF_ROOT: run \`terraform-ci.sh \
lock\` there (terraform providers lock -net-mirror=$MIRROR_URL for ${LOCK_PLATFORMS[*]}) and commit it"
  log "using the committed .terraform.lock.hcl"
}

write_lock() {
  local platforms=() platform
  for platform in "${LOCK_PLATFORMS[@]}"; do platforms+=(-platform="$platform"); done
  log "locking $PROVIDER for ${LOCK_PLATFORMS[*]} from $MIRROR_URL: commit .terraform.lock.hcl"
  tf get "${COLOR[@]}" >/dev/null # providers lock reads the whole configuration, module calls too
  tf providers lock "${COLOR[@]}" -net-mirror="$MIRROR_URL" "${platforms[@]}" "$PROVIDER"
}

init() {
  use_mirror
  require_lock
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
  lock) use_mirror; write_lock ;;
  *) die "usage: terraform-ci.sh plan|apply|drift|lock (got '${MODE}')" ;;
esac
