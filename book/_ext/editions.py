"""Link every page of the book to the same page in the other edition (English <-> 中文版).

Both editions are built from the same sources, so they have the same page names; the Chinese one lives
in the `zh/` folder of the English one (tools/build_book.sh). Config value `edition_twin`:
`{prefix, label, lang}` -- the path from this edition's root to the twin's root, the link text and the
twin's language tag. Each page gets a visible link above its content and `<link rel="alternate"
hreflang=...>` tags for both editions.

It also translates the toc's part captions ("The model, one part at a time"): sphinx-external-toc inserts
the toctrees after Sphinx's own translation step, so their captions would stay in English in the sidebar.

And it translates the fold labels, which are not prose (sphinx-togglebutton's hints too): the `<summary>` of a `<details>` block (Hint 1,
Solution, Going deeper: tools/notebook_form.py) and myst-nb's show/hide prompts of folded cells; and the
themes' tooltips and screen-reader labels that their catalogues leave in English (CHROME_ZH).
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from docutils import nodes

from sphinx import addnodes
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain

SWITCH_CLASS = "edition-switch"
FOLD_LABELS_ZH = {"Hint": "提示", "Solution": "答案", "Hide the solution": "收起答案",
                  "Solutions explained": "答案讲解", "Going deeper": "深入一步", "Hide": "收起"}
SUMMARY = re.compile(r"<summary>([^<]+)</summary>")
TOGGLE_HINTS_ZH = {"togglebutton_hint": "点击显示", "togglebutton_hint_hide": "点击隐藏"}
# The themes' own tooltips and screen-reader labels that their zh_CN catalogues leave in English (or in
# Taiwan usage), as they appear in the rendered pages and in sphinx-togglebutton's script.
CHROME_ZH = {
    'aria-label="Toggle hidden content"': 'aria-label="显示或隐藏内容"',
    'placeholder="Search this book..."': 'placeholder="搜索本书…"',
    'aria-label="Search this book..."': 'aria-label="搜索本书"',
    'title="Toggle primary sidebar"': 'title="显示或隐藏侧栏"',
    'title="Toggle secondary sidebar"': 'title="显示或隐藏本页目录"',
    'aria-label="Color mode"': 'aria-label="颜色模式"',
    'data-bs-title="Color mode"': 'data-bs-title="颜色模式"',
    'title="System Settings"': 'title="跟随系统"',
    'title="列印成 PDF"': 'title="打印为 PDF"',
    'aria-label="Main"': 'aria-label="目录"',
    'aria-label="Page"': 'aria-label="本页"',
    "作者： ": "作者：",  # the book theme writes translate('By') + " " + author
}


def twin_url(pagename: str, prefix: str) -> str:
    """Relative URL of the same page in the other edition, e.g. 'book/ch01' -> '../zh/book/ch01.html'."""
    to_root = "../" * pagename.count("/")
    return f"{to_root}{prefix}{pagename}.html"


def _add_twin_link(app, pagename, templatename, context, doctree) -> None:
    twin = app.config.edition_twin
    if not twin:
        return
    here = f"{pagename.rsplit('/', 1)[-1]}.html"
    this_lang = "zh-Hans" if (app.config.language or "en").startswith("zh") else "en"
    href = escape(twin_url(pagename, twin["prefix"]))
    lang = escape(twin["lang"])
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{escape(this_lang)}" href="{escape(here)}" />'
        f'\n<link rel="alternate" hreflang="{lang}" href="{href}" />'
    )
    if "body" in context:
        link = f'<a href="{href}" hreflang="{lang}" lang="{lang}">{escape(twin["label"])}</a>'
        context["body"] = f'<p class="{SWITCH_CLASS}">{link}</p>\n' + context["body"]


class TranslateTocCaptions(SphinxTransform):
    """Translate toctree captions with the page's catalogue (after sphinx-external-toc, priority 100, and
    before the toc is collected at doctree-read)."""

    default_priority = 150

    def apply(self, **kwargs) -> None:
        config = self.config
        if not config.language or config.language == "en" or not config.locale_dirs:
            return
        dirs = [str(Path(self.env.srcdir) / d) for d in config.locale_dirs]
        domain = docname_to_domain(self.env.docname, config.gettext_compact)
        catalog, found = init_locale(dirs, config.language, domain)
        if not found:
            return
        for node in self.document.findall(addnodes.toctree):
            if node.get("caption"):
                node["caption"] = node["rawcaption"] = catalog.gettext(node["caption"])


def fold_label_zh(label: str) -> str:
    """"Hint 2" -> "提示 2", "Solution" -> "答案"; other text unchanged."""
    words, _, number = label.strip().rpartition(" ")
    if words in FOLD_LABELS_ZH and number.isdigit():
        return f"{FOLD_LABELS_ZH[words]} {number}"
    return FOLD_LABELS_ZH.get(label.strip(), label)


class TranslateFoldLabels(SphinxTransform):
    """In the Chinese edition: `<summary>` labels in raw HTML and the prompts of folded cells."""

    default_priority = 800

    def apply(self, **kwargs) -> None:
        if not (self.config.language or "en").startswith("zh"):
            return
        for node in self.document.findall(nodes.raw):
            text = node.astext()
            translated = SUMMARY.sub(lambda m: f"<summary>{fold_label_zh(m[1])}</summary>", text)
            if translated != text:
                node.replace_self(nodes.raw(node.rawsource, translated, format=node.get("format")))
        for node in self.document.findall(nodes.container):
            for key in ("prompt_show", "prompt_hide"):
                if node.get(key):
                    node[key] = fold_label_zh(node[key])


def _translate_toggle_hints(app, config) -> None:
    """sphinx-togglebutton's "Click to show" / "Click to hide" in the Chinese edition."""
    if (config.language or "en").startswith("zh"):
        for key, text in TOGGLE_HINTS_ZH.items():
            if key in config:
                config[key] = text


def translate_chrome(text: str) -> str:
    for english, chinese in CHROME_ZH.items():
        text = text.replace(english, chinese)
    return text


def _translate_chrome(app, exception) -> None:
    """CHROME_ZH in every page and script of a Chinese build, once it is written."""
    if exception is None and (app.config.language or "en").startswith("zh"):
        out = Path(app.outdir)
        for path in [*out.rglob("*.html"), out / "_static" / "togglebutton.js"]:
            if path.exists():
                text = path.read_text(encoding="utf-8")
                if (changed := translate_chrome(text)) != text:
                    path.write_text(changed, encoding="utf-8")


def setup(app):
    app.add_config_value("edition_twin", None, "html", types=[dict])
    app.connect("config-inited", _translate_toggle_hints, priority=900)
    app.connect("html-page-context", _add_twin_link)
    app.connect("build-finished", _translate_chrome)
    app.add_transform(TranslateTocCaptions)
    app.add_transform(TranslateFoldLabels)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
