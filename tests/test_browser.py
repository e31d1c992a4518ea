"""The built HTML book, as a reader's browser sees it: offline, widgets alive, math rendered.

Builds the book (`jupyter-book build .`; set BOOK_BUILT=1 to reuse an existing _build/html),
serves _build/html on 127.0.0.1, and runs tests/browser/check_book.mjs (playwright-core driving
Debian's /usr/bin/chromium headless) over the pages in PAGES. Per page it checks: every widget
output renders; each IntSlider -> Stack jslink shows the Stack child matching the slider value as
the slider is stepped with the keyboard; MathJax renders; no request leaves 127.0.0.1; no failed
request; no console error. Screenshots go to _build/screenshots/.

Needs node, tests/browser/node_modules (`npm ci` there) and /usr/bin/chromium: skipped without
them, except under CI=true, where it fails instead.
Env: BOOK_DIR (book to build, default the repo), BOOK_BUILT=1, BROWSER_PAGES (JSON file
replacing PAGES).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Pages to check. page: HTML path under _build/html; widgets: number of widget outputs on the page;
# slider_stacks: number of IntSlider -> Stack jslinks (each is stepped through every value);
# math: True/False, or None = required whenever the page contains math.
PAGES = [
    {"page": "book/intro.html", "widgets": 1, "slider_stacks": 1, "math": True},
    {"page": "book/ch01_shapes.html", "widgets": 1, "slider_stacks": 1, "math": True},
    {"page": "book/ch02_rmsnorm.html", "widgets": 1, "slider_stacks": 1, "math": True},
    {"page": "book/ch03_rope.html", "widgets": 2, "slider_stacks": 2, "math": True},
]

REPO_ROOT = Path(__file__).resolve().parents[1]
DRIVER_DIR = REPO_ROOT / "tests" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
BOOK_DIR = Path(os.environ.get("BOOK_DIR", REPO_ROOT)).resolve()
HTML_DIR = BOOK_DIR / "_build" / "html"
SCREENSHOT_DIR = BOOK_DIR / "_build" / "screenshots"


def _pages() -> list[dict]:
    override = os.environ.get("BROWSER_PAGES")
    return json.loads(Path(override).read_text()) if override else PAGES


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require(ok: bool, reason: str) -> None:
    """Skip locally when a tool is missing; under CI a missing tool is a failure."""
    if ok:
        return
    if _on_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


def _build_book() -> float:
    start = time.perf_counter()
    if os.environ.get("BOOK_BUILT") == "1":
        assert (HTML_DIR / "index.html").exists(), f"BOOK_BUILT=1 but {HTML_DIR}/index.html is missing"
        return 0.0
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book", "build", str(BOOK_DIR)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"jupyter-book build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
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


@pytest.fixture(scope="module")
def browser_report(tmp_path_factory):
    node = shutil.which("node")
    _require(node is not None, "node is not installed")
    _require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium)")
    _require((DRIVER_DIR / "node_modules" / "playwright-core").is_dir(),
             "playwright-core is not installed (run `npm ci` in tests/browser)")

    build_s = _build_book()
    server, base_url = _serve(HTML_DIR)
    spec = {"base_url": base_url, "screenshot_dir": str(SCREENSHOT_DIR), "chromium": str(CHROMIUM),
            "pages": _pages()}
    spec_path = tmp_path_factory.mktemp("browser") / "spec.json"
    spec_path.write_text(json.dumps(spec))
    start = time.perf_counter()
    try:
        result = subprocess.run([node, str(DRIVER_DIR / "check_book.mjs"), str(spec_path)],
                                cwd=DRIVER_DIR, capture_output=True, text=True, timeout=600)
    finally:
        server.terminate()
        server.wait(timeout=10)
    browser_s = time.perf_counter() - start
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"check_book.mjs gave no report (exit {result.returncode}):\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    report["timings_s"] = {"build": round(build_s, 1), "browser": round(browser_s, 1)}
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    (SCREENSHOT_DIR / "report.json").write_text(json.dumps(report, indent=1))
    print(f"\nbook build {build_s:.1f} s, browser checks {browser_s:.1f} s, "
          f"report: {SCREENSHOT_DIR / 'report.json'}")
    return report


def test_browser_started(browser_report):
    assert "error" not in browser_report, browser_report.get("error")


@pytest.mark.parametrize("entry", _pages(), ids=lambda entry: entry["page"])
def test_page(browser_report, entry):
    [result] = [p for p in browser_report["pages"] if p["page"] == entry["page"]] or [None]
    assert result is not None, f"{entry['page']} was not checked: {browser_report.get('error')}"
    problems = "\n  ".join(result["problems"])
    assert not result["problems"], f"{entry['page']}:\n  {problems}"
    assert result["screenshot"] and Path(result["screenshot"]).exists()
