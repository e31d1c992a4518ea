#!/usr/bin/env bash
# Every test of the project: package tests + the browser test (which builds the book), then the
# notebooks re-executed by nbval against their committed outputs. Exit status non-zero on any failure.
# Uses the active virtual environment, else creates/uses .venv and installs requirements.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
cd "$repo_root"

set -e
use_venv
set +e

failed=()
phase() {
  local name="$1"; shift
  echo
  echo "== $name: $*"
  local t0; t0="$(now)"
  "$@"
  local rc=$?
  echo "== $name: exit $rc in $(elapsed "$t0") s"
  [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")
}

total0="$(now)"
phase "package and browser tests" python -m pytest tests/ -q -rfEs
phase "notebooks (nbval)" python -m pytest --nbval book/ -q -rfEs

echo
echo "== all phases in $(elapsed "$total0") s"
if [ "${#failed[@]}" -gt 0 ]; then
  printf '== FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "== all tests passed"
