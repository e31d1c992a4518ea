# Shared by tools/build_book.sh and tools/test_all.sh (sourced, not run).
# use_venv: keep an activated virtual environment ($VIRTUAL_ENV set), else create/activate .venv
# and install requirements.txt into it (again only when requirements.txt changed).

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

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
    echo "== pip install -r requirements.txt"
    (cd "$repo_root" && python -m pip install -q -r requirements.txt)
    touch "$stamp"
  fi
  echo "== environment ready in $(elapsed "$t0") s ($VIRTUAL_ENV)"
}
