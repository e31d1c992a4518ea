# Shared by tools/build_book.sh and tools/test_all.sh (sourced, not run).
# use_venv: keep an activated virtual environment ($VIRTUAL_ENV set), else create/activate .venv
# and install requirements.txt into it (again only when requirements.txt changed).

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# pip install "$@", showing what it collects, downloads and installs (prefixed by elapsed seconds) instead of
# minutes of silence; lines about packages already installed are left out. Returns pip's exit status.
pip_with_progress() {
  local start=$SECONDS line
  python -m pip install --progress-bar off "$@" 2>&1 | while IFS= read -r line; do
    case "$line" in
      "Requirement already satisfied"*) ;;
      *) printf '   [%4ds] %s\n' "$((SECONDS - start))" "$line" ;;
    esac
  done
  return "${PIPESTATUS[0]}"
}

use_venv() {
  if [ -n "${VIRTUAL_ENV:-}" ]; then
    echo "== using the active environment $VIRTUAL_ENV"
    return
  fi
  local venv="$repo_root/.venv" stamp="$repo_root/.venv/.requirements.installed"
  local t0; t0="$(now)"
  if [ ! -x "$venv/bin/python" ]; then
    echo "== creating $venv"
    python3 -m venv "$venv"
  fi
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  if [ ! -f "$stamp" ] || [ "$repo_root/requirements.txt" -nt "$stamp" ]; then
    echo "== pip install -r requirements.txt (the first time: ~150 packages, torch among them, a few minutes;"
    echo "   each line below is timed from the start of this step)"
    (cd "$repo_root" && pip_with_progress -r requirements.txt)
    touch "$stamp"
  fi
  echo "== environment ready in $(elapsed "$t0") s ($VIRTUAL_ENV)"
}
