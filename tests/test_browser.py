"""The built HTML book, as a reader's browser sees it: offline, widgets alive, math rendered, nothing cut off.

Builds both editions (English: `jupyter-book build .`; Chinese: `tools/i18n.py build` into _build/html/zh;
set BOOK_BUILT=1 to reuse an existing _build/html), serves _build/html on 127.0.0.1, and runs
tests/browser/check_book.mjs (playwright-core driving Debian's /usr/bin/chromium headless) over every page of
_toc.yml in both editions. What each page must show is read from the page itself and its notebook, so new
chapters are checked without listing them anywhere:
- every widget output of the notebook renders, and every Stack is jslinked to a slider; each slider is
  stepped through every position, and each time its readout shows the frame's label and the image is the
  matching frame (frame_player: SelectionSlider `index` -> Stack `selected_index`);
- MathJax renders all math, without errors, and no literal `$` is left in the text outside code;
- no code line or output is cut off (wider than its box with no way to scroll);
- no request leaves 127.0.0.1, no failed request, no console error;
- each page links to its twin in the other edition; no prose of a Chinese page is left in English; the
  search pages find the book's terms (English and Chinese, e.g. 残差流, 旋转位置编码).
Screenshots and report.json go to _build/screenshots/.

A second test builds a small book from tests/fixtures/ (a clean chapter and a deliberately broken one) and
checks that the driver passes the first and reports each planted problem in the second.

Needs node, tests/browser/node_modules (`npm ci` there; tools/test_all.sh runs it) and /usr/bin/chromium:
skipped without them, except under CI=true, where it fails instead.
Env: BOOK_DIR (book to build, default the repo), BOOK_BUILT=1, BROWSER_PAGES (JSON file replacing the pages
found in _toc.yml).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import refresh_notebooks  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DRIVER_DIR = REPO_ROOT / "tests" / "browser"
FIXTURES = REPO_ROOT / "tests" / "fixtures"
CHROMIUM = Path("/usr/bin/chromium")
BOOK_DIR = Path(os.environ.get("BOOK_DIR", REPO_ROOT)).resolve()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def toc_files(book_dir: Path) -> list[str]:
    """The files of a jb-book _toc.yml in reading order (root first), without suffix, e.g. 'book/ch03_rope'."""
    files = refresh_notebooks.toc_files(book_dir / "_toc.yml")
    return [str(Path(f).with_suffix("")) if Path(f).suffix in (".ipynb", ".md") else f for f in files]


def widget_outputs(notebook: Path) -> int:
    """Widget views among a notebook's outputs: each must render on the page."""
    if not notebook.exists():
        return 0
    nb = nbformat.read(notebook, as_version=4)
    return sum(WIDGET_VIEW in output.get("data", {}) for cell in nb.cells for output in cell.get("outputs", []))


def book_pages(book_dir: Path) -> list[dict]:
    override = os.environ.get("BROWSER_PAGES")
    if override and book_dir == BOOK_DIR:
        return json.loads(Path(override).read_text())
    return [{"page": f"{name}.html", "widgets": widget_outputs(book_dir / f"{name}.ipynb")}
            for name in toc_files(book_dir)]


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require(ok: bool, reason: str) -> None:
    """Skip locally when a tool is missing; under CI a missing tool is a failure."""
    if ok:
        return
    if _on_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


def _require_browser() -> str:
    node = shutil.which("node")
    _require(node is not None, "node is not installed")
    _require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium)")
    _require((DRIVER_DIR / "node_modules" / "playwright-core").is_dir(),
             "playwright-core is not installed (run `npm ci` in tests/browser)")
    return node


def _build_book(book_dir: Path, reuse: bool) -> float:
    start = time.perf_counter()
    html = book_dir / "_build" / "html"
    if reuse:
        assert (html / "index.html").exists(), f"BOOK_BUILT=1 but {html}/index.html is missing"
        return 0.0
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book", "build", str(book_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"jupyter-book build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    if book_dir == REPO_ROOT:
        result = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "i18n.py"), "build"],
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (f"the Chinese edition's build failed:\n{result.stdout[-4000:]}\n"
                                        f"{result.stderr[-4000:]}")
    return time.perf_counter() - start


def _serve(directory: Path) -> tuple[subprocess.Popen, str]:
    """python -m http.server on 127.0.0.1, port chosen by the OS (read from its first line)."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
    try:
        port = int(line.split(" port ")[1].split()[0])
    except (IndexError, ValueError):
        server.kill()
        raise RuntimeError(f"http.server did not start: {line!r}")
    return server, f"http://127.0.0.1:{port}/"


def check_book(book_dir: Path, pages: list[dict], spec_dir: Path, reuse_build=False, searches=()) -> dict:
    """Build (unless reuse_build), serve and drive the browser over `pages`; the driver's report + timings."""
    node = _require_browser()
    build_s = _build_book(book_dir, reuse_build)
    screenshot_dir = book_dir / "_build" / "screenshots"
    server, base_url = _serve(book_dir / "_build" / "html")
    spec = {"base_url": base_url, "screenshot_dir": str(screenshot_dir), "chromium": str(CHROMIUM), "pages": pages,
            "searches": list(searches), "report_path": str(spec_dir / "report.json")}
    spec_path = spec_dir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    start = time.perf_counter()
    try:
        result = subprocess.run([node, str(DRIVER_DIR / "check_book.mjs"), str(spec_path)],
                                cwd=DRIVER_DIR, capture_output=True, text=True, timeout=900)
    finally:
        server.terminate()
        server.wait(timeout=10)
    browser_s = time.perf_counter() - start
    try:
        report = json.loads((spec_dir / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        pytest.fail(f"check_book.mjs gave no report (exit {result.returncode}):\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    report["timings_s"] = {"build": round(build_s, 1), "browser": round(browser_s, 1)}
    screenshot_dir.mkdir(parents=True, exist_ok=True)
    (screenshot_dir / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(f"\n{book_dir.name}: book build {build_s:.1f} s, browser checks {browser_s:.1f} s "
          f"({len(pages)} pages), report: {screenshot_dir / 'report.json'}")
    return report


def _page_result(report: dict, page: str) -> dict:
    [result] = [p for p in report.get("pages", []) if p["page"] == page] or [None]
    assert result is not None, f"{page} was not checked: {report.get('error')}"
    return result


# --- the book --------------------------------------------------------------------------------------------------

ENGLISH_PAGES = book_pages(BOOK_DIR)
EDITIONS = BOOK_DIR == REPO_ROOT  # the repo's book has a Chinese edition in _build/html/zh; fixture books do not
CHINESE_PAGES = [{**entry, "page": f"zh/{entry['page']}", "lang": "zh"} for entry in ENGLISH_PAGES] if EDITIONS else []
PAGES = [{**entry, "twin": EDITIONS} for entry in ENGLISH_PAGES + CHINESE_PAGES]
# A term each edition's search must find, and a page it must list (Chinese search needs jieba and the
# dictionary of the book's terms that tools/i18n.py gives it).
# Chinese queries are typed without spaces (KV缓存, 贪心解码): book/_static/search_cjk.js segments them into
# the index's words.
SEARCH_EXPECTATIONS = {
    "en": {"RMSNorm": "ch02_rmsnorm", "YaRN": "ch03_rope", "SwiGLU": "ch05_swiglu",
           "QK-Norm": "ch04a_attention", "grouped-query attention": "ch04a_attention",
           "KV-cache": "ch04b_kv_cache", "prefill": "ch04b_kv_cache", "router": "ch06_moe",
           "load balancing": "ch06_moe", "Pre-Norm": "ch07_residual", "logit lens": "ch07_residual",
           "tied embeddings": "ch08_tying", "cross-entropy": "ch09_loss", "perplexity": "ch09_loss",
           "greedy decoding": "ch10_generation", "repetition penalty": "ch10_generation"},
    "zh": {"残差流": "ch07_residual", "旋转位置编码": "ch03_rope", "均方根归一化": "ch02_rmsnorm",
           "预填充": "ch04b_kv_cache", "静夜思": "ch04a_attention", "贪心解码": "ch10_generation",
           "注意力机制": "ch04a_attention", "温度采样": "ch10_generation", "KV缓存": "ch04b_kv_cache",
           "KV 缓存": "ch04b_kv_cache", "键值缓存": "ch04b_kv_cache", "门控": "ch05_swiglu",
           "前馈网络": "ch05_swiglu", "混合专家": "ch06_moe", "路由器": "ch06_moe",
           "负载均衡": "ch06_moe", "辅助损失": "ch06_moe", "交叉熵": "ch09_loss", "困惑度": "ch09_loss",
           "核采样": "ch10_generation", "重复惩罚": "ch10_generation", "分组查询注意力": "ch04a_attention",
           "因果掩码": "ch04a_attention", "多头注意力": "ch04a_attention", "位置编码": "ch03_rope",
           "词表": "ch01_shapes", "分词器": "ch01_shapes", "嵌入矩阵": "ch08_tying",
           "梯度裁剪": "appendix_training", "学习率": "appendix_training"},
}
SEARCHES = [
    {"page": f"{prefix}search.html", "query": query, "expect": f"{prefix}book/{page}.html"}
    for lang, prefix in (("en", ""), ("zh", "zh/"))
    for query, page in SEARCH_EXPECTATIONS[lang].items()
] if EDITIONS else []


BUILT_HERE = False  # set once browser_report has built the book in this session


@pytest.fixture(scope="module")
def browser_report(tmp_path_factory):
    global BUILT_HERE
    report = check_book(BOOK_DIR, PAGES, tmp_path_factory.mktemp("browser"),
                        reuse_build=os.environ.get("BOOK_BUILT") == "1" or BUILT_HERE, searches=SEARCHES)
    BUILT_HERE = True
    return report


def test_browser_started(browser_report):
    assert "error" not in browser_report, browser_report.get("error")


@pytest.mark.parametrize("entry", PAGES, ids=lambda entry: entry["page"])
def test_page(browser_report, entry):
    result = _page_result(browser_report, entry["page"])
    problems = "\n  ".join(result["problems"])
    assert not result["problems"], f"{entry['page']}:\n  {problems}"
    assert result["screenshot"] and Path(result["screenshot"]).exists()


@pytest.mark.parametrize("search", SEARCHES, ids=lambda s: f"{s['page']}?q={s['query']}")
def test_search(browser_report, search):
    [result] = [r for r in browser_report.get("searches", [])
                if (r["page"], r["query"]) == (search["page"], search["query"])] or [None]
    assert result is not None, f"the search was not run: {browser_report.get('error')}"
    assert not result["problems"], "\n".join(result["problems"])


@pytest.mark.skipif(not EDITIONS, reason="only the repository's book has a Chinese edition")
def test_chinese_search_index_holds_every_term_the_translations_use(browser_report):
    """jieba with the terms dictionary keeps each term whole in the index (without it, 残差流 is 残差 + 流)."""
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    import i18n
    text = json.loads(re.search(r"setIndex\((.*)\)", (BOOK_DIR / "_build/html/zh/searchindex.js").read_text(
        encoding="utf-8"), re.S).group(1))
    used = " ".join(m.string for po in sorted(i18n.PO_DIR.rglob("*.po")) for m in i18n.catalogue_entries(po))
    words = [w for w in i18n.search_words() if w in used]
    missing = [w for w in words if w not in text["terms"] and w not in text["titleterms"]]
    assert len(words) >= 30 and not missing, f"{len(words)} terms used; not in the search index: {missing}"


# --- the live panels (book/_ext/live_panels.py) ------------------------------------------------------------------

sys.path.insert(0, str(REPO_ROOT / "book" / "_ext"))
import live_panels  # noqa: E402

LIVE_PAGES = [{"page": f"{prefix}{doc}.html", "kind": kind, "lang": lang}
              for prefix, lang in (("", "en"), ("zh/", "zh")) for doc, (_, kind, _) in live_panels.PANELS.items()
              ] if EDITIONS else []
EDGE_CASES = ["Hello world", "  两个空格  ", "123 4567", "🌙🌸", "ＡＢＣ全角", "龘靐", "<|im_end|>", "<|im_start|>诗",
              "\t制表符\t", "a\nb", "月" * 40]


ATTENTION_PROMPTS = ["床前明月光，疑是地上霜。", "春眠不觉晓，", "Hello 123 🌙"]  # attention rows and router choices


def live_reference() -> dict:
    """What the page must reproduce, computed here by the package: token ids, last logits, greedy 32, every
    layer's attention probabilities (poetry-dense) and the router's top-k choices (poetry-moe)."""
    import torch
    from minimind.checkpoint import load_pretrained, load_tokenizer
    from minimind.training.data import SAMPLE
    tok, model = load_tokenizer("poetry-dense"), load_pretrained("poetry-dense")
    moe = load_pretrained("poetry-moe")
    lines = [line for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()][:300] + EDGE_CASES
    prompts, attention, router = [], [], []
    for text in ["床前明月光，", "春眠不觉晓，处处闻啼鸟。"]:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            last = model(torch.tensor([ids])).logits[0, -1].tolist()
        greedy = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=32)[0, len(ids):].tolist()
        prompts.append({"ids": ids, "logits_last": last, "greedy": greedy})
    for text in ATTENTION_PROMPTS:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            probs = torch.stack([a[0] for a in model(torch.tensor([ids]), output_attentions=True).attentions])
            logits = moe(torch.tensor([ids]), output_router_logits=True).router_logits  # L x [S, E]
        choice = torch.stack([torch.topk(torch.softmax(r.float(), -1), moe.config.num_experts_per_tok).indices
                              for r in logits])  # [L, S, k]
        attention.append({"model": "poetry-dense", "ids": ids, "dims": list(probs.shape),
                          "data": probs.flatten().tolist()})  # [L, H, S, S]
        router.append({"model": "poetry-moe", "ids": ids, "dims": list(choice.shape),
                       "choice": choice.flatten().tolist()})
    return {"lines": lines, "ids": [tok(line)["input_ids"] for line in lines], "prompts": prompts,
            "attention": attention, "router": router}


def live_spec(html: Path, base_url: str, report_path: Path) -> dict:
    """check_live.mjs's spec: every kind fully on the English pages, the Chinese ones lighter (labels,
    typing, console); the link on ch10, the numbers on ch06 (its MoE model is loaded there), the long input
    on ch10."""
    return {"base_url": base_url, "file_root": str(html), "chromium": str(CHROMIUM), "pages": LIVE_PAGES,
            "full_lang": "en", "numeric_page": "book/ch06_moe.html", "long_page": "book/ch10_generation.html",
            "link_page": "book/ch10_generation.html", "reference": live_reference(),
            "report_path": str(report_path)}


@pytest.fixture(scope="module")
def built_html():
    """The built book (both editions), as test_live_panels needs it; BOOK_BUILT=1 reuses _build/html, so
    `BOOK_BUILT=1 pytest tests/test_browser.py -k live` runs the live check alone."""
    _require_browser()
    _build_book(BOOK_DIR, reuse=os.environ.get("BOOK_BUILT") == "1" or BUILT_HERE)
    return BOOK_DIR / "_build" / "html"


@pytest.mark.skipif(not EDITIONS, reason="only the repository's book has live panels")
def test_live_panels(built_html, tmp_path):
    """Every live panel of both editions works in the page, equals Python, and falls back from file://."""
    node = _require_browser()
    html = built_html
    assert (html / "_static" / "live" / "models" / "models.json").exists(), "the build exported no models"
    assert not (html / "zh" / "_static" / "offline" / "onnxruntime-web").exists(), "zh duplicates the runtime"
    server, base_url = _serve(html)
    spec = live_spec(html, base_url, tmp_path / "live.json")
    (tmp_path / "spec.json").write_text(json.dumps(spec, ensure_ascii=False))
    try:
        result = subprocess.run([node, str(DRIVER_DIR / "check_live.mjs"), str(tmp_path / "spec.json")],
                                cwd=DRIVER_DIR, capture_output=True, text=True, timeout=900)
    finally:
        server.terminate()
        server.wait(timeout=10)
    try:
        report = json.loads((tmp_path / "live.json").read_text())
    except (OSError, json.JSONDecodeError):
        pytest.fail(f"check_live.mjs gave no report (exit {result.returncode}):\n{result.stderr[-3000:]}")
    (BOOK_DIR / "_build" / "screenshots").mkdir(parents=True, exist_ok=True)
    (BOOK_DIR / "_build" / "screenshots" / "live.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(f"\nlive panels: {report.get('seconds')} s in the browser")
    assert "error" not in report, report["error"]
    problems = [f"{p['page']}: {problem}" for p in report["pages"] for problem in p["problems"]]
    assert len(report["pages"]) == len(LIVE_PAGES) + 1 and not problems, "\n".join(problems)
    numeric = next(p["numeric"] for p in report["pages"] if "numeric" in p)
    assert numeric["lines"] == len(spec["reference"]["lines"]) and numeric["attention_prompts"] == 3
    assert numeric["router_prompts"] == 3 and numeric["router_choices_compared"] > 0


@pytest.mark.skipif(not EDITIONS, reason="only the repository's book has a Chinese edition")
def test_the_chinese_download_button_gets_the_chinese_notebook(built_html):
    """A Chinese page's .ipynb download link points at _sources/, which tools/i18n.py build rewrote."""
    name = "ch01_shapes"
    page = built_html / "zh" / "book" / f"{name}.html"
    [href] = re.findall(r'href="([^"]*_sources/[^"]*\.ipynb)"', page.read_text(encoding="utf-8"))
    target = (page.parent / href).resolve()
    assert target == (built_html / "zh" / "_sources" / "book" / f"{name}.ipynb").resolve()
    assert json.loads(target.read_text(encoding="utf-8"))["metadata"]["language"] == "zh"


SIDEBAR = re.compile(r'<nav class="bd-links bd-docs-nav"[^>]*>(.*?)</nav>', re.S)
SIDEBAR_LINK = re.compile(r'<a class="[^"]*reference internal[^"]*" href="([^"#]*)[^"]*">(.*?)</a>', re.S)
PREV_NEXT = re.compile(r'<a class="(?:left-prev|right-next)"\s+href="([^"]*)".*?'
                       r'<p class="prev-next-title">(.*?)</p>', re.S)


def sidebar(page: Path) -> list[tuple[str, str]]:
    """(target page, title) of each chapter in a page's sidebar; the page itself is linked as "#"."""
    links = SIDEBAR_LINK.findall(SIDEBAR.search(page.read_text(encoding="utf-8"))[1])
    return [(href or page.name, " ".join(title.split())) for href, title in links]


@pytest.mark.parametrize("edition", ["", "zh"] if EDITIONS else [""])
def test_every_page_of_an_edition_has_the_same_sidebar(built_html, edition):
    """An incremental build can leave a page with an old chapter title in its sidebar or prev/next link:
    every page of one edition lists the same chapters, and its prev/next titles are theirs."""
    pages = sorted((built_html / edition / "book").glob("*.html"))
    sidebars = {page.name: sidebar(page) for page in pages}
    first, reference = next(iter(sidebars.items()))
    differ = [name for name, links in sidebars.items() if links != reference]
    assert reference and not differ, f"{differ} list other chapters than {first}: rebuild cleanly"
    titles = dict(reference)
    stale = [(page.name, href, title) for page in pages
             for href, title in PREV_NEXT.findall(page.read_text(encoding="utf-8"))
             if href in titles and " ".join(title.split()) != titles[href]]
    assert not stale, f"prev/next titles that are not the chapters' (page, link, title): {stale}"


@pytest.mark.parametrize("edition", ["", "zh"] if EDITIONS else [""])
def test_every_style_sheet_of_the_book_is_linked_from_its_pages(built_html, edition):
    """Sphinx links only html_css_files: a style sheet in a subfolder of book/_static (live/live.css) is
    copied but never loaded unless _config.yml lists it."""
    sheets = [p.relative_to(REPO_ROOT / "book" / "_static").as_posix()
              for p in (REPO_ROOT / "book" / "_static").rglob("*.css") if "offline" not in p.parts]
    page = (built_html / edition / "book" / "ch10_generation.html").read_text(encoding="utf-8")
    linked = re.findall(r'<link rel="stylesheet"[^>]*href="\.\./_static/([^"?]+)', page)
    assert sheets and not set(sheets) - set(linked), f"not linked: {sorted(set(sheets) - set(linked))}"


LABEL_ATTRIBUTE = re.compile(r'\b(?:title|aria-label|placeholder|data-bs-title)="([^"]*)"')


@pytest.mark.skipif(not EDITIONS, reason="only the repository's book has a Chinese edition")
def test_the_chinese_pages_tooltips_and_screen_reader_labels_are_chinese(built_html):
    """The themes' tooltips, placeholders and aria-labels (editions.CHROME_ZH), which no catalogue translates."""
    english = {(page.name, value) for page in (built_html / "zh" / "book").glob("*.html")
               for value in LABEL_ATTRIBUTE.findall(page.read_text(encoding="utf-8"))
               if re.search(r"[A-Za-z]{3}", value) and not re.search(r"[\u4e00-\u9fff]", value)}
    assert not english, f"English labels on Chinese pages (page, text): {sorted(english)[:8]}"
    script = (built_html / "zh" / "_static" / "togglebutton.js").read_text(encoding="utf-8")
    assert "Toggle hidden content" not in script


# --- the checks themselves, on a fixture book --------------------------------------------------------------------

FIXTURE_CHAPTERS = ["fx01_fixture", "fx02_broken"]


def _fixture_book(root: Path) -> Path:
    """A book with the repo's _config.yml, static files and extensions, and the fixture notebooks as chapters."""
    (root / "book").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "_config.yml", root / "_config.yml")
    for name in ("_static", "_ext"):
        (root / "book" / name).symlink_to(REPO_ROOT / "book" / name)
    for name in FIXTURE_CHAPTERS:
        shutil.copy(FIXTURES / f"{name}.ipynb", root / "book" / f"{name}.ipynb")
    toc = {"format": "jb-book", "root": f"book/{FIXTURE_CHAPTERS[0]}",
           "chapters": [{"file": f"book/{name}"} for name in FIXTURE_CHAPTERS[1:]]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    return root


def test_the_checks_pass_a_clean_page_and_catch_planted_problems(tmp_path):
    book = _fixture_book(tmp_path / "fixture_book")
    # the broken page also stands for a Chinese page left in English whose twin link points nowhere
    pages = [{**e, "lang": "zh", "twin": True} if "fx02" in e["page"] else e for e in book_pages(book)]
    report = check_book(book, pages, tmp_path)
    assert "error" not in report, report.get("error")

    clean = _page_result(report, "book/fx01_fixture.html")
    assert clean["problems"] == [], clean["problems"]
    [player] = clean["sliders"]
    assert [step["readout"] for step in player["steps"]] == ["T = 0.5", "T = 1.0", "T = 2.0", "T = 1.0"]
    assert [step["shown"] for step in player["steps"]] == [0, 1, 2, 1]

    problems = "\n".join(_page_result(report, "book/fx02_broken.html")["problems"])
    expected = {
        "`$$` without a blank line before it": "unrendered math: a literal $",
        "an output clipped by overflow: hidden": "<div> cut off",
        "a <pre> that does not wrap": "code/output line cut off",
        "a Stack with no slider": "is not jslinked to any slider",
        "a slider with its readout hidden": "the readout shows null",
        "two frames with one label": "frames share the label",
        "English prose on a Chinese page": "prose left in English in the Chinese edition",
        "a twin link to a missing page": "the link to the other edition (",
    }
    missed = [what for what, text in expected.items() if text not in problems]
    assert not missed, f"the driver missed: {missed}\nit reported:\n{problems}"
