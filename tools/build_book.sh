#!/usr/bin/env bash
# Build the HTML book from the committed notebook outputs (no execution; see _config.yml).
#   tools/build_book.sh [extra jupyter-book build options, e.g. --all]
# Uses the active virtual environment, else creates/uses .venv and installs requirements.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
cd "$repo_root"

use_venv
t0="$(now)"
echo "== jupyter-book build . $* (from the committed notebook outputs; no execution)"
jupyter-book build . "$@"
echo "== book built in $(elapsed "$t0") s"
echo "$repo_root/_build/html/index.html"
