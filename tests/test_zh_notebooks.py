"""The Chinese notebooks (tools/zh_notebooks.py) and the Chinese student edition (tools/student_edition.py
--lang zh).

Fast tests: the block rewriting on small Markdown, and per chapter of _toc.yml (with the committed catalogues):
every block translated, the blocks found are exactly the catalogue's messages (what Sphinx extracts), the
Chinese Markdown parses into the same blocks, code cells and outputs unchanged, only the
widget strings of the metadata translated, fold labels in Chinese, and the Chinese
student edition with the English one's cells, grade ids and points. The slow test
executes one Chinese student notebook: only its `check` cells fail, as in English.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import exercises  # noqa: E402
import widget_i18n  # noqa: E402
import zh_notebooks as zh  # noqa: E402
from refresh_notebooks import KERNEL_ENV, toc_notebooks  # noqa: E402
from student_edition import student_notebook, translations, write_student_edition  # noqa: E402

CHAPTERS = toc_notebooks(REPO / "_toc.yml")
WITH_EXERCISES = [p for p in CHAPTERS if any(exercises.kind(c) == exercises.CHECK
                                             for c in nbformat.read(p, as_version=4).cells)]
LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def _ids(path):
    return path.stem


# --- rewriting a cell ---------------------------------------------------------------------------------------

SOURCE = """## The loss, step by step

First line of a paragraph
that goes on.

1. an item
   on two lines
2. another

> quoted line one
> quoted line two

| name | value \\| unit |
|---|---|
| `x` | three |

$$
\\text{loss} = 1
$$ (eq-loss)

<details class="hint"><summary>Hint 2</summary>

The hint.

</details>"""

ZH = {"The loss, step by step": "逐步计算损失", "First line of a paragraph that goes on.": "一个段落的第一行。",
      "an item on two lines": "一个跨两行的条目", "another": "另一个", "quoted line one quoted line two": "引文",
      "name": "名称", "value | unit": "值 | 单位", "`x`": "`x`", "three": "三",
      "\n\\text{loss} = 1\n": "\n\\text{损失} = 1\n", "The hint.": "提示内容。"}


def test_a_cell_is_translated_block_by_block():
    text, missing = zh.translate_source(SOURCE, ZH)
    assert missing == []
    assert text == """## 逐步计算损失

一个段落的第一行。

1. 一个跨两行的条目
2. 另一个

> 引文

| 名称 | 值 \\| 单位 |
|---|---|
| `x` | 三 |

$$
\\text{损失} = 1
$$ (eq-loss)

<details class="hint"><summary>提示 2</summary>

提示内容。

</details>"""
    assert [b.kind for b in zh.blocks(text)] == [b.kind for b in zh.blocks(SOURCE)]


def test_the_messages_are_sphinx_s():
    """Lines joined by spaces, a table cell unescaped, a math block's content as it is (as in the .po)."""
    assert [b.msgid for b in zh.blocks(SOURCE)] == list(ZH)


def test_a_block_without_translation_is_reported_and_kept():
    partial = {k: v for k, v in ZH.items() if k != "another"}
    text, missing = zh.translate_source(SOURCE, partial)
    assert [b.msgid for b in missing] == ["another"]
    assert "2. another" in text and "一个跨两行的条目" in text


def test_a_multi_line_translation_keeps_the_list_indent():
    text, _ = zh.translate_source("- an item\n- two", {"an item": "第一行\n第二行"})
    assert text == "- 第一行\n  第二行\n- two"


def test_the_download_copies_are_translated(tmp_path):
    """`i18n.py build` calls write_sources on the Chinese HTML: _sources/book/<page>.ipynb (the download
    button's target, see test_browser.py::test_the_chinese_download_button_gets_the_chinese_notebook) becomes the Chinese notebook."""
    chapter = CHAPTERS[1]
    copy = tmp_path / "_sources" / "book" / chapter.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(chapter.read_bytes())
    assert zh.write_sources(tmp_path) == [copy]
    written = nbformat.read(copy, as_version=4)
    assert written.metadata["language"] == "zh" and written == zh.translate_notebook(chapter)


# --- every chapter ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids)
def test_every_block_is_translated(chapter):
    """Fails while a chapter's catalogue lags its English: python tools/i18n.py update, then translate."""
    missing = zh.untranslated_blocks(chapter)
    assert not missing, f"{len(missing)} block(s) in English:\n  " + "\n  ".join(map(zh.describe, missing))


def _captions() -> set[str]:
    import yaml
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    return {part["caption"] for part in toc.get("parts", []) if "caption" in part}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids)
def test_the_blocks_are_the_catalogue_s_messages(chapter):
    """The blocks found are the messages Sphinx extracted (the root page's catalogue also holds the toc's
    part captions); a message of no block is an old paragraph: python tools/i18n.py update."""
    nb = nbformat.read(chapter, as_version=4)
    found = {b.msgid for cell in nb.cells if cell.cell_type == "markdown" for b in zh.blocks(cell.source)}
    catalogue = set(zh.messages(zh.catalogue_path(chapter)))
    assert catalogue - found - _captions() == set()


def _leaves(value, path=()):
    """(path, value) of every leaf of a JSON value; a list's items by index."""
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from _leaves(item, (*path, key))
    else:
        yield path, value


def _string_path(found) -> tuple:
    """Where a widget string (widget_i18n.Found) sits in the notebook's metadata."""
    key, _, index = found.field.partition("[")
    path = ("widgets", widget_i18n.STATE_MIME, "state", found.model_id, "state", key)
    return path + ((int(index[:-1]),) if index else ())


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids)
def test_only_the_markdown_and_the_widget_strings_change(chapter):
    """Code cells and outputs are the English ones; the notebook's metadata differs from
    the English only in `language` and in the widget strings widgets.po translates, each
    of them replaced by its translation (an HTML caption inside its wrapper)."""
    english, chinese = nbformat.read(chapter, as_version=4), zh.translate_notebook(chapter)
    assert len(english.cells) == len(chinese.cells)
    for a, b in zip(english.cells, chinese.cells):
        assert (a.cell_type, a.metadata) == (b.cell_type, b.metadata)
        if a.cell_type == "code":
            assert a == b  # source, outputs, execution count
    assert chinese.metadata.pop("language") == "zh"
    before, after = dict(_leaves(english.metadata)), dict(_leaves(chinese.metadata))
    assert before.keys() == after.keys()  # the same models, fields and options
    catalogue = widget_i18n.messages()
    found = widget_i18n.extract(widget_i18n.widget_state(english))
    wanted = {_string_path(f): f for f in found
              if catalogue.get(f.msgid, f.msgid) != f.msgid}
    changed = {path for path in before if before[path] != after[path]}
    assert changed == wanted.keys()
    for path, f in wanted.items():
        head, _, tail = widget_i18n.split(before[path], path[5])
        assert after[path] == head + catalogue[f.msgid] + tail, path
    nbformat.validate(chinese)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids)
def test_the_chinese_markdown_parses_into_the_same_blocks(chapter):
    """Each translated block is one block of the same kind again, whose message is the msgstr (a msgstr
    such as `1. 先测量` would have become a list)."""
    translated = zh.messages(zh.catalogue_path(chapter))
    english, chinese = nbformat.read(chapter, as_version=4), zh.translate_notebook(chapter)
    for a, b in zip(english.cells, chinese.cells):
        if a.cell_type != "markdown":
            continue
        before, after = zh.blocks(a.source), zh.blocks(b.source)
        assert [x.kind for x in before] == [x.kind for x in after], b.source[:200]
        for x, y in zip(before, after):
            if x.msgid in translated:
                assert y.msgid == zh.message_id(x.kind, translated[x.msgid]), y.msgid[:100]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_ids)
def test_the_fold_labels_are_chinese(chapter):
    text = "\n".join(c.source for c in zh.translate_notebook(chapter).cells if c.cell_type == "markdown")
    labels = re.findall(r"<summary>([^<]+)</summary>", text)
    english = [label for label in labels if LATIN_WORD.search(label)]
    assert not english, english


# --- the Chinese student edition ----------------------------------------------------------------------------

def _student(chapter, lang):
    nb = nbformat.read(chapter, as_version=4)
    return student_notebook(nb, exercises.notebook_prefix(chapter), translations(chapter, lang))


@pytest.mark.parametrize("chapter", WITH_EXERCISES, ids=_ids)
def test_the_chinese_student_edition_has_the_english_exercises(chapter):
    english, chinese = _student(chapter, "en"), _student(chapter, "zh")
    assert [c.cell_type for c in english.cells] == [c.cell_type for c in chinese.cells]
    for a, b in zip(english.cells, chinese.cells):
        assert a.metadata == b.metadata  # nbgrader grade ids, points, locks, tags
        if a.cell_type == "code":
            assert a.source == b.source  # the same stubs, solutions cleared the same way
    grades = [c.metadata["nbgrader"]["grade_id"] for c in chinese.cells if "nbgrader" in c.metadata]
    assert grades and any(g.endswith("-check") for g in grades)
    markdown = "\n".join(c.source for c in chinese.cells if c.cell_type == "markdown")
    assert "练习" in markdown and "<summary>提示 1</summary>" in markdown and "SOLUTION" not in markdown


def test_write_the_chinese_student_edition(tmp_path):
    chapter = WITH_EXERCISES[0]
    [written] = write_student_edition([chapter], REPO, tmp_path, lang="zh")
    assert written == tmp_path / "book" / chapter.name
    nb = nbformat.read(written, as_version=4)
    assert nb.metadata["language"] == "zh" and "widgets" not in nb.metadata
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")


def test_a_course_in_chinese(tmp_path):
    import course
    chapter = WITH_EXERCISES[0]
    prefix = exercises.notebook_prefix(chapter)
    english = course.init(tmp_path / "en", [prefix])
    chinese = course.init(tmp_path / "zh", [prefix], lang="zh")
    assert english[prefix][1] == chinese[prefix][1]  # the exercise table (English titles)
    nb = nbformat.read(chinese[prefix][0], as_version=4)
    assert nb.metadata["language"] == "zh"


@pytest.mark.slow
def test_a_chinese_student_notebook_runs_with_only_the_checks_failing(monkeypatch, tmp_path):
    """ZH_STUDENT_CHAPTER (a path) or ch02: executed outside the repository, as a student's copy runs."""
    from test_student_edition import _assert_only_checks_fail, _errored, _execute
    chapter = Path(os.environ.get("ZH_STUDENT_CHAPTER", REPO / "book" / "ch02_rmsnorm.ipynb")).resolve()
    for name, value in KERNEL_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    nb = _student(chapter, "zh")
    start = time.perf_counter()
    _execute(nb, tmp_path)
    print(f"\n{chapter.name}: Chinese student edition executed in {time.perf_counter() - start:.1f} s")
    _assert_only_checks_fail(nb, _errored(nb))
