"""Re-execute the book's notebooks in place, saving outputs and widget state for the static book.

    python tools/refresh_notebooks.py                 # every notebook in _toc.yml, in toc order
    python tools/refresh_notebooks.py book/ch03_rope.ipynb ...
    python tools/refresh_notebooks.py --toc /tmp/demo_book/_toc.yml

Runs each notebook with nbclient (kernel python3 from this environment, cwd = the notebook's
folder, 600 s per cell), stores the widget state the HTML book needs, sets the nbgrader metadata of the
exercise cells from their tags (tools/exercises.py), and removes diff noise, so that refreshing an unchanged
notebook on the same machine changes nothing but its `nbval-ignore-output` cells:
- per-cell timing metadata;
- random widget model ids (renumbered in order of creation);
- stdout/stderr split into several outputs: ipykernel sends what a cell prints in pieces, on a 0.2 s timer,
  so a print that straddles a slow statement lands in one or two outputs from run to run; consecutive
  stream outputs of the same name are merged (as Jupyter displays them);
- matplotlib: the kernel reads tools/matplotlibrc (fixed dpi, a fixed SVG hash salt instead of random
  ids), SOURCE_DATE_EPOCH=0 (no dates in SVG/PDF), and the PNG `Software` text chunk, which names the
  matplotlib version, is removed from image outputs.
Not removable here: figures of floating-point results (loss curves, activations) can differ by a few
anti-aliased pixels between machines, because torch picks different CPU kernels (AVX2 vs AVX-512, GPU) whose
last bits differ; the printed, rounded numbers agree. Refresh the notebooks on one machine.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exercises import apply_metadata, notebook_prefix  # noqa: E402
from notebook_form import apply_form  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"

# Same environment as the nbval run (conftest.py): quiet, offline, reproducible kernels.
KERNEL_ENV = {
    "TQDM_DISABLE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_OFFLINE": "1",
    "PYTHONHASHSEED": "0",
    # OpenMP threads sleep instead of spinning while they wait: on a shared or busy CPU, spinning torch
    # threads made small forward passes several times slower (a 64M-model chapter: ~80 s -> ~53 s).
    "OMP_WAIT_POLICY": "PASSIVE",
    "MATPLOTLIBRC": str(Path(__file__).resolve().parent / "matplotlibrc"),
    "SOURCE_DATE_EPOCH": "0",
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def toc_files(toc_path: Path) -> list[str]:
    """The file entries of a jb-book _toc.yml in reading order (root first), as written there."""
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    files: list[str] = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return files


def toc_notebooks(toc_path: Path) -> list[Path]:
    """The .ipynb files named in a jb-book _toc.yml, in reading order (root first)."""
    notebooks = []
    for name in toc_files(toc_path):
        path = toc_path.parent / name
        candidate = path if path.suffix == ".ipynb" else path.with_suffix(".ipynb")
        if candidate.exists():
            notebooks.append(candidate)
    return notebooks


def _renumber_widget_ids(nb) -> None:
    """Replace nbclient's random model ids by stable ones, so re-running gives a small diff."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE_MIME, {}).get("state", {})
    if not state:
        return
    mapping = {old: f"{i:032x}" for i, old in enumerate(state, start=1)}
    text = json.dumps(nb)
    for old, new in mapping.items():
        text = text.replace(old, new)
    renumbered = nbformat.from_dict(json.loads(text))
    nb.clear()
    nb.update(renumbered)


def merge_streams(nb) -> None:
    """Merge consecutive stream outputs of the same name (stdout, stderr) into one, in every code cell."""
    for cell in nb.cells:
        merged = []
        for output in cell.get("outputs", []):
            if (output.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                    and merged[-1].get("name") == output.get("name")):
                merged[-1]["text"] = "".join(merged[-1]["text"]) + "".join(output["text"])
            else:
                merged.append(output)
        if "outputs" in cell:
            cell.outputs = merged


def strip_png_software(png: bytes) -> bytes:
    """The same PNG without the tEXt/iTXt/zTXt `Software` chunk (pixels untouched)."""
    if not png.startswith(PNG_SIGNATURE):
        return png
    out, pos = [PNG_SIGNATURE], len(PNG_SIGNATURE)
    while pos + 8 <= len(png):
        length = int.from_bytes(png[pos:pos + 4], "big")
        chunk_type = png[pos + 4:pos + 8]
        end = pos + 12 + length
        data = png[pos + 8:pos + 8 + length]
        if not (chunk_type in (b"tEXt", b"iTXt", b"zTXt") and data.split(b"\0", 1)[0] == b"Software"):
            out.append(png[pos:end])
        pos = end
    return b"".join(out)


def _strip_b64(text: str) -> str:
    png = base64.b64decode(text)
    stripped = strip_png_software(png)
    if stripped == png:
        return text
    return base64.b64encode(stripped).decode("ascii") + ("\n" if text.endswith("\n") else "")


def strip_png_metadata(nb) -> None:
    """Remove the matplotlib-version text chunk from every PNG output and every PNG in the widget state."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if isinstance(data.get("image/png"), str):
                data["image/png"] = _strip_b64(data["image/png"])
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE_MIME, {}).get("state", {})
    for model in state.values():
        for buffer in model.get("buffers", []):
            if buffer.get("encoding") == "base64" and isinstance(buffer.get("data"), str):
                buffer["data"] = _strip_b64(buffer["data"])


def clean_metadata(nb) -> None:
    """Strip per-cell timing; drop widget metadata when the run displayed no widgets."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
    widgets = nb.metadata.get("widgets")
    if widgets is not None and not widgets.get(WIDGET_STATE_MIME, {}).get("state"):
        del nb.metadata["widgets"]


def refresh(path: Path, timeout: int = 600) -> float:
    """Execute one notebook in place; return its runtime in seconds."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)  # stale state from an earlier run must not survive
    apply_metadata(nb, notebook_prefix(path))
    apply_form(nb)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    clean_metadata(nb)
    merge_streams(nb)
    strip_png_metadata(nb)
    _renumber_widget_ids(nb)
    nbformat.write(nb, path)
    return elapsed


def prepare_environment() -> None:
    os.environ.update(KERNEL_ENV)
    # The python3 kernelspec runs `python` from PATH: make that this environment's interpreter.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in the toc")
    parser.add_argument("--toc", type=Path, default=REPO_ROOT / "_toc.yml")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)

    notebooks = [p.resolve() for p in args.notebooks] or toc_notebooks(args.toc)
    if not notebooks:
        print("no notebooks to run", file=sys.stderr)
        return 1
    prepare_environment()
    total = 0.0
    for path in notebooks:
        print(f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path} ...",
              end=" ", flush=True)
        elapsed = refresh(path, args.timeout)
        total += elapsed
        print(f"{elapsed:.1f} s", flush=True)
    print(f"{len(notebooks)} notebook(s) in {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
