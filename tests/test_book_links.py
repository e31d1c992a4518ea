"""Links between the book's pages that point at a section (`page.ipynb#slug`) land on a heading.

Fast: the slugs are computed with myst-parser's own function (`myst_heading_anchors: 3` in
_config.yml), from the committed notebooks, as the build computes them. A renamed heading breaks the
pitfalls page's and the glossary's links; this names the link and the page long before a build.
"""
import json
import re
from pathlib import Path

import pytest
from markdown_it.tree import SyntaxTreeNode
from myst_parser.config.main import MdParserConfig
from myst_parser.mdit_to_docutils.base import DocutilsRenderer, compute_unique_slug
from myst_parser.parsers.mdit import create_md_parser

BOOK = Path(__file__).resolve().parents[1] / "book"
DEPTH = 3  # myst_heading_anchors
LINK = re.compile(r"\]\(((?:[\w./-]+)\.(?:ipynb|md))#([^)\s]+)\)")


def _markdown_sources(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")]
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def _slugs(path: Path) -> set[str]:
    md = create_md_parser(MdParserConfig(enable_extensions={"colon_fence", "dollarmath", "amsmath",
                                                            "substitution"}), DocutilsRenderer)
    seen: dict[str, int] = {}
    for source in _markdown_sources(path):
        for node in SyntaxTreeNode(md.parse(source, {})).walk():
            if node.type == "heading" and int(node.tag[1]) <= DEPTH:
                seen[compute_unique_slug(node, seen)] = 1
    return set(seen)


PAGES = sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_section_link_lands_on_a_heading(page):
    broken = []
    for source in _markdown_sources(page):
        for target, slug in LINK.findall(source):
            linked = (page.parent / target).resolve()
            if not linked.exists():
                broken.append(f"{target}#{slug}: no such page")
            elif slug not in _slugs(linked):
                broken.append(f"{target}#{slug}: no heading with that anchor")
    assert not broken, f"{page.name}: {len(broken)} broken section links, e.g. {broken[:3]}"
