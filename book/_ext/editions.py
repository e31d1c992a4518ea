"""Link every page of the book to the same page in the other edition (English <-> 中文版).

Both editions are built from the same sources, so they have the same page names; the Chinese one lives
in the `zh/` folder of the English one (tools/build_book.sh). Config value `edition_twin`:
`{prefix, label, lang}` -- the path from this edition's root to the twin's root, the link text and the
twin's language tag. Each page gets a visible link above its content and `<link rel="alternate"
hreflang=...>` tags for both editions.

It also translates the toc's part captions ("The model, one part at a time"): sphinx-external-toc inserts
the toctrees after Sphinx's own translation step, so their captions would stay in English in the sidebar.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from sphinx import addnodes
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain

SWITCH_CLASS = "edition-switch"


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


def setup(app):
    app.add_config_value("edition_twin", None, "html", types=[dict])
    app.connect("html-page-context", _add_twin_link)
    app.add_transform(TranslateTocCaptions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
