#!/usr/bin/env bash
# Build the self-contained provider packages (zips Terraform installs) into dist/provider/:
#   scripts/build-provider-package.sh                      this machine's platform
#   scripts/build-provider-package.sh --platform linux_amd64 --platform darwin_arm64 ...
# Sign a version's packages for the registry: scripts/build-provider-package.sh sign --key KEY
# (see release/provider_package.py and docs/installing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
case "${1:-}" in
  sign|lock|build) ;;
  *) set -- build "$@" ;;
esac
PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m release.provider_package "$@"
