"""The widgets' text in the Chinese edition (tools/widget_i18n.py, issue #23 item 1).

On a small hand-written widget state: what is extracted (and what is not: numbers, poem
lines, a text box's input), that translating changes exactly those strings, that a
missing translation is reported, that the Chinese HTML's state is written as MyST-NB
writes it, and how widgets.po is merged. Per notebook of _toc.yml: every widget string
has a translation in widgets.po (the gettext check of a caption, like a paragraph's),
and the catalogue passes `tools/i18n.py check`.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import i18n  # noqa: E402
import widget_i18n as wi  # noqa: E402
from refresh_notebooks import toc_notebooks  # noqa: E402

CSS = "<style>.mm-player .widget-readout{min-width:4em}</style>"
CAPTION = '<div class="widget-caption" style="color:#444">Watch layer 1, not 金.</div>'


def _model(name: str, **state) -> dict:
    return {"model_module": "@jupyter-widgets/controls", "model_name": name,
            "model_module_version": "2.0.0", "state": {"_model_name": name, **state}}


STATE = {
    "a1": _model("SelectionSliderModel", description="layer", index=0,
                 _options_labels=["layer 0", "layer 1", "2"], tooltip=None),
    "a2": _model("HTMLModel", value=CSS + CAPTION, placeholder="\u200b"),
    "a3": _model("HTMLModel", value='<pre style="font-size:1.05em">床前明月光，\n</pre>'),
    "a4": _model("TextareaModel", description="your line", value="hello moon"),
    "a5": _model("StackModel", titles=["", "step 1"], children=["IPY_MODEL_a1"]),
    "a6": _model("ImageModel", format="png", layout="IPY_MODEL_a7"),
    "a7": {"model_module": "@jupyter-widgets/base", "model_name": "LayoutModel",
           "model_module_version": "2.0.0", "state": {"width": "95%"}},
}
ZH = {"layer": "层", "layer 0": "第 0 层", "layer 1": "第 1 层", "your line": "你的诗句",
      "Watch layer 1, not 金.": "留意第 1 层，而不是 金。", "step 1": "第 1 步"}


def test_the_strings_a_reader_sees_are_extracted():
    found = [(f.msgid, f.model_id, f.model, f.field) for f in wi.extract(STATE)]
    assert found == [
        ("layer", "a1", "SelectionSliderModel", "description"),
        ("layer 0", "a1", "SelectionSliderModel", "_options_labels[0]"),
        ("layer 1", "a1", "SelectionSliderModel", "_options_labels[1]"),
        ("Watch layer 1, not 金.", "a2", "HTMLModel", "value"),  # the caption only
        ("your line", "a4", "TextareaModel", "description"),  # not the reader's input
        ("step 1", "a5", "StackModel", "titles[1]"),
    ]


def test_translation_replaces_exactly_the_strings():
    before = json.dumps(STATE)
    translated, missing = wi.translate_state(STATE, ZH)
    assert missing == [] and json.dumps(STATE) == before  # the input is left alone
    expected = copy.deepcopy(STATE)
    expected["a1"]["state"].update(description="层",
                                   _options_labels=["第 0 层", "第 1 层", "2"])
    expected["a2"]["state"]["value"] = CSS + CAPTION.replace(
        "Watch layer 1, not 金.", "留意第 1 层，而不是 金。")
    expected["a4"]["state"]["description"] = "你的诗句"
    expected["a5"]["state"]["titles"] = ["", "第 1 步"]
    assert json.dumps(translated) == json.dumps(expected)


def test_an_untranslated_string_is_reported_and_kept():
    partial = {k: v for k, v in ZH.items() if k != "layer 1"}
    translated, missing = wi.translate_state(STATE, partial)
    assert [str(f) for f in missing] == [
        "SelectionSliderModel a1._options_labels[1]: 'layer 1'"]
    assert translated["a1"]["state"]["_options_labels"] == ["第 0 层", "layer 1", "2"]


def _myst_page(mime: dict) -> str:
    """A page with a widget state as MyST-NB writes it (render_nb_finalise + Sphinx)."""
    from myst_nb.core.render import sanitize_script_content
    return ('<html><script src="x.js"></script>\n<script type="application/vnd.jupyter.'
            f'widget-state+json">{sanitize_script_content(json.dumps(mime))}</script>\n'
            '<p>text</p></html>')


def test_the_html_state_is_written_as_myst_nb_writes_it():
    """ASCII JSON with \\u escapes, `</script>` inside a string escaped; valid again."""
    state = copy.deepcopy(STATE)
    state["a2"]["state"]["value"] = CSS + CAPTION.replace("not 金.", "not </script> 金.")
    zh = {**ZH, "Watch layer 1, not </script> 金.": "留意第 1 层，而不是 </script> 金。"}
    mime = {"state": state, "version_major": 2, "version_minor": 0}
    page = _myst_page(mime)
    assert wi.rewrite_html(page, {}) == (page, wi.extract(state))  # nothing translated
    new, missing = wi.rewrite_html(page, zh)
    translated = wi.translate_state(state, zh)[0]
    assert missing == [] and new == _myst_page({**mime, "state": translated})
    body = re.search(r'json">(.*?)</script>', new, re.S)[1]
    assert body.isascii() and "</script>" not in body and new.count("</script>") == 2
    assert json.loads(body)["state"]["a1"]["state"]["_options_labels"][0] == "第 0 层"


def test_merge_keeps_translations_adds_empty_and_removes_vanished(tmp_path):
    po = tmp_path / "widgets.po"
    wi.merge({"layer": [("book/a.ipynb", "M.description")],
              "old": [("book/a.ipynb", "M.x")],
              "stage": [("book/a.ipynb", "M.description")]}, po)
    text = po.read_text(encoding="utf-8")
    text = text.replace('msgid "layer"\nmsgstr ""', 'msgid "layer"\nmsgstr "层"')
    text = text.replace('msgid "stage"\nmsgstr ""',
                        '#, fuzzy\nmsgid "stage"\nmsgstr "阶段"')
    po.write_text(text, encoding="utf-8")
    new, removed = wi.merge({"layer": [("book/b.ipynb", "M.description")],
                             "stage": [("book/a.ipynb", "M.description")],
                             "head": [("book/b.ipynb", "M.description")]}, po)
    assert (new, removed) == (["head"], ["old"])
    assert wi.messages(po) == {"layer": "层"}  # the fuzzy one shows in English
    assert "#: book/b.ipynb\nmsgid \"layer\"" in po.read_text(encoding="utf-8")


@pytest.mark.parametrize("msgstr, problem", [
    ("第 2 层、第 6 个头", "numbers differ"),
    ("<b>第 2 层</b>、第 5 个头", "HTML tags differ"),
    ("layer 2, head 5", None),  # left as it is: the browser check finds the words
])
def test_the_widget_check(msgstr, problem):
    problems = i18n.check_widget_entry("layer 2, head 5", msgstr)
    assert (problem is None and problems == []) or any(problem in p for p in problems)


def test_the_widget_check_sentences_and_characters():
    caption = "Watch 金 and the orange bar: 金 holds 0.999 at T = 0.3."
    assert i18n.check_widget_entry(caption, "留意 金 和橙色的柱：T = 0.3 时 金 占 0.999。") == []
    assert "left in English" in " ".join(i18n.check_widget_entry(caption, caption))
    lost = i18n.check_widget_entry(caption, "留意金色和橙色的柱：T = 0.3 时它占 0.999。")
    assert any("characters of the English missing: ['金']" in p for p in lost)
    escaped = "the router&#x27;s pick, at most 48 tokens"  # own_line escapes quotes
    assert i18n.check_widget_entry(escaped, "路由器的选择，最多 48 个 token") == []
    terms = [i18n.Term("temperature", "温度", "always")]
    assert i18n.check_terms([("temperature", "温度")], terms, first_use=False) == []
    assert i18n.check_terms([("temperature", "T")], terms, first_use=False) != []


# --- the book -------------------------------------------------------------------------

NOTEBOOKS = [p for p in toc_notebooks(REPO / "_toc.yml")
             if wi.widget_state(nbformat.read(p, as_version=4))]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_widget_string_has_a_translation(notebook):
    """Fails when a widget's string is new or changed: run widget_i18n.update() (or
    `python tools/i18n.py update`) and translate the empty entries of widgets.po."""
    catalogue = wi.messages()
    state = wi.widget_state(nbformat.read(notebook, as_version=4))
    missing = [f for f in wi.extract(state) if f.msgid not in catalogue]
    where = "\n  ".join(map(str, missing))
    assert not missing, (f"{notebook.name}: {len(missing)} widget string(s) without a "
                         f"translation in widgets.po:\n  {where}")


def test_the_catalogue_passes_the_checks():
    assert i18n.check_widgets(wi.PO, i18n.read_terms()) == []


def test_the_catalogue_holds_only_the_book_s_strings():
    """A string no widget shows any more: widget_i18n.update() removes it."""
    shown = set(wi.book_strings(toc_notebooks(REPO / "_toc.yml")))
    assert set(wi.messages()) - shown == set()
