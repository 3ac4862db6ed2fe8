#!/usr/bin/env bash
# Rebuild every generated file. `make generate` runs this with no arguments (all steps);
# `scripts/generate.sh stubs [OUTDIR]` runs one step (tests regenerate into a temp dir).
# Steps are independent functions: add new ones below and list them in ALL_STEPS.
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

# gRPC + protobuf stubs (and mypy .pyi files) for proto/*.proto into provider/_proto/.
# protoc writes imports relative to the include root, so the protos are staged under
# provider/_proto/ in a temp tree: the stubs then import `from provider._proto import ...`.
step_stubs() {
  local out=${1:-provider/_proto}
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/in/provider/_proto" "$stage/out"
  cp proto/*.proto "$stage/in/provider/_proto/"
  local wkt
  wkt=$("$PY" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
  local bindir
  bindir=$(dirname "$PY")
  "$PY" -m grpc_tools.protoc -I "$stage/in" -I "$wkt" \
    --plugin=protoc-gen-mypy="$bindir/protoc-gen-mypy" \
    --plugin=protoc-gen-mypy_grpc="$bindir/protoc-gen-mypy_grpc" \
    --python_out="$stage/out" --grpc_python_out="$stage/out" \
    --mypy_out="$stage/out" --mypy_grpc_out="$stage/out" \
    "$stage"/in/provider/_proto/*.proto
  mkdir -p "$out"
  # Replace the previous stubs wholesale so a removed proto leaves no stale module behind.
  find "$out" -maxdepth 1 \( -name '*_pb2*.py' -o -name '*_pb2*.pyi' \) -delete
  cp "$stage"/out/provider/_proto/* "$out/"
  [ -f "$out/__init__.py" ] || printf '"""Generated protobuf/gRPC stubs (make generate). Never edit by hand."""\n' >"$out/__init__.py"
  rm -rf "$stage"
}

# proto/openapi.json: the backend's OpenAPI document (the provider<->backend contract).
step_openapi() {
  "$PY" -m backend.openapi_export "${1:-proto/openapi.json}"
}

# provider/resources/api_rules.json: the request schemas' rules, from proto/openapi.json, for plan-time checks.
step_rules() {
  "$PY" -m provider.resources.api_rules proto/openapi.json "${1:-provider/resources/api_rules.json}"
}

# docs/index.md and docs/{resources,data-sources,ephemeral-resources}/*.md from the provider schemas.
step_docs() {
  "$PY" -m provider.framework.docs --provider provider.resources.provider:GpuCloudProvider --out "${1:-docs}"
}

# docs/cli.md from the real --help of every gpucloud command.
step_cli() {
  "$PY" -m provider.cli.docs "${1:-docs/cli.md}"
}

# The role matrix in docs/api.md (between its markers) from the routes' permissions.
step_roles() {
  "$PY" scripts/role_matrix.py "${1:-docs/api.md}"
}

ALL_STEPS="stubs openapi rules docs cli roles"

if [ $# -gt 0 ]; then
  step=$1
  shift
  "step_$step" "$@"
else
  for step in $ALL_STEPS; do
    echo "generate: $step" >&2
    "step_$step"
  done
fi
