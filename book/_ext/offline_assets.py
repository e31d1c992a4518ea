"""Keep the vendored offline JavaScript (book/_static/offline/) loaded exactly once per page.

Three fixes for the static HTML book (see /work/shared/notes/static-widgets-and-nbval.md):
1. Jupyter Book adds every .js/.css found under a `_static` folder to every page, which would
   load the widget manager and MathJax a second time (a doubled, dead widget; MathJax errors).
   The vendored files are loaded on purpose by `mathjax_path` and `nb_ipywidgets_js` instead.
2. Sphinx 7.4 can write the same inline or external script twice on a page
   (`Identifier 'THEBE_JS_URL' has already been declared`); duplicates are dropped.
3. The widget manager typesets widget labels with the MathJax 2 API (`MathJax.Hub.Queue`), which
   MathJax 3 lacks: every slider description on a page with math raised `Cannot read properties of
   undefined (reading 'Queue')`. A tiny shim maps that call onto MathJax 3's `typesetPromise`.
"""

from __future__ import annotations

OFFLINE_PREFIX = "offline/"


# Runs after the deferred MathJax 3 script has replaced the `window.MathJax` config object and
# before the widget manager renders (it waits for window `load`). Pages without math have no MathJax.
MATHJAX2_HUB_SHIM = """document.addEventListener("DOMContentLoaded", function () {
  var MJ = window.MathJax;
  if (!MJ || MJ.Hub || !MJ.startup || !MJ.typesetPromise) return;
  MJ.Hub = {Queue: function () {
    Array.prototype.forEach.call(arguments, function (cmd) {
      if (!Array.isArray(cmd) || cmd[0] !== "Typeset" || !cmd[2]) return;
      MJ.startup.promise = MJ.startup.promise
        .then(function () { return MJ.typesetPromise([cmd[2]]); })
        .catch(function (err) { console.warn("MathJax typeset of a widget label failed", err); });
    });
  }};
});"""


def _entry_filename(entry) -> str:
    """`html_js_files` entries are 'path' or ('path', {attrs}) before/after Sphinx converts them."""
    return entry[0] if isinstance(entry, (tuple, list)) else entry


def _drop_vendored(app, config) -> None:
    for name in ("html_js_files", "html_css_files"):
        entries = getattr(config, name, None) or []
        kept = [e for e in entries if not (_entry_filename(e) or "").startswith(OFFLINE_PREFIX)]
        setattr(config, name, kept)


def _asset_key(asset) -> tuple:
    """Identity of a script/stylesheet tag: its source (or inline body) and attributes."""
    filename = getattr(asset, "filename", asset) or ""  # inline scripts: None or ""
    attributes = getattr(asset, "attributes", {}) or {}
    attrs = tuple(sorted((k, str(v)) for k, v in attributes.items() if k != "priority"))
    return (str(filename), attrs)


def _dedupe_page_assets(app, pagename, templatename, context, doctree) -> None:
    for name in ("script_files", "css_files"):
        assets = context.get(name)
        if not assets:
            continue
        seen: set[tuple] = set()
        unique = []
        for asset in assets:
            key = _asset_key(asset)
            if key in seen:
                continue
            seen.add(key)
            unique.append(asset)
        context[name] = unique


def setup(app):
    # after Jupyter Book has filled the lists, before Sphinx converts them (priority 800)
    app.connect("config-inited", _drop_vendored, priority=700)
    # after every other handler (myst-nb adds the per-page widget scripts at the default 500)
    app.connect("html-page-context", _dedupe_page_assets, priority=900)
    app.add_js_file(None, body=MATHJAX2_HUB_SHIM)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
