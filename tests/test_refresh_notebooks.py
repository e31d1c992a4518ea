"""tools/refresh_notebooks.py: refreshing an unchanged notebook changes nothing but `nbval-ignore-output` cells.

The slow test executes tests/fixtures/fx01_fixture.ipynb twice (a print that straddles a pause, an inline PNG
figure, the same figure as SVG, a frame_player widget, exercises) and compares the two results.
"""

from __future__ import annotations

import base64
import io
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import refresh_notebooks  # noqa: E402
from refresh_notebooks import merge_streams, strip_png_software  # noqa: E402

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "fx01_fixture.ipynb"
IGNORE = "nbval-ignore-output"


def _png(software: bool) -> bytes:
    from PIL import Image, PngImagePlugin
    info = PngImagePlugin.PngInfo()
    if software:
        info.add_text("Software", "Matplotlib version3.11.2, https://matplotlib.org/")
    info.add_text("Title", "kept")
    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(buffer, format="PNG", pnginfo=info)
    return buffer.getvalue()


def test_merge_streams_merges_only_consecutive_outputs_of_one_name():
    stream = lambda name, text: new_output("stream", name=name, text=text)  # noqa: E731
    picture = new_output("display_data", data={"text/plain": "<Figure>"})
    cell = new_code_cell("", outputs=[stream("stdout", "a\n"), stream("stdout", "b\n"), stream("stderr", "w\n"),
                                      stream("stdout", "c\n"), picture, stream("stdout", "d\n"),
                                      stream("stdout", "e\n")])
    nb = new_notebook(cells=[cell])
    merge_streams(nb)
    got = [(o.output_type, o.get("name"), o.get("text")) for o in nb.cells[0].outputs]
    assert got == [("stream", "stdout", "a\nb\n"), ("stream", "stderr", "w\n"), ("stream", "stdout", "c\n"),
                   ("display_data", None, None), ("stream", "stdout", "d\ne\n")]


def test_strip_png_software_keeps_pixels_and_other_text():
    from PIL import Image
    with_software, without = _png(True), _png(False)
    stripped = strip_png_software(with_software)
    assert b"Software" in with_software and b"Software" not in stripped
    assert stripped == without  # same chunks otherwise, byte for byte
    assert Image.open(io.BytesIO(stripped)).info["Title"] == "kept"
    assert strip_png_software(b"not a png") == b"not a png"


def test_kernel_env_pins_matplotlib():
    rc = Path(refresh_notebooks.KERNEL_ENV["MATPLOTLIBRC"])
    assert rc.is_file() and "svg.hashsalt" in rc.read_text()
    assert refresh_notebooks.KERNEL_ENV["SOURCE_DATE_EPOCH"] == "0"


def _outputs_without_ignored(nb):
    return [(c.source, c.get("outputs"), c.metadata) for c in nb.cells if IGNORE not in c.metadata.get("tags", [])]


@pytest.mark.slow
def test_refresh_twice_changes_nothing_but_ignored_cells(tmp_path):
    first, second = tmp_path / "a" / FIXTURE.name, tmp_path / "b" / FIXTURE.name
    for path in (first, second):
        path.parent.mkdir()
        shutil.copy(FIXTURE, path)
    assert refresh_notebooks.main([str(first), str(second)]) == 0
    a, b = nbformat.read(first, as_version=4), nbformat.read(second, as_version=4)
    assert a.metadata == b.metadata  # widget state, ids renumbered
    assert _outputs_without_ignored(a) == _outputs_without_ignored(b)
    assert any(IGNORE in c.metadata.get("tags", []) for c in a.cells)  # the test does skip something

    # what made the difference before: one stream output per print cell, no random SVG ids or dates,
    # no matplotlib version in PNGs, and the exercise metadata written
    [pause] = [c for c in a.cells if "time.sleep" in c.source]
    assert [o.output_type for o in pause.outputs] == ["stream"]
    assert pause.outputs[0].text == "before the pause\nafter the pause\n"
    svg = next(o.data["image/svg+xml"] for c in a.cells for o in c.get("outputs", [])
               if "image/svg+xml" in o.get("data", {}))
    assert "<dc:date>1970-01-01" in svg
    pngs = [base64.b64decode(o.data["image/png"]) for c in a.cells for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]
    assert pngs and all(b"Software" not in png for png in pngs)
    assert sum("nbgrader" in c.metadata for c in a.cells) == 6
