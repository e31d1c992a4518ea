"""The Chinese notebooks (中文版): each chapter's notebook with its Markdown in Chinese, from the page's catalogue.

    python tools/zh_notebooks.py OUT_DIR [NOTEBOOK ...]   # write the Chinese notebooks (default: every chapter)
    python tools/zh_notebooks.py --check [NOTEBOOK ...]   # list the blocks with no translation; exit 1 if any

Sphinx translates the HTML paragraph by paragraph: a message (msgid) is the Markdown source of one paragraph,
heading, table cell or display-math block as MyST parses it (tools/i18n.py). This module finds the same blocks
in each markdown cell, with MyST's own parser and the book's extensions, and replaces each one's source lines by
its translation (msgstr), which keeps the code, math and links (`python tools/i18n.py check`). Fuzzy and empty
messages count as untranslated, as they do in the HTML. Code cells and outputs stay as
they are; the widget state's strings (descriptions, readouts, captions) are translated
with widgets.po (tools/widget_i18n.py), as in the Chinese HTML; the fold labels
(<summary>Hint 1</summary>) as book/_ext/editions.py translates them in the HTML.

`python tools/i18n.py build` writes these notebooks (and the .md pages, translated the same way) over the
Chinese HTML's `_sources/` copies, so a Chinese page's download button gives the Chinese notebook; `tools/student_edition.py --lang zh` builds the Chinese
student edition from them.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import nbformat
import yaml
from babel.messages.pofile import read_po

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "book" / "_ext"))
from editions import SUMMARY, fold_label_zh  # noqa: E402

sys.path.insert(0, str(REPO / "tools"))
import widget_i18n  # noqa: E402

PO_BOOK = REPO / "book" / "locales" / "zh_CN" / "LC_MESSAGES" / "book"  # one catalogue per page (i18n.py)
LANGUAGE = "zh"
_PIPE = re.compile(r"(?<!\\)\|")


@dataclass
class Block:
    """One translatable block of a markdown cell: Sphinx's message for it and where it sits."""
    kind: str            # "paragraph", "heading", "cell" (a table cell), "math"
    msgid: str
    lines: tuple         # [start, end) line numbers in the cell's source
    content: str         # the parser's content (a paragraph's lines without their prefixes)
    column: int = 0      # a table cell: its index in the row


# --- parsing ------------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def md_parser():
    """MyST's markdown-it parser with the book's extensions (_config.yml `parse`), block rules only, as
    myst-nb parses a notebook's markdown cells (myst_nb.core.nb_to_tokens)."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    extensions = set(config.get("parse", {}).get("myst_enable_extensions", []))
    md = create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)
    md.disable("front_matter", ignoreInvalid=True)
    rules = md.core.ruler.get_active_rules()
    md.core.ruler.enableOnly(rules[: rules.index("inline")])
    return md


def message_id(kind: str, content: str) -> str:
    """Sphinx's msgid of a block (sphinx.util.nodes.extract_messages): a math block's content as it is,
    any other block's text with its lines joined by spaces."""
    return content if kind == "math" else content.replace("\n", " ").strip()


def blocks(source: str) -> list[Block]:
    """The translatable blocks of one markdown cell, in order."""
    found, tokens = [], md_parser().parse(source, {})
    column = 0
    for i, token in enumerate(tokens):
        if token.type == "tr_open":
            column = 0
        if token.type in ("math_block", "math_block_label", "amsmath"):
            found.append(Block("math", message_id("math", token.content), tuple(token.map), token.content))
        if token.type != "inline" or not token.content.strip():
            continue
        opener = tokens[i - 1].type
        kind = {"paragraph_open": "paragraph", "heading_open": "heading", "th_open": "cell",
                "td_open": "cell"}.get(opener)
        if kind:
            found.append(Block(kind, message_id(kind, token.content), tuple(token.map), token.content, column))
        if kind == "cell":
            column += 1
    return found


# --- catalogues ---------------------------------------------------------------------------------------------

def catalogue_path(notebook: Path) -> Path:
    """The catalogue of a page: book/ch01_shapes.ipynb (or a copy of it) -> .../LC_MESSAGES/book/ch01_shapes.po."""
    return PO_BOOK / f"{Path(notebook).stem}.po"


def messages(po: Path) -> dict[str, str]:
    """{msgid: msgstr} of a catalogue, without the fuzzy and the empty ones (Sphinx's .mo leaves them out)."""
    if not po.exists():
        return {}
    with po.open("rb") as f:
        catalog = read_po(f)
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


def lookup(block: Block, translations: dict[str, str]) -> str | None:
    """A block's translation, or None."""
    found = translations.get(block.msgid)
    if found is None and block.kind == "math":  # a catalogue written with the block's ends stripped
        found = translations.get(block.msgid.strip())
    return found


# --- translating a cell -------------------------------------------------------------------------------------

def _continuation(prefix: str) -> str:
    """The prefix of a paragraph's following lines: list markers become spaces, blockquote `>`s stay."""
    return re.sub(r"[^\s>]", " ", prefix)


def _paragraph(lines: list[str], block: Block, text: str) -> list[str] | None:
    """A paragraph's (or heading's) source lines replaced by `text`, keeping the first line's prefix (`- `,
    `> `, `## `, indentation) and, for a heading, what follows its content (None: content not found)."""
    first = lines[block.lines[0]]
    head = block.content.split("\n")[0]
    start = first.find(head)
    if start < 0:
        return None
    prefix = first[:start]
    suffix = first[start + len(head):] if block.kind == "heading" else ""
    body = text.split("\n")
    new = [prefix + body[0]] + [_continuation(prefix) + line for line in body[1:]]
    new[-1] += suffix
    return new


def _math(lines: list[str], block: Block, text: str) -> list[str] | None:
    """A display-math block with its content replaced (None if the content is not found verbatim)."""
    source = "\n".join(lines[block.lines[0]:block.lines[1]])
    if block.content not in source:
        return None
    return source.replace(block.content, text, 1).split("\n")


def _table_row(line: str, cells: dict[int, str]) -> str | None:
    """A table row with cell `i` replaced by `cells[i]` (`|` escaped); None if the row does not split."""
    parts, row = _PIPE.split(line), line.strip()
    inner = range(int(row.startswith("|")), len(parts) - int(row.endswith("|") and not row.endswith("\\|")))
    if max(cells) >= len(inner):
        return None
    for column, text in cells.items():
        parts[inner[column]] = " " + text.replace("\n", " ").replace("|", "\\|") + " "
    return "|".join(parts)


def translate_labels(text: str) -> str:
    """The fold labels of raw HTML in Chinese: <summary>Hint 1</summary> -> <summary>提示 1</summary>."""
    return SUMMARY.sub(lambda m: f"<summary>{fold_label_zh(m[1])}</summary>", text)


def translate_source(source: str, translations: dict[str, str]) -> tuple[str, list[Block]]:
    """A markdown cell's source in Chinese, and the blocks left untranslated (missing from the catalogue,
    or whose source could not be rewritten)."""
    lines = source.split("\n")
    missing, rows = [], {}
    edits = []  # (start, end, new lines), applied from the bottom up
    for block in blocks(source):
        text = lookup(block, translations)
        if text is None:
            missing.append(block)
        elif block.kind == "cell":
            rows.setdefault(block.lines[0], {})[block.column] = (block, text)
        elif text != block.content:
            new = _math(lines, block, text) if block.kind == "math" else _paragraph(lines, block, text)
            if new is None:
                missing.append(block)
            else:
                edits.append((*block.lines, new))
    for row, cells in rows.items():
        new = _table_row(lines[row], {column: text for column, (_, text) in cells.items()})
        if new is None:
            missing += [block for block, _ in cells.values()]
        else:
            edits.append((row, row + 1, [new]))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new
    return translate_labels("\n".join(lines)), missing


# --- notebooks ----------------------------------------------------------------------------------------------

def translate_cells(nb, translations: dict[str, str], widget_strings=None):
    """(a copy of `nb` with every markdown cell in Chinese, its widget state translated
    with `widget_strings` (default: widgets.po) and metadata `language: zh`, the blocks
    left untranslated)."""
    nb = nbformat.from_dict(nb)  # deep copy
    untranslated = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source, missing = translate_source(cell.source, translations)
            untranslated += missing
    state = widget_i18n.widget_state(nb)
    if state:  # strings left in English: tests/test_widget_i18n.py names them
        widgets = widget_i18n.messages() if widget_strings is None else widget_strings
        nb.metadata.widgets[widget_i18n.STATE_MIME]["state"] = nbformat.from_dict(
            widget_i18n.translate_state(state, widgets)[0])
    nb.metadata["language"] = LANGUAGE
    return nb, untranslated


def translate_notebook(path: Path, po: Path | None = None):
    """The notebook at `path` with its Markdown in Chinese, from its page's catalogue (`po`: default
    catalogue_path(path)), and its widgets' strings in Chinese (widgets.po).
    Code cells and outputs unchanged."""
    nb = nbformat.read(path, as_version=4)
    translated, _ = translate_cells(nb, messages(po or catalogue_path(path)))
    return translated


def untranslated_blocks(path: Path, po: Path | None = None) -> list[Block]:
    """The blocks of the notebook at `path` that its catalogue does not translate (a test demands none)."""
    nb = nbformat.read(path, as_version=4)
    return translate_cells(nb, messages(po or catalogue_path(path)))[1]


def translate_page(path: Path, po: Path | None = None) -> str:
    """A Markdown page (book/pitfalls.md; no front matter) in Chinese, translated like a notebook's cell."""
    text, _ = translate_source(Path(path).read_text(encoding="utf-8"), messages(po or catalogue_path(path)))
    return text


def write_sources(html_dir: Path) -> list[Path]:
    """Translate the sources Sphinx copied into a Chinese HTML build in place (`html_dir`/_sources/book/
    *.ipynb and *.md: what each page's download button links to). Returns the files written."""
    written = []
    for path in sorted((Path(html_dir) / "_sources").rglob("*")):
        if path.suffix == ".ipynb":
            nbformat.write(translate_notebook(path), path)
        elif path.suffix == ".md" and catalogue_path(path).exists():
            path.write_text(translate_page(path), encoding="utf-8")
        else:
            continue
        written.append(path)
    return written


def write_notebooks(notebooks: list[Path], out_dir: Path) -> dict[Path, list[Block]]:
    """Write each notebook's Chinese version to out_dir/<name>; returns {written: untranslated blocks}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {}
    for path in notebooks:
        nb, missing = translate_cells(nbformat.read(path, as_version=4), messages(catalogue_path(path)))
        target = out_dir / Path(path).name
        nbformat.write(nb, target)
        report[target] = missing
    return report


def describe(block: Block) -> str:
    """One line for a report: where the block is, its kind and the start of its message."""
    return f"line {block.lines[0] + 1} ({block.kind}): {block.msgid[:90]!r}"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO / "tools"))
    from refresh_notebooks import toc_notebooks
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, nargs="?")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in _toc.yml")
    parser.add_argument("--check", action="store_true", help="only list the untranslated blocks")
    args = parser.parse_intermixed_args(argv)
    if args.check and args.out_dir:  # `--check NOTEBOOK ...`: the first one was taken as out_dir
        args.notebooks, args.out_dir = [args.out_dir, *args.notebooks], None
    if not args.check and not args.out_dir:
        parser.error("give OUT_DIR, or --check")
    notebooks = args.notebooks or toc_notebooks(REPO / "_toc.yml")
    if args.check:
        report = {path: untranslated_blocks(path) for path in notebooks}
    else:
        report = write_notebooks(notebooks, args.out_dir)
    for path, missing in report.items():
        print(f"{path}: {len(missing)} untranslated block(s)")
        for block in missing:
            print(f"  {describe(block)}")
    return 1 if args.check and any(report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
