// Drive headless Debian chromium over the built book and check what a reader sees.
//   node check_book.mjs SPEC.json
// SPEC: {"base_url": "http://127.0.0.1:PORT/", "screenshot_dir": "...", "chromium": "/usr/bin/chromium",
//        "pages": [{"page": "book/intro.html", "widgets": 1, "slider_stacks": 1, "math": true}]}
//   widgets: number of widget outputs on the page (each must render)
//   slider_stacks: number of IntSlider -> Stack jslinks; each is stepped through every value and
//                  the displayed image must be the Stack's child at that index
//   math: true/false; omitted = required when the page has Sphinx math (.math) in it
// Prints one JSON report on stdout; exit code 1 when any page has a problem.
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

// Known harmless: html-manager's schema validator warning; the browser's automatic /favicon.ico
// probe (the book declares no favicon, so the static server answers 404).
const IGNORED_CONSOLE = [/strict mode: use allowUnionTypes/];
const IGNORED_URLS = [/\/favicon\.ico$/];
const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const base = new URL(spec.base_url);
mkdirSync(spec.screenshot_dir, { recursive: true });

const isLocal = (url) => {
  if (url.startsWith("data:") || url.startsWith("blob:") || url === "about:blank") return true;
  try {
    const u = new URL(url);
    return u.hostname === base.hostname && u.port === base.port;
  } catch {
    return false;
  }
};

// --- in-page helpers (run in the browser) ---------------------------------------------------
// Model tree of the embedded widget state, and the DOM element of a model inside a top-level view.
function pageWidgetInfo() {
  const stateTag = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
  const state = stateTag ? JSON.parse(stateTag.textContent).state : {};
  const views = [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')];
  const ref = (s) => (typeof s === "string" ? s.replace(/^IPY_MODEL_/, "") : s);
  const rendered = views.map((v) => {
    const id = JSON.parse(v.textContent).model_id;
    const area = v.previousElementSibling;
    const ok = !!area && area.classList.contains("widget-subarea") && area.children.length > 0 &&
      area.getBoundingClientRect().height > 0 && !/Error displaying widget/.test(area.textContent);
    return { model_id: id, known: id in state, rendered: ok };
  });
  const links = [];
  for (const [id, m] of Object.entries(state)) {
    if (m.model_name !== "LinkModel" && m.model_name !== "DirectionalLinkModel") continue;
    const [src, srcAttr] = m.state.source, [dst, dstAttr] = m.state.target;
    const ends = [[ref(src), srcAttr], [ref(dst), dstAttr]];
    const slider = ends.find(([mid, a]) => a === "value" && /SliderModel$/.test(state[mid]?.model_name || ""));
    const stack = ends.find(([mid, a]) => a === "selected_index" && state[mid]?.model_name === "StackModel");
    if (slider && stack) links.push({ link: id, slider: slider[0], stack: stack[0] });
  }
  return { rendered, links, math: !!document.querySelector(".math, div.math, span.math") };
}

// Mark the DOM elements of a slider and its stack with data attributes (walks Box children).
function markLinkedElements([sliderId, stackId, tag]) {
  const state = JSON.parse(document.querySelector(
    'script[type="application/vnd.jupyter.widget-state+json"]').textContent).state;
  const ref = (s) => s.replace(/^IPY_MODEL_/, "");
  const found = {};
  const walk = (modelId, el) => {
    if (!el) return;
    if (modelId === sliderId) found.slider = el;
    if (modelId === stackId) found.stack = el;
    const m = state[modelId];
    if (!m || m.model_name === "StackModel" || !Array.isArray(m.state.children)) return;
    const childEls = [...el.children].filter((c) => c.classList.contains("jupyter-widgets"));
    m.state.children.forEach((c, i) => walk(ref(c), childEls[i]));
  };
  for (const v of document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')) {
    const area = v.previousElementSibling;
    if (area && area.classList.contains("widget-subarea")) walk(JSON.parse(v.textContent).model_id, area.firstElementChild);
  }
  if (found.slider) found.slider.setAttribute("data-check-slider", tag);
  if (found.stack) found.stack.setAttribute("data-check-stack", tag);
  return { slider: !!found.slider, stack: !!found.stack };
}

// Which Stack child is on screen: compare the visible <img> bytes with the children's PNG buffers.
async function displayedChild([stackId, tag]) {
  const state = JSON.parse(document.querySelector(
    'script[type="application/vnd.jupyter.widget-state+json"]').textContent).state;
  const stackEl = document.querySelector(`[data-check-stack="${tag}"]`);
  const imgs = [...stackEl.querySelectorAll("img")].filter((i) => i.offsetParent !== null && i.src);
  if (imgs.length !== 1) return { index: null, why: `${imgs.length} visible images in the stack` };
  const bytes = new Uint8Array(await (await fetch(imgs[0].src)).arrayBuffer());
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  const b64 = btoa(bin);
  const children = state[stackId].state.children.map((c) => c.replace(/^IPY_MODEL_/, ""));
  const index = children.findIndex((cid) => {
    const buf = (state[cid]?.buffers || []).find((b) => b.path && b.path[0] === "value");
    return buf && buf.data.replace(/\s/g, "") === b64;
  });
  return { index: index < 0 ? null : index, why: index < 0 ? "visible image matches no child" : "" };
}

const shotName = (page) => page.replace(/\.html$/, "").replace(/[\\/]/g, "__");

// --- one page ------------------------------------------------------------------------------------
async function checkPage(context, entry) {
  const problems = [];
  const offline = new Set();
  const page = await context.newPage();
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const text = msg.text();
    const where = msg.location()?.url || "";
    if (IGNORED_URLS.some((re) => re.test(where))) return;
    if (!IGNORED_CONSOLE.some((re) => re.test(text))) problems.push(`console error: ${text}${where ? ` (${where})` : ""}`);
  });
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("request", (req) => {
    const url = req.url();
    if (!isLocal(url)) problems.push(`request leaves 127.0.0.1: ${url}`);
    else if (url.includes("/_static/offline/")) offline.add(url.split("/_static/offline/")[1].split("?")[0]);
  });
  page.on("requestfailed", (req) => {
    if (isLocal(req.url())) problems.push(`failed request: ${req.url()} (${req.failure()?.errorText})`);
  });
  page.on("response", (res) => {
    if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`);
  });

  const url = new URL(entry.page, base).href;
  const result = { page: entry.page, problems, screenshot: null, sliders: [], offline_files: [] };
  try {
    await page.goto(url, { waitUntil: "load", timeout: 60000 });
    const expected = entry.widgets ?? 0;
    if (expected > 0) {
      await page.waitForFunction((n) => document.querySelectorAll(".widget-subarea > *").length >= n,
        expected, { timeout: 30000 }).catch(() => problems.push("timed out waiting for widgets to render"));
    }
    const info = await page.evaluate(pageWidgetInfo);
    result.widgets = info.rendered.length;
    if (info.rendered.length !== expected) {
      problems.push(`expected ${expected} widget outputs, page has ${info.rendered.length}`);
    }
    info.rendered.filter((r) => !r.rendered).forEach((r) =>
      problems.push(`widget ${r.model_id} did not render${r.known ? "" : " (no saved state for it)"}`));

    const wantMath = entry.math ?? info.math;
    if (wantMath) {
      await page.waitForSelector("mjx-container", { state: "attached", timeout: 30000 })
        .catch(() => problems.push("math on the page but no mjx-container: MathJax did not render"));
      const merrors = await page.locator("mjx-merror").count();
      if (merrors) problems.push(`${merrors} MathJax errors (mjx-merror)`);
    }
    result.math = wantMath ? await page.locator("mjx-container").count() : 0;

    const expectedLinks = entry.slider_stacks ?? 0;
    if (info.links.length !== expectedLinks) {
      problems.push(`expected ${expectedLinks} slider->stack links, state has ${info.links.length}`);
    }
    for (const [n, link] of info.links.entries()) {
      const tag = `l${n}`;
      const marked = await page.evaluate(markLinkedElements, [link.slider, link.stack, tag]);
      if (!marked.slider || !marked.stack) {
        problems.push(`slider->stack link ${n}: slider or stack not displayed`);
        continue;
      }
      const handle = page.locator(`[data-check-slider="${tag}"] .noUi-handle`).first();
      const readValue = async () => Number(await handle.getAttribute("aria-valuenow"));
      const [min, max] = [Number(await handle.getAttribute("aria-valuemin")), Number(await handle.getAttribute("aria-valuemax"))];
      const steps = [];
      const expectFrame = async (value, how) => {
        // the jslink and the Image view update asynchronously: poll for up to 5 s
        let shown = null;
        for (let t = 0; t < 50; t++) {
          shown = await page.evaluate(displayedChild, [link.stack, tag]);
          if (shown.index === value) break;
          await page.waitForTimeout(100);
        }
        steps.push({ how, value, shown: shown.index });
        if (shown.index !== value) {
          problems.push(`slider->stack link ${n}: after ${how} slider=${value}, displayed child ` +
            `${shown.index} (${shown.why || "wrong frame"})`);
        }
      };
      await handle.scrollIntoViewIfNeeded();
      await expectFrame(await readValue(), "load");
      await handle.focus();
      while ((await readValue()) < max) {
        const before = await readValue();
        await page.keyboard.press("ArrowRight");
        const after = await readValue();
        if (after !== before + 1) {
          problems.push(`slider->stack link ${n}: ArrowRight moved ${before} -> ${after}`);
          break;
        }
        await expectFrame(after, "ArrowRight");
      }
      if (max > min) {
        await page.keyboard.press("ArrowLeft");
        await expectFrame(await readValue(), "ArrowLeft");
      }
      // a close-up of the whole widget output (after the last move), next to the page screenshot
      const closeUp = path.join(spec.screenshot_dir, shotName(entry.page) + `__slider${n}.png`);
      await page.locator(`.widget-subarea:has([data-check-slider="${tag}"])`).first()
        .screenshot({ path: closeUp }).catch((err) => problems.push(`widget screenshot failed: ${err.message}`));
      result.sliders.push({ link: n, min, max, steps, screenshot: closeUp });
    }
    await page.waitForLoadState("networkidle", { timeout: 15000 }).catch(() => {});
    // back to the top with nothing focused, so sticky headers and the skip link stay put
    await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
    await page.waitForTimeout(200);
    const shot = path.join(spec.screenshot_dir, shotName(entry.page) + ".png");
    await page.screenshot({ path: shot, fullPage: true });
    result.screenshot = shot;
  } catch (err) {
    problems.push(`driver error: ${err.message}`);
  } finally {
    result.offline_files = [...offline].sort();
    await page.close();
  }
  return result;
}

// --- main ----------------------------------------------------------------------------------------
const profile = mkdtempSync(path.join(tmpdir(), "book-chromium-"));
let context;
const report = { pages: [], ok: false };
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: spec.chromium || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  // nothing may leave the machine: requests to other hosts are recorded (see checkPage) and blocked
  await context.route((url) => !isLocal(url.href), (route) => route.abort("blockedbyclient"));
  for (const entry of spec.pages) report.pages.push(await checkPage(context, entry));
  report.ok = report.pages.every((p) => p.problems.length === 0);
} catch (err) {
  report.error = `${err.message}`;
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(JSON.stringify(report, null, 1) + "\n");
process.exit(report.ok ? 0 : 1);
