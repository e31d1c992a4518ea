"""The widgets' text in the Chinese edition (issue #23, item 1): one catalogue.

A widget's description, slider readouts (option labels such as "layer 2, head 5") and
caption live in the notebook's saved widget state (metadata.widgets[...].state), which
both editions share. This module reads them out of a state, translates a state with
book/locales/zh_CN/LC_MESSAGES/widgets.po (msgid: the exact English string; for an HTML
widget the text inside its caption <div>, without the <style> block and the wrapper) and
merges the strings of the book's notebooks into that catalogue. Strings without a Latin
letter (numbers, poem lines, 金) are no messages: they stay as they are.

Used by tools/i18n.py (update, status, check; build: the embedded state of the Chinese
HTML, write_html) and tools/zh_notebooks.py (the Chinese notebooks).
Tests: tests/test_widget_i18n.py.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

REPO = Path(__file__).resolve().parents[1]
PO = REPO / "book" / "locales" / "zh_CN" / "LC_MESSAGES" / "widgets.po"
STATE_MIME = "application/vnd.jupyter.widget-state+json"
TEXT_KEYS = ("description", "tooltip", "description_tooltip", "placeholder")
LIST_KEYS = ("_options_labels", "titles", "tooltips")  # one string per option or child
VALUE_MODELS = ("HTMLModel", "HTMLMathModel", "LabelModel")  # a Text's value is input
_WRAPPED = re.compile(r"(?s)((?:<style>.*?</style>)?<div\b[^>]*>)(.*)(</div>)")
_TAG = re.compile(r"<[^>]*>")
_SCRIPT = re.compile(
    r'(?s)(<script type="application/vnd\.jupyter\.widget-state\+json">)'
    r"(.*?)(</script>)")


@dataclass(frozen=True)
class Found:
    """One string a widget shows, and where: model id and name, field (`titles[3]`)."""
    msgid: str
    model_id: str
    model: str
    field: str

    def __str__(self) -> str:
        return f"{self.model} {self.model_id}.{self.field}: {self.msgid[:80]!r}"


def _slots(state: dict):
    """(model id, key, index or None) of every string a reader sees, in state order."""
    for mid, model in state.items():
        values = model.get("state", {})
        for key in TEXT_KEYS:
            if isinstance(values.get(key), str):
                yield mid, key, None
        for key in LIST_KEYS:
            for i, item in enumerate(values.get(key) or []):
                if isinstance(item, str):
                    yield mid, key, i
        shown = model.get("model_name") in VALUE_MODELS
        if shown and isinstance(values.get("value"), str):
            yield mid, "value", None


def split(text: str, key: str) -> tuple[str, str, str]:
    """(head, message, tail): the message of an HTML value is its caption <div>'s."""
    match = _WRAPPED.fullmatch(text) if key == "value" else None
    return match.groups() if match else ("", text, "")


def is_message(text: str) -> bool:
    """A string to translate: it has a Latin letter outside its HTML tags."""
    return re.search(r"[A-Za-z]", _TAG.sub("", text)) is not None


def _found(state: dict):
    """(slot, head, Found, tail) of every message of a state."""
    for mid, key, i in _slots(state):
        value = state[mid]["state"][key]
        head, msgid, tail = split(value if i is None else value[i], key)
        if is_message(msgid):
            field = key if i is None else f"{key}[{i}]"
            model = state[mid]["model_name"]
            yield (mid, key, i), head, Found(msgid, mid, model, field), tail


def widget_state(nb: dict) -> dict:
    """A notebook's (nbformat or plain dict) saved widget models, {} if none."""
    widgets = nb.get("metadata", {}).get("widgets", {})
    return widgets.get(STATE_MIME, {}).get("state", {})


def extract(state: dict) -> list[Found]:
    """The messages of a widget state in its order; one per use."""
    return [found for _, _, found, _ in _found(state)]


def translate_state(state: dict, catalogue: dict[str, str]) -> tuple[dict, list[Found]]:
    """A copy of `state` with every message replaced by its translation, and the
    messages the catalogue lacks (they stay in English). Nothing else changes."""
    state, missing = copy.deepcopy(state), []
    for (mid, key, i), head, found, tail in list(_found(state)):
        if not catalogue.get(found.msgid):
            missing.append(found)
            continue
        text = head + catalogue[found.msgid] + tail
        if i is None:
            state[mid]["state"][key] = text
        else:
            state[mid]["state"][key][i] = text
    return state, missing


# --- the catalogue -----------------------------------------------------------------

def _read(po: Path) -> Catalog | None:
    if not po.exists():
        return None
    with po.open("rb") as f:
        return read_po(f)


def messages(po: Path = PO) -> dict[str, str]:
    """{msgid: msgstr} of widgets.po, without the empty and the fuzzy ones."""
    catalog = _read(po)
    return {m.id: m.string for m in catalog or [] if m.id and m.string and not m.fuzzy}


def book_strings(notebooks: list[Path]) -> dict[str, list[tuple[str, str]]]:
    """{msgid: [(notebook, model.field), ...]} over `notebooks`, in page order."""
    import nbformat
    strings: dict[str, list[tuple[str, str]]] = {}
    for path in notebooks:
        name = Path(path).resolve().relative_to(REPO).as_posix()
        for found in extract(widget_state(nbformat.read(path, as_version=4))):
            where = (name, f"{found.model}.{found.field.split('[')[0]}")
            if where not in strings.setdefault(found.msgid, []):
                strings[found.msgid].append(where)
    return strings


def merge(strings: dict[str, list], po: Path = PO) -> tuple[list[str], list[str]]:
    """Write widgets.po for `strings` (book_strings): translations and fuzzy flags kept,
    new strings empty, vanished strings removed. Returns (new, removed) msgids."""
    old = _read(po)
    kept = {m.id: m for m in old or [] if m.id}
    catalog = Catalog(locale="zh_CN", project="MiniMind Annotated (widgets)",
                      fuzzy=False, creation_date=old.creation_date if old else None)
    for msgid, wheres in strings.items():
        before = kept.get(msgid)
        catalog.add(msgid, before.string if before else "",
                    flags=before.flags if before else (),
                    locations=sorted({(nb, None) for nb, _ in wheres}),
                    auto_comments=sorted({field for _, field in wheres}))
    with po.open("wb") as f:
        write_po(f, catalog, width=0, omit_header=False, sort_output=False)
    return [m for m in strings if m not in kept], [m for m in kept if m not in strings]


def update(notebooks: list[Path] | None = None, po: Path = PO):
    """Merge the strings of the book's notebooks (_toc.yml order) into widgets.po;
    returns (new, removed) msgids."""
    if notebooks is None:
        import sys
        sys.path.insert(0, str(REPO / "tools"))
        from refresh_notebooks import toc_notebooks
        notebooks = toc_notebooks(REPO / "_toc.yml")
    new, removed = merge(book_strings(notebooks), po)
    print(f"{po.relative_to(REPO)}: {len(new)} new string(s), {len(removed)} removed")
    return new, removed


# --- the Chinese HTML --------------------------------------------------------------

def rewrite_html(html: str, catalogue: dict[str, str]) -> tuple[str, list[Found]]:
    """A page with its embedded widget state translated, written as MyST-NB writes it
    (myst_nb.core.render: json.dumps, so ASCII with \\u escapes, then `</script>` as
    `<\\/script>`); and the strings left in English."""
    from myst_nb.core.render import sanitize_script_content
    missing = []

    def translated(match: re.Match) -> str:
        mime = json.loads(match[2])
        mime["state"], lost = translate_state(mime["state"], catalogue)
        missing.extend(lost)
        return match[1] + sanitize_script_content(json.dumps(mime)) + match[3]

    return _SCRIPT.sub(translated, html), missing


def write_html(html_dir: Path, po: Path = PO) -> dict[Path, list[Found]]:
    """Translate the widget state of every page under `html_dir` (the Chinese build) in
    place; returns {page: strings left in English} for the pages with a widget state."""
    catalogue, report = messages(po), {}
    for page in sorted(Path(html_dir).rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if STATE_MIME not in text:
            continue
        new, report[page] = rewrite_html(text, catalogue)
        if new != text:
            page.write_text(new, encoding="utf-8")
    return report
