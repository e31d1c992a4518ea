"""Live panels: the reader's own line, computed in the browser (onnxruntime-web, offline), in chosen chapters.

The notebooks are not edited: config value `live_panels` maps a docname to the section (its heading's anchor)
whose own text the panel follows, and the panel's kind (book/_static/live/panels.mjs draws each kind). The
panel is an empty <div> with its settings in data- attributes, plus one inline classic script that decides
whether live mode can run here: over http(s) with WebAssembly it imports the panels' module on the reader's
first use; from file:// (Chromium refuses ES modules there) or without WebAssembly it says so in one line,
and the precomputed widgets of the chapter work as before.

Assets, one copy for both editions: the runtime (book/_static/offline/onnxruntime-web, tokenizers), the page
JavaScript (book/_static/live) and the ONNX graphs, which build-finished exports from the shipped checkpoints
into the English build's _static/live/models (minimind.lab.browser_export, cached in _build/.live_cache). The
Chinese edition (_build/html/zh) leaves the runtime out of its own _static and points one level up; only the
small panel files (live.css, linked from every page by _config.yml's html_css_files) are in both.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

PANELS = {  # docname -> (section anchor, kind, model)
    "book/intro": ("a-poem-written-as-you-read", "poem", "poetry-dense"),
    "book/ch01_shapes": ("watching-a-trained-model-stage-by-stage", "tokens", "poetry-dense"),
    "book/ch04a_attention": ("what-the-heads-of-the-trained-model-look-at", "attention", "poetry-dense"),
    "book/ch06_moe": ("the-trained-model-s-routing-layer-by-layer", "experts", "poetry-moe"),
    "book/ch07_residual": ("the-logit-lens-reading-the-stream-after-every-block", "lens", "poetry-dense"),
    "book/ch10_generation": ("top-k-and-top-p", "next-token", "poetry-dense"),
}
EXAMPLES = ["床前明月光，", "春眠不觉晓，", "白日依山尽，", "明月几时有，"]
SHARED_STATIC = ["offline/onnxruntime-web", "offline/tokenizers"]  # the heavy runtime: only in the English build
NOT_SHIPPED = ["live/tests"]  # the JavaScript's own tests stay out of both builds

OFF_MESSAGES = {
    "en": {"file": "Live mode is off: this page was opened from a file, and browsers run the model only for "
                   "pages served over http. To turn it on: python -m http.server -d _build/html, then open "
                   "http://localhost:8000/. The pictures below still work.",
           "wasm": "Live mode is off: this browser has no WebAssembly, which the model needs. The pictures "
                   "below still work.",
           "button": "Try it live on your own line", "label": "Live model"},
    "zh": {"file": "实时模式未开启：本页是以文件方式打开的，浏览器只在通过 http 提供的页面中运行模型。开启方法："
                   "python -m http.server -d _build/html，然后打开 http://localhost:8000/。下面的图照常可用。",
           "wasm": "实时模式未开启：此浏览器不支持模型所需的 WebAssembly。下面的图照常可用。",
           "button": "用你自己的诗句实时试一试", "label": "实时模型"},
}

BOOT = """(function () {
  var panels = document.querySelectorAll(".live-panel");
  if (!panels.length) return;
  var why = location.protocol === "file:" ? "file" : (typeof WebAssembly !== "object" ? "wasm" : "");
  panels.forEach(function (panel) {
    var status = panel.querySelector(".live-status"), button = panel.querySelector(".live-start");
    if (why) {
      status.textContent = panel.getAttribute("data-off-" + why);
      panel.classList.add("live-off");
      button.hidden = true;
      return;
    }
    var start = function () {
      button.hidden = true;
      import(panel.getAttribute("data-static") + "live/panels.mjs")
        .then(function (m) { return m.mountAll(); })
        .catch(function (err) {
          status.textContent = panel.getAttribute("data-off-missing") + " (" + err.message + ")";
          panel.classList.add("live-off");
        });
    };
    button.addEventListener("click", start);
    if (location.hash.indexOf("#live=") === 0) start();
  });
})();"""


def language(app) -> str:
    return "zh" if (app.config.language or "en").startswith("zh") else "en"


def _configure(app, config) -> None:
    patterns = list(config.exclude_patterns) + NOT_SHIPPED
    if language(app) == "zh":
        patterns += SHARED_STATIC
    config.exclude_patterns = patterns


def panel_html(pagename: str, kind: str, model: str, lang: str) -> str:
    to_root = "../" * pagename.count("/") + ("../" if lang == "zh" else "")  # the English build's root
    text = OFF_MESSAGES[lang]
    missing = ("Live mode is off: its files did not load" if lang == "en" else "实时模式未开启：所需文件未能加载")
    attrs = {"data-kind": kind, "data-model": model, "data-lang": lang, "data-static": f"{to_root}_static/",
             "data-examples": json.dumps(EXAMPLES, ensure_ascii=False),
             "data-off-file": text["file"], "data-off-wasm": text["wasm"], "data-off-missing": missing}
    attr_text = " ".join(f'{k}="{escape(v)}"' for k, v in attrs.items())
    return (f'<div class="live-panel" {attr_text} role="region" aria-label="{escape(text["label"])}">'
            f'<button type="button" class="live-start">{escape(text["button"])}</button>'
            f'<p class="live-status" aria-live="polite"></p></div>')


def _place_panels(app, doctree, docname) -> None:
    spec = app.config.live_panels.get(docname)
    if not spec:
        return
    anchor, kind, model = spec
    for section in doctree.findall(nodes.section):
        if anchor in section["ids"]:
            children = list(section.children)
            at = next((i for i, c in enumerate(children) if isinstance(c, nodes.section)), len(children))
            section.insert(at, nodes.raw("", panel_html(docname, kind, model, language(app)), format="html"))
            section.insert(at + 1, nodes.raw("", f"<script>{BOOT}</script>", format="html"))
            return
    logger.warning(f"live_panels: {docname} has no section #{anchor}: its live panel is left out",
                   location=docname)


def _export_models(app, exception) -> None:
    if exception is not None or app.builder.format != "html" or language(app) == "zh":
        return
    if not any(d in app.env.found_docs for d in app.config.live_panels):
        return
    from minimind.lab.browser_export import export_shipped
    models = sorted({spec[2] for spec in app.config.live_panels.values()})
    out = Path(app.outdir) / "_static" / "live" / "models"
    cache = Path(app.outdir).parent / ".live_cache"
    export_shipped(out, models, cache_dir=cache, log=lambda msg: print(f"live_panels: {msg}"))


def setup(app):
    app.add_config_value("live_panels", PANELS, "env", types=[dict])
    app.connect("config-inited", _configure)
    app.connect("doctree-resolved", _place_panels)
    app.connect("build-finished", _export_models)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
