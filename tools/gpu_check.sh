#!/usr/bin/env bash
# Run, ON A GPU MACHINE without network, what shows whether the book works there: install the wheels that
# tools/gpu_wheels.sh prepared, then the quick package tests, every chapter under nbval (the chapters pick CUDA
# through minimind.lab.device.pick_device) and bench/bench_generate.py, each phase timed and given its own share
# of a total time budget. Writes ONE report, and exits 1 if any phase failed or ran out of time.
#
#   tools/gpu_check.sh [options]          from anywhere; it works in the repository that holds it
#     --wheels DIR      the folder from tools/gpu_wheels.sh (default gpu_wheels/ in the repository)
#     --no-install      use the Python environment as it is (no pip install)
#     --smoke           a short run: one quick test file and one small chapter, no benchmark
#     --report FILE     default $OUT/gpu_report.txt when $OUT is set, else gpu_report.txt in the repository
#     --python PY       default $PYTHON, else the first of python3, python that imports torch
#     --jobs N          pytest-xdist workers for the tests and the chapters (default: 4 where a GPU and
#                       pytest-xdist are there and not --smoke, else 1: no xdist)
#     --budget SECONDS  for all phases together (default 520: the device machine gives a command 10 minutes,
#                       and a phase stopped at its limit gets 8 s more to print its summary)
#
# Without a CUDA GPU it says "no CUDA GPU found: running on CPU" (in the report and on stdout) and runs all the
# same, on the CPU: `tools/gpu_check.sh --smoke --no-install` checks this script anywhere in about a minute.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheels="$repo_root/gpu_wheels" install=1 smoke=0 report="" py="${PYTHON:-}" jobs=auto budget=520

die() { echo "gpu_check.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels="${2:?--wheels needs a folder}"; shift ;;
    --no-install) install=0 ;;
    --smoke) smoke=1 ;;
    --report) report="${2:?--report needs a file}"; shift ;;
    --python) py="${2:?--python needs an interpreter}"; shift ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift ;;
    --budget) budget="${2:?--budget needs seconds}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
case "$budget" in ''|*[!0-9]*) die "--budget takes whole seconds" ;; esac
case "$wheels" in /*) ;; *) wheels="$PWD/$wheels" ;; esac
case "$jobs" in auto|[1-9]|[1-9][0-9]) ;; *) die "--jobs takes a number from 1 or auto" ;; esac
if [ -z "$report" ]; then
  if [ -n "${OUT:-}" ]; then report="$OUT/gpu_report.txt"; else report="$repo_root/gpu_report.txt"; fi
fi
mkdir -p "$(dirname "$report")" && : >"$report" || die "cannot write the report $report"
report="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
if [ -z "$py" ]; then
  for cand in python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then py="$cand"; break; fi
  done
  py="${py:-python3}"
fi
py="$(command -v "$py" || echo "$py")"

cd "$repo_root" || die "cannot enter $repo_root"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
# the chapters import the live source; nothing may try the network (there is none there); pip stays offline
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

start=$SECONDS
deadline=$((SECONDS + budget))
say() { echo "$@"; echo "$@" >>"$report"; }
names=() statuses=() codes=() times=() limits=() notes=() failed=0

# run_phase NAME CAP RESERVE KIND CMD...: at most CAP seconds, and never into the RESERVE seconds kept for the
# phases after it (a phase that ends early leaves its time to the chapters); KIND pytest keeps pytest's summary
# and failures in the report, KIND plain the whole output.
run_phase() {
  local name="$1" cap="$2" reserve="$3" kind="$4"; shift 4
  # caps and reserves are set for the default 520 s; a smaller budget shrinks them in proportion
  if [ "$budget" -lt 520 ]; then cap=$((cap * budget / 520)); reserve=$((reserve * budget / 520)); fi
  local left=$((deadline - SECONDS - reserve)) limit log="$logs/phase${#names[@]}.log" t0 rc status note=""
  limit=$(( cap < left ? cap : left ))
  names+=("$name"); limits+=("$limit")
  if [ "$limit" -lt 5 ]; then
    statuses+=("NOT RUN"); codes+=("-"); times+=("0"); notes+=("no time left in the budget"); failed=1
    say ""; say "== $name: NOT RUN (no time left in the ${budget} s budget)"
    return
  fi
  echo; echo "== $name (at most $limit s): $*"
  t0=$SECONDS
  timeout -k 8 -s INT "$limit" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  local took=$((SECONDS - t0))
  sed -i -E 's/\x1b\[[0-9;]*[A-Za-z]//g' "$log"  # plain text in the report: no terminal colours (nbval, IPython)
  case "$rc" in
    0) status="ok" ;;
    124|137) status="TIMED OUT"; note="stopped after its $limit s" ;;
    5) status="FAILED"; [ "$kind" = pytest ] && note="no test ran" ;;
    *) status="FAILED" ;;
  esac
  if [ "$kind" = pytest ]; then
    local last; last="$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|errors|skipped|deselected)|^(=+ )?no tests ran|Interrupted' "$log" | tail -n 1 | sed 's/^=* *//; s/ *=*$//')"
    [ -z "$last" ] || note="${note:+$note; }$last"
  fi
  [ "$status" = ok ] || failed=1
  statuses+=("$status"); codes+=("$rc"); times+=("$took"); notes+=("$note")
  {
    echo
    echo "== $name: $status (exit $rc) in $took s (at most $limit s)${note:+ -- $note}"
    echo "   command: $*"
    if [ "$kind" = pytest ]; then
      # the short summary (one line a failure) and the end; then the failures themselves, up to 1500 lines
      awk '/short test summary info/ { on = 1 } on' "$log" | head -n 400
      [ "$status" = "TIMED OUT" ] && { echo "   (the last lines before it was stopped:)"; tail -n 15 "$log"; }
      if grep -q '= FAILURES =\|= ERRORS =' "$log"; then
        echo "-- failures (the first 1500 lines):"
        awk '/= (FAILURES|ERRORS) =/ { on = 1 } /short test summary info/ { on = 0 } on' "$log" | head -n 1500
      fi
    else
      head -n 300 "$log"
      [ "$(wc -l <"$log")" -le 300 ] || { echo "   [...]"; tail -n 100 "$log"; }
    fi
  } >>"$report"
}

skip_phase() {  # skip_phase NAME WHY: a phase left out on purpose, not a failure
  names+=("$1"); statuses+=("skipped"); codes+=("-"); times+=("0"); limits+=("-"); notes+=("$2")
  say ""; say "== $1: skipped ($2)"
}

# --- the GPU ----------------------------------------------------------------------------------------------------
{
  echo "GPU check report (tools/gpu_check.sh)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(hostname 2>/dev/null || echo ?), $(nproc 2>/dev/null || echo ?) CPU cores"
  echo "repository: $repo_root, commit $(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo 'unknown (no .git)')"
  echo "mode: $([ "$smoke" -eq 1 ] && echo smoke || echo full), install: $([ "$install" -eq 1 ] && echo "from $wheels" || echo 'no (--no-install)'), budget $budget s, python $py"
} >>"$report"
gpu=0
if probe="$("$py" -c '
import torch
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"CUDA GPU: {torch.cuda.get_device_name(0)} (compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, "
          f"{torch.cuda.device_count()} device(s)); torch {torch.__version__}, CUDA {torch.version.cuda}")
else:
    print(f"torch {torch.__version__} (CUDA build: {torch.version.cuda}): torch.cuda.is_available() is False")
' 2>&1)"; then
  case "$probe" in "CUDA GPU:"*) gpu=1 ;; esac
else
  probe="torch does not import with $py: $(echo "$probe" | tail -n 1)"
  failed=1
fi
say "$probe"
if [ "$gpu" -eq 0 ]; then say "no CUDA GPU found: running on CPU"; fi
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>&1 | sed 's/^/nvidia-smi: /' | tee -a "$report"

# --- the phases' shares: caps, and what each leaves for the ones after it ------------------------------------
if [ "$smoke" -eq 1 ]; then
  test_args=(tests/test_config.py) notebook_args=(book/intro.ipynb)
  bench_args=()
  cap_install=150 cap_env=60 cap_tests=90 cap_bench=0
else
  test_args=(tests/ -m "not slow" --ignore=tests/test_browser.py)
  notebook_args=(book/)
  bench_args=()
  [ "$gpu" -eq 1 ] || bench_args=(--new-tokens 16 --repeats 1)  # the full benchmark takes minutes on a CPU
  cap_install=150 cap_env=60 cap_tests=150 cap_bench=90
fi

# --- install ------------------------------------------------------------------------------------------------
install_wheels() {  # run in its own bash (for the time limit); a --target fallback leaves its folder in $logs/pythonpath
  set -uo pipefail
  local links="$wheels" reqs="$wheels/gpu-requirements.txt" rc=0 torch_before torch_after
  [ -d "$wheels" ] || { echo "no wheel folder $wheels: make it with tools/gpu_wheels.sh (where pip reaches the registry)"; return 1; }
  [ -f "$reqs" ] || reqs="$repo_root/tools/gpu-requirements.txt"
  if [ -f "$wheels/wheels.tar.xz" ]; then
    links="$logs/wheels"; mkdir -p "$links"
    echo "unpacking $wheels/wheels.tar.xz"
    tar -xJf "$wheels/wheels.tar.xz" -C "$links" || return 1
  fi
  echo "$(find "$links" -maxdepth 1 -name '*.whl' | wc -l) wheels; installing $reqs"
  torch_before="$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  if ! "$py" -m pip install --no-index --find-links "$links" --progress-bar off -r "$reqs"; then
    rc=1
    echo "== pip install with dependencies FAILED (above): installing every wheel of the folder with --no-deps"
    if ! "$py" -m pip install --no-index --no-deps --progress-bar off "$links"/*.whl; then
      echo "== that FAILED too: installing them into $logs/site, put first on PYTHONPATH"
      "$py" -m pip install --no-index --no-deps --progress-bar off --target "$logs/site" "$links"/*.whl && echo "$logs/site" >"$logs/pythonpath"
    fi
  fi
  # the repository itself, editable like requirements.txt's `-e .` (PYTHONPATH has it in any case)
  if "$py" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 64)' 2>/dev/null; then
    "$py" -m pip install --no-index --no-deps --no-build-isolation --progress-bar off -q -e "$repo_root" \
      || echo "(the editable install of the repository failed: PYTHONPATH has it)"
  else
    echo "(no setuptools >= 64 for an editable install of the repository: PYTHONPATH has it)"
  fi
  torch_after="$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  if [ "$torch_before" != "$torch_after" ]; then echo "== torch CHANGED: $torch_before before, $torch_after after"; rc=1; fi
  echo "-- pip check (for information):"; "$py" -m pip check 2>&1 | head -n 30
  return "$rc"
}
if [ "$install" -eq 1 ]; then
  export -f install_wheels; export wheels py logs repo_root
  run_phase "install" "$cap_install" 240 plain bash -c install_wheels
  if [ -s "$logs/pythonpath" ]; then PYTHONPATH="$(cat "$logs/pythonpath"):$PYTHONPATH"; export PYTHONPATH; fi
else
  skip_phase "install" "--no-install: the environment as it is"
fi

# --- what runs: versions, against requirements.txt's pins -----------------------------------------------------
run_phase "environment" "$cap_env" 200 plain "$py" - <<'PY'
import platform, re, sys
from importlib import metadata
print(f"python {platform.python_version()} at {sys.executable}")
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"cuda available: {torch.cuda.is_available()}, {torch.get_num_threads()} CPU threads")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU 0: {p.name}, compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, "
          f"{p.multi_processor_count} SMs, bf16: {torch.cuda.is_bf16_supported()}")
import minimind
from minimind.lab.device import pick_device, pick_dtype
device = pick_device()
print(f"minimind from {minimind.__file__}; pick_device() -> {device}, pick_dtype() -> {pick_dtype(device)}")
pins = {}
for line in open("requirements.txt"):
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s#;]+)", line)
    if m:
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
for name in ["torch", "transformers", "tokenizers", "safetensors", "accelerate", "huggingface-hub", "numpy",
             "matplotlib", "opencc", "tqdm", "ipywidgets", "ipykernel", "ipython", "jupyter-client", "nbclient",
             "nbformat", "pytest", "nbval", "pytest-xdist", "scipy", "debugpy", "jedi"]:
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        version = "not installed"
    pin = pins.get(name)
    mark = "" if pin is None else ("  (= requirements.txt)" if version.split("+")[0] == pin else f"  (requirements.txt: {pin})")
    print(f"  {name:16} {version}{mark}")
PY

if [ "$jobs" = auto ]; then
  jobs=1
  if [ "$gpu" -eq 1 ] && [ "$smoke" -eq 0 ] && "$py" -c 'import xdist' >/dev/null 2>&1; then jobs=4; fi
fi
# pytest loads only the plugins named here, not whatever the machine has installed (pytest-cov, pytest-timeout,
# pytest-benchmark, ... on the GPU machine): the runs match the project's environment, and a plugin there that
# does not work with this pytest cannot stop them. nbval is needed by every run (pyproject's --nbval-current-env).
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
plugin_args=(-p nbval.plugin)
[ "$jobs" -gt 1 ] && plugin_args+=(-p xdist.plugin -n "$jobs" --dist loadfile)
echo "pytest: ${plugin_args[*]} (the machine's other pytest plugins are not loaded)" >>"$report"

# --- the quick package tests ------------------------------------------------------------------------------------
# Two test files test the book's tooling (the Chinese edition, the classroom edition), not the model: where
# their packages are not installed (the wheel folder leaves them out), they are left out, and the report says so.
ignores=()
if [ "$smoke" -eq 0 ]; then
  for entry in "tests/test_i18n.py:jieba babel sphinx_intl markdown_it mdit_py_plugins yaml" \
               "tests/test_student_edition.py:nbgrader nbconvert yaml"; do
    file="${entry%%:*}" mods="${entry#*:}"
    # shellcheck disable=SC2086
    missing="$("$py" -c 'import importlib.util, sys; print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' $mods 2>/dev/null)"
    if [ -n "$missing" ]; then
      ignores+=("--ignore=$file")
      say "(left out of the package tests: $file, tooling without GPU relevance; not installed: $missing)"
    fi
  done
fi
run_phase "package tests" "$cap_tests" 150 pytest "$py" -m pytest "${test_args[@]}" "${ignores[@]}" -q -rfE \
  --continue-on-collection-errors "${plugin_args[@]}"

# --- the chapters -------------------------------------------------------------------------------------------------
run_phase "notebooks (nbval)" 100000 $((cap_bench + 10)) pytest "$py" -m pytest --nbval "${notebook_args[@]}" -q -rfE \
  --nbval-cell-timeout=300 "${plugin_args[@]}"

# --- the benchmark --------------------------------------------------------------------------------------------
if [ "$smoke" -eq 1 ]; then
  skip_phase "benchmark" "--smoke"
else
  run_phase "benchmark" "$cap_bench" 0 plain "$py" bench/bench_generate.py "${bench_args[@]}"
fi

# --- summary ------------------------------------------------------------------------------------------------------
{
  echo
  echo "== SUMMARY ($([ "$gpu" -eq 1 ] && echo "on the GPU" || echo "no CUDA GPU found: running on CPU"); $((SECONDS - start)) s of the $budget s budget)"
  printf '%-20s %-10s %5s %7s %7s  %s\n' phase status exit seconds "at most" notes
  for i in "${!names[@]}"; do
    printf '%-20s %-10s %5s %7s %7s  %s\n' "${names[$i]}" "${statuses[$i]}" "${codes[$i]}" "${times[$i]}" "${limits[$i]}" "${notes[$i]}"
  done
  if [ "$failed" -eq 0 ]; then echo "overall: PASSED"; else echo "overall: FAILED"; fi
} | tee -a "$report"
echo "report: $report"
exit "$failed"
