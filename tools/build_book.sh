#!/usr/bin/env bash
# Build the HTML book from the committed notebook outputs (no execution; see _config.yml): the English
# edition into _build/html, then the Chinese one (中文版, tools/i18n.py) into _build/html/zh.
#   tools/build_book.sh [extra jupyter-book build options, e.g. --all]
# The English build also exports the shipped checkpoints to ONNX for the live panels (book/_ext/live_panels.py:
# _build/html/_static/live/models, cached in _build/.live_cache); the Chinese pages use that one copy.
# Uses the active virtual environment, else creates/uses .venv and installs requirements.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
cd "$repo_root"

use_venv
t0="$(now)"
echo "== jupyter-book build . $* (from the committed notebook outputs; no execution)"
jupyter-book build . "$@"
echo "== English edition built in $(elapsed "$t0") s"
t1="$(now)"
echo "== python tools/i18n.py build $* (the Chinese edition, warnings as errors)"
python tools/i18n.py build "$@"
echo "== Chinese edition built in $(elapsed "$t1") s; both in $(elapsed "$t0") s"
echo "$repo_root/_build/html/index.html"
echo "$repo_root/_build/html/zh/index.html"
