"""Every live-source listing saved in a chapter still matches the file it quotes, line by line.

Fast: reads the committed notebooks, runs nothing. `show_source` prints file line numbers, so adding
a line above a quoted function in its module changes the listing; nbval would catch it minutes later,
this catches it in the quick tests (and names the notebook to refresh).
"""
import html
import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from refresh_notebooks import toc_notebooks  # noqa: E402

sys.path.insert(0, str(ROOT))
from minimind.lab.book import REGION_END, REGION_START  # noqa: E402

NOTEBOOKS = toc_notebooks(ROOT / "_toc.yml")
HEADER = re.compile(r'<div class="live-source"><div[^>]*>([\w/]+\.py), lines (\d+)–(\d+)</div>(.*?)'
                    r'</div>\s*$', re.S)


def listings(path):
    """(cell index, file, first, last, listed text) for every live-source output of a notebook."""
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for out in cell.get("outputs", []):
            page = "".join(out.get("data", {}).get("text/html", ""))
            if 'class="live-source"' in page:
                where, first, last, code = HEADER.search(page).groups()
                yield i, where, int(first), int(last), html.unescape(re.sub(r"<[^>]+>", "", code))


def module_file(where):
    spec = importlib.util.find_spec(where[:-3].replace("/", "."))
    return Path(spec.origin)


def stale_lines(where, first, last, listed):
    """The lines of the file's range that the listing does not show under their own number."""
    lines = module_file(where).read_text().splitlines()[first - 1:last]
    shown = {int(m[1]): m[2].strip() for m in re.finditer(r"^\s*(\d+)(.*)$", listed, re.M)}
    return [n for n, line in enumerate(lines, first)
            if line.strip() and not line.strip().startswith((REGION_START, REGION_END))
            and shown.get(n) != line.strip()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_live_source_listing_matches_its_file(path):
    stale = [(i, where, lines[0]) for i, where, first, last, listed in listings(path)
             if (lines := stale_lines(where, first, last, listed))]
    assert not stale, (f"{len(stale)} live-source listing(s) no longer match their file (first: cell "
                       f"{stale[0][0]}, {stale[0][1]} line {stale[0][2]}): refresh with "
                       f"python tools/refresh_notebooks.py {path.relative_to(ROOT)}")


def test_a_shifted_listing_is_caught():
    path = next(p for p in NOTEBOOKS if p.stem == "ch02_rmsnorm")
    i, where, first, last, listed = next(listings(path))
    assert stale_lines(where, first, last, listed) == []
    renumbered = re.sub(r"^(\s*)(\d+)", lambda m: f"{m[1]}{int(m[2]) + 1}", listed, flags=re.M)
    assert stale_lines(where, first + 1, last + 1, renumbered) != []  # a line was added above
