#!/usr/bin/env bash
# Prepare, HERE (a machine that reaches the package registry), the wheels that tools/gpu_check.sh installs on a
# GPU machine without network: CPython 3.12, manylinux x86_64, what tools/gpu-requirements.txt needs with its
# dependencies, except torch (the GPU machine keeps its own) and what tools/gpu-present.txt says is there.
#
#   tools/gpu_wheels.sh [DIR]        into DIR (default gpu_wheels/ in the repository)
#     --force                        DIR holds another set, or files of unknown origin: replace them
#     --resolve-only                 resolve only: print the set on stdout (NAME==VERSION), write nothing
#     --no-bundle                    plain .whl files in DIR instead of one wheels.tar.xz (about 3 times larger)
#     --requirements FILE            default tools/gpu-requirements.txt
#     --present FILE|none            what the GPU machine has: NAME[==VERSION] lines, or `pip list --format=freeze`
#                                    from there; default tools/gpu-present.txt; none: carry everything
#     --torch VERSION                the GPU machine's torch (default: the present file's, else 2.11.0)
#     --python PY                    a Python 3.12 with pip (default: python3.12, else pyenv's 3.12)
#
# How. pip resolves the requirements for cp312 manylinux (`pip install --dry-run --report`: metadata only, no
# download) against a stand-in torch wheel of the GPU machine's version, so accelerate's and transformers' torch
# requirements are checked against that version and no torch can be pulled. The set is what the requirements
# reach in the resolved metadata, walking no further below a package the GPU machine has (at the resolved
# version, or at a known version that satisfies every range asked of it, or at a version not known here and not
# pinned); `pip download --no-deps` fetches exactly that set. Spare copies (1 MiB at most each) of the packages
# present there at a version not known here go along, in case that version is too old: pip takes one only then.
# Lines marked "# stand-in" get a wheel with the name and version and no files. The wheels are repacked
# uncompressed and bundled as wheels.tar.xz (xz packs stored files far better than zip's deflate).
#
# DIR ends up with wheels.tar.xz (or the .whl files), gpu-requirements.txt (what gpu_check.sh installs),
# gpu-lock.txt (every wheel, NAME==VERSION), gpu-left-out.txt (what the GPU machine has, and the ranges asked of
# it) and .gpu-wheels-set (which set this is: another set is not written over without --force). The last lines
# give DIR's size, and the total with the repository's working tree: at most 64 MiB travel to the GPU machine.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="" force=0 resolve_only=0 bundle=1 py="" torch_version=""
requirements="$repo_root/tools/gpu-requirements.txt"
present="$repo_root/tools/gpu-present.txt"
travel_max_mib=64
spare_max_kib=1024

die() { echo "gpu_wheels.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --resolve-only) resolve_only=1 ;;
    --no-bundle) bundle=0 ;;
    --requirements) requirements="${2:?--requirements needs a file}"; shift ;;
    --present) present="${2:?--present needs a file or none}"; shift ;;
    --torch) torch_version="${2:?--torch needs a version}"; shift ;;
    --python) py="${2:?--python needs an interpreter}"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$dir" ] || die "one folder only (got $dir and $1)"; dir="$1" ;;
  esac
  shift
done
dir="${dir:-$repo_root/gpu_wheels}"
[ -f "$requirements" ] || die "no requirements file $requirements"
[ "$present" = none ] || [ -f "$present" ] || die "no present file $present (or say --present none)"
log() { if [ "$resolve_only" -eq 1 ]; then echo "$@" >&2; else echo "$@"; fi; }

# --- a Python 3.12 with pip: pip evaluates environment markers (python_version >= "3.12", ...) for the
# interpreter it runs in, whatever --python-version says, so resolve with the GPU machine's minor version -------
find_python() {
  local cand pyenv_root=""
  command -v pyenv >/dev/null 2>&1 && pyenv_root="$(pyenv root 2>/dev/null || true)"
  for cand in "$py" python3.12 ${pyenv_root:+"$pyenv_root"/versions/3.12*/bin/python3.12}; do
    [ -n "$cand" ] || continue
    if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12); import pip' >/dev/null 2>&1; then
      echo "$cand"; return 0
    fi
  done
  return 1
}
if ! py312="$(find_python)"; then
  [ -z "$py" ] || die "--python $py is not a Python 3.12 with pip"
  py312="$(command -v python3)"
  echo "gpu_wheels.sh: WARNING no Python 3.12 with pip found: resolving with $("$py312" -V 2>&1), whose" \
       "environment markers may differ from 3.12's (pass --python)" >&2
fi

# The GPU machine: CPython 3.12 on x86_64 Linux. Its torch 2.11 is a manylinux_2_28 wheel, so its glibc is 2.28
# or later; pip matches platform tags exactly, hence the list.
platform_args=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_25 manylinux_2_24 manylinux_2_23 manylinux_2_22 \
           manylinux_2_21 manylinux_2_20 manylinux_2_19 manylinux_2_18 manylinux_2_17 manylinux2014 manylinux_2_12 \
           manylinux2010 manylinux_2_5 manylinux1; do
  platform_args+=(--platform "${tag}_x86_64")
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/stub" "$tmp/wheels" "$tmp/spare" "$tmp/stored"
# pip's notes about index locations it skips say nothing about this set
quiet_pip() { grep -v -e 'is ignored: it is neither a file nor a directory' -e '^$' || true; }

# --- the present file, normalised to NAME==VERSION or NAME lines; the GPU machine's torch -----------------------
if [ "$present" = none ]; then : >"$tmp/present.txt"; else
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$present" >"$tmp/present.txt"
fi
if [ -z "$torch_version" ]; then
  torch_version="$(grep -i -m1 '^torch==' "$tmp/present.txt" | sed 's/^[^=]*==//; s/+.*//' || true)"
  torch_version="${torch_version:-2.11.0}"
fi

# --- one set per folder ----------------------------------------------------------------------------------------
set_id="$( { echo "gpu-wheels set v2 bundle=$bundle"; cat "$requirements" "$tmp/present.txt"; echo "torch $torch_version";
             printf '%s\n' "${platform_args[@]}"; } | sha256sum | cut -c1-16)"
ours=(wheels.tar.xz gpu-requirements.txt gpu-lock.txt gpu-left-out.txt .gpu-wheels-set)
if [ "$resolve_only" -eq 0 ]; then
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [ -n "$(ls -A "$dir")" ]; then
    old_id="$(cat "$dir/.gpu-wheels-set" 2>/dev/null || echo none)"
    if [ "$old_id" = "$set_id" ]; then
      echo "== $dir holds this set ($set_id) already: making it again"
    elif [ "$force" -eq 1 ]; then
      echo "== --force: replacing the set in $dir ($old_id) with this one ($set_id)"
    else
      die "$dir is not empty and holds another set (its .gpu-wheels-set: $old_id; this one: $set_id):" \
          "name another folder, or add --force to replace it"
    fi
  fi
fi
log "== resolving $requirements for CPython 3.12 manylinux x86_64 with $("$py312" -V 2>&1) ($py312)," \
    "against the GPU machine's torch $torch_version (not downloaded)"

# --- wheels with a name and a version and nothing else: torch here, the "# stand-in" lines in the folder --------
stub_wheel() {  # stub_wheel FOLDER NAME VERSION
  "$py312" - "$@" <<'PY'
import base64, hashlib, re, sys, zipfile
folder, name, version = sys.argv[1:]
dist = re.sub(r"[-_.]+", "_", name)
info = f"{dist}-{version}.dist-info"
files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             "Summary: stand-in made by tools/gpu_wheels.sh: the name and the version, no files\n",
         f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpu_wheels.sh\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = []
with zipfile.ZipFile(f"{folder}/{dist}-{version}-py3-none-any.whl", "w") as wheel:
    for path, text in files.items():
        wheel.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text)}")
    wheel.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)),
                   "\n".join(record + [f"{info}/RECORD,,"]) + "\n")
PY
}
stub_wheel "$tmp/stub" torch "$torch_version+gpumachine"

# --- packages that publish no wheel ("# build: sdist"): a pure-Python wheel built here ------------------------
grep -E '#[[:space:]]*build:[[:space:]]*sdist' "$requirements" | sed 's/#.*//; s/[[:space:]]//g' >"$tmp/sdist.txt" || true
while IFS= read -r req; do
  [ -n "$req" ] || continue
  log "== building a wheel of $req (it publishes only an sdist)"
  "$py312" -m pip wheel --no-deps --progress-bar off -q -w "$tmp/wheels" "$req" 2>&1 | quiet_pip >&2
done <"$tmp/sdist.txt"
for whl in "$tmp/wheels"/*.whl; do
  [ -e "$whl" ] || break
  case "$whl" in *-none-any.whl) ;; *) die "$(basename "$whl") is not pure Python: a wheel built here would not install there" ;; esac
done

# --- resolve ------------------------------------------------------------------------------------------------
{ sed 's/#.*//' "$requirements"; echo "torch==$torch_version+gpumachine"; } >"$tmp/resolve.txt"
if ! "$py312" -m pip install --dry-run --ignore-installed --progress-bar off -q --report "$tmp/report.json" \
      --target "$tmp/target" "${platform_args[@]}" --find-links "$tmp/stub" --find-links "$tmp/wheels" \
      -r "$tmp/resolve.txt" >"$tmp/resolve.log" 2>&1; then
  quiet_pip <"$tmp/resolve.log" | tail -n 30 >&2
  echo "gpu_wheels.sh: resolution FAILED (above). A package that publishes only an sdist goes into" \
       "$requirements as NAME==VERSION  # build: sdist" >&2
  exit 1
fi

# --- the set: from the requirements through the resolved metadata ---------------------------------------------
"$py312" - "$tmp" "$requirements" <<'PY'
import json, re, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.version import Version

tmp, requirements_path = sys.argv[1:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
report = json.load(open(f"{tmp}/report.json"))
env = report["environment"]
resolved = {norm(item["metadata"]["name"]): item["metadata"] for item in report["install"]}

roots, standin_names = [], set()
for line in open(requirements_path):
    text, _, comment = line.partition("#")
    if text.strip():
        roots.append(Requirement(text.strip()))
        if re.match(r"\s*stand-in\b", comment):
            standin_names.add(norm(roots[-1].name))
pinned = {norm(r.name) for r in roots if [s.operator for s in r.specifier] == ["=="]}
present = {}
for line in open(f"{tmp}/present.txt"):
    name, _, version = line.strip().partition("==")
    present[norm(name)] = version.split("+")[0] or None

bad = [f"{n} {m['version']}" for n, m in resolved.items()
       if re.match(r"^(torch|torchvision|torchaudio|triton|nvidia-.*)$", n) and not m["version"].endswith("+gpumachine")]
if bad:
    sys.exit(f"gpu_wheels.sh: the resolved set pulls {', '.join(bad)}: the GPU machine's own torch must stay")

def applies(req, extras):
    return req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in extras | {""})

def asked(name, asks):
    return ", ".join(sorted(f"{spec} by {parent}" for parent, spec in asks.get(name, ()))) or "any"

def walk(asks):
    """Carried, stand-in, left out and spare packages, given the ranges asked of each by carried packages."""
    carried, standin, left, spare, new_asks, extras_of, seen = {}, {}, {}, {}, {}, {}, set()
    queue = [(norm(r.name), set(r.extras), "the requirements", r) for r in roots]
    while queue:
        name, extras, parent, req = queue.pop(0)
        new_asks.setdefault(name, set()).add((parent, str(req.specifier) or "any"))
        extras_of.setdefault(name, set()).update(extras)
        if (name, frozenset(extras_of[name])) in seen:
            continue
        seen.add((name, frozenset(extras_of[name])))
        if name not in resolved:
            sys.exit(f"gpu_wheels.sh: {parent} requires {req}, which pip did not resolve")
        version = resolved[name]["version"]
        if version.endswith("+gpumachine"):
            left[name] = f"the GPU machine's torch {version.split('+')[0]}"
            continue
        if name in standin_names:
            standin[name] = version
            continue
        if name in present:
            have = present[name]
            if have == version:
                left[name] = f"there at {have}, the version resolved"
                continue
            if name not in pinned and have is None:
                left[name] = f"there, version not known here; asked: {asked(name, asks)}"
                spare[name] = version
                continue
            if name not in pinned and all(Requirement(f"x{spec}").specifier.contains(Version(have), prereleases=True)
                                          for _, spec in asks.get(name, ()) if spec != "any"):
                left[name] = f"there at {have}, which satisfies what is asked: {asked(name, asks)}"
                continue
        carried[name] = version
        for text in resolved[name].get("requires_dist") or []:
            child = Requirement(text)
            if applies(child, extras_of[name]):
                queue.append((norm(child.name), set(child.extras), f"{name} {version}", child))
    return carried, standin, left, spare, new_asks

asks, previous = {}, None
for _ in range(20):  # what is asked depends on what is carried: again until nothing changes
    carried, standin, left, spare, asks_now = walk(asks)
    if carried == previous:
        break
    previous, asks = carried, asks_now

display = lambda name: resolved[name]["name"]
with open(f"{tmp}/lock.txt", "w") as out:
    out.writelines(f"{display(n)}=={carried[n]}\n" for n in sorted(carried))
with open(f"{tmp}/standin.txt", "w") as out:
    out.writelines(f"{display(n)} {standin[n]}+standin\n" for n in sorted(standin))
with open(f"{tmp}/spare.txt", "w") as out:
    out.writelines(f"{display(n)}=={spare[n]}\n" for n in sorted(spare))
with open(f"{tmp}/left-out.txt", "w") as out:
    out.write("# the GPU machine has these (tools/gpu_wheels.sh, from the present file):\n")
    out.writelines(f"{n}: {left[n]}\n" for n in sorted(left))
below = sorted(set(resolved) - set(carried) - set(standin) - set(left))
print(f"   {len(carried)} packages to carry, {len(standin)} stand-ins, {len(left)} left out (the GPU machine has "
      f"them), {len(below)} more resolved but needed only below those", file=sys.stderr)
PY

if [ "$resolve_only" -eq 1 ]; then
  cat "$tmp/lock.txt"
  sed 's/ /==/' "$tmp/standin.txt"
  grep -v '^#' "$tmp/left-out.txt" | sed 's/^/   left out: /' >&2
  exit 0
fi

# --- download exactly that set, the spares, and make the stand-ins -------------------------------------------
download() {  # download FOLDER LIST
  "$py312" -m pip download --no-deps --progress-bar off -q -d "$1" --find-links "$tmp/wheels" "${platform_args[@]}" \
    -r "$2" >"$tmp/download.log" 2>&1 || { quiet_pip <"$tmp/download.log" | tail -n 30 >&2; die "download FAILED (above)"; }
}
echo "== downloading $(wc -l <"$tmp/lock.txt") wheels"
download "$tmp/wheels" "$tmp/lock.txt"
cp "$tmp/left-out.txt" "$tmp/left-out.final"
if [ -s "$tmp/spare.txt" ]; then
  echo "== downloading spare copies of what the GPU machine has at a version not known here (kept if $spare_max_kib KiB or less)"
  download "$tmp/spare" "$tmp/spare.txt"
  echo "# spare copies, used there only where the version there is too old:" >>"$tmp/left-out.final"
  for whl in "$tmp/spare"/*.whl; do
    kib=$(( $(stat -c %s "$whl") / 1024 ))
    if [ "$kib" -le "$spare_max_kib" ]; then
      mv "$whl" "$tmp/wheels/"; echo "spare copy: $(basename "$whl") ($kib KiB)" >>"$tmp/left-out.final"
    else
      echo "no spare copy (too large): $(basename "$whl") ($kib KiB)" >>"$tmp/left-out.final"
    fi
  done
fi
while read -r name version; do
  stub_wheel "$tmp/wheels" "$name" "$version"
done <"$tmp/standin.txt"

# --- every wheel once, and nothing missing ---------------------------------------------------------------------
"$py312" - "$tmp" <<'PY'
import os, re, sys
from pip._vendor.packaging.version import Version
tmp = sys.argv[1]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
want = {}
for line in open(f"{tmp}/lock.txt"):
    name, _, version = line.strip().partition("==")
    want[norm(name)] = Version(version)
for line in open(f"{tmp}/standin.txt"):
    name, version = line.split()
    want[norm(name)] = Version(version)
have = {}
for wheel in sorted(os.listdir(f"{tmp}/wheels")):
    name, version = wheel.split("-")[:2]
    name = norm(name)
    if name in have:
        sys.exit(f"gpu_wheels.sh: two wheels of {name}: {have[name][1]} and {wheel}")
    have[name] = (Version(version.replace("_", "-")), wheel)
missing = [f"{n}=={v}" for n, v in want.items() if have.get(n, (None,))[0] != v]
if missing:
    sys.exit(f"gpu_wheels.sh: no wheel for {', '.join(missing)}")
with open(f"{tmp}/lock.final", "w") as out:
    out.writelines(f"{wheel.split('-')[0]}=={version}\n" for _, (version, wheel) in sorted(have.items()))
PY

# --- into DIR ------------------------------------------------------------------------------------------------
for f in "${ours[@]}"; do rm -f "${dir:?}/$f"; done
rm -f "$dir"/*.whl
others="$(ls -A "$dir")"
[ -z "$others" ] || echo "== left in $dir, not made by this script: $(echo "$others" | tr '\n' ' ')"
count="$(find "$tmp/wheels" -name '*.whl' | wc -l)"
if [ "$bundle" -eq 1 ]; then
  echo "== repacking $count wheels uncompressed and bundling them as $dir/wheels.tar.xz (xz -9: a minute or two)"
  "$py312" - "$tmp/wheels" "$tmp/stored" <<'PY'
import os, sys, zipfile
src, dst = sys.argv[1:]
for wheel in sorted(os.listdir(src)):
    with zipfile.ZipFile(os.path.join(src, wheel)) as zin, \
         zipfile.ZipFile(os.path.join(dst, wheel), "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():  # same names, order, dates and modes: only the compression changes
            data = zin.read(info)
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)
PY
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/stored" -cf - . \
    | xz -9 -T2 >"$dir/wheels.tar.xz"
  raw_mib="$(du -sb "$tmp/wheels" | awk '{ printf "%.1f", $1 / 1048576 }')"
  echo "   ($raw_mib MiB as downloaded)"
else
  cp "$tmp/wheels"/*.whl "$dir/"
fi
cp "$tmp/lock.final" "$dir/gpu-lock.txt"
cp "$tmp/left-out.final" "$dir/gpu-left-out.txt"
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$requirements" >"$dir/gpu-requirements.txt"
echo "$set_id" >"$dir/.gpu-wheels-set"

# --- sizes: what travels is the working tree (tracked and untracked files git does not ignore) and the carried paths
bytes="$(du -sb "$dir" | cut -f1)"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "== $dir: $count wheels, $(mib "$bytes") MiB ($bytes bytes)"
tree_size() {  # bytes of the working tree that travels, less DIR
  (cd "$repo_root" && "$py312" - "$dir" 2>/dev/null) <<'PY'
import os, subprocess, sys
skip = os.path.realpath(sys.argv[1]) + os.sep
out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                     capture_output=True, check=True).stdout
paths = {p for p in out.decode(errors="surrogateescape").split("\0") if p}
print(sum(os.path.getsize(p) for p in paths
          if os.path.isfile(p) and not os.path.realpath(p).startswith(skip)))
PY
}
tree_bytes="$(tree_size || echo 0)"
if [ "${tree_bytes:-0}" -gt 0 ]; then
  total=$((tree_bytes + bytes))
  verdict="fits"
  [ "$total" -le $((travel_max_mib * 1048576)) ] || verdict="DOES NOT FIT"
  echo "== with the repository's working tree ($(mib "$tree_bytes") MiB): $(mib "$total") MiB of the $travel_max_mib MiB" \
       "that travel to the GPU machine: $verdict"
  [ "$verdict" = fits ] || echo "   leave out more (what the GPU machine has: --present with a pip freeze from there)"
fi
