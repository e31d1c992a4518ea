// Drive headless Debian chromium over the built book and check what a reader sees.
//   node check_book.mjs SPEC.json
// SPEC: {"base_url": "http://127.0.0.1:PORT/", "screenshot_dir": "...", "chromium": "/usr/bin/chromium",
//        "pages": [{"page": "book/intro.html", "widgets": 1}]}
//   widgets: number of widget outputs on the page (each must render); omitted = not checked
//   slider_stacks: (optional) number of slider -> Stack jslinks the page must have
//   math: true/false; omitted = required when the page has Sphinx math (.math) in it
//   twin: true = the page links to the same page in the other edition (p.edition-switch), and that page exists
//   lang: "zh" = a page of the Chinese edition: no paragraph of its prose may be left in English
//       and no English word in its widgets' descriptions, readouts, captions (LATIN_OK)
//       "searches": [{"query": "残差流", "page": "zh/search.html", "expect": "zh/book/ch07_residual.html"}]
//   the search page, given the query, must list the expected page among its results
// Per page, discovered from the page itself (nothing is listed per chapter):
// - every widget output renders; every Stack is jslinked to a slider (IntSlider `value` or SelectionSlider
//   `index`, as minimind.lab.viz.frame_player makes them); each slider is stepped through every position with
//   the keyboard, and each time the readout must show the label (SelectionSlider) or value (IntSlider) and the
//   image must be the Stack's child at that index;
// - MathJax rendered every math element, no MathJax error, and no literal `$` left in the text outside code
//   (a `$$` block without a blank line before it leaves `$` and run-together italics);
// - no code line or output cut off: a <pre> (code cell, output, live source) wider than its box, or any output,
//   table or display math wider than its box with no scrollbar to reach the rest;
// - no request leaves 127.0.0.1, no failed request, no console error.
// Prints one JSON report on stdout; exit code 1 when any page has a problem.
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
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
    const slider = ends.find(([mid, a]) => (a === "value" || a === "index") &&
      /SliderModel$/.test(state[mid]?.model_name || ""));
    const stack = ends.find(([mid, a]) => a === "selected_index" && state[mid]?.model_name === "StackModel");
    if (slider && stack) {
      const sm = state[slider[0]];
      // what the readout must show at each position: the option labels of a SelectionSlider, else the value
      const labels = Array.isArray(sm.state._options_labels) ? sm.state._options_labels : null;
      links.push({ link: id, slider: slider[0], stack: stack[0], attr: slider[1], labels,
        model: sm.model_name, frames: state[stack[0]].state.children.length });
    }
  }
  const linkedStacks = new Set(links.map((l) => l.stack));
  const unlinked = Object.entries(state)
    .filter(([id, m]) => m.model_name === "StackModel" && !linkedStacks.has(id))
    .map(([id, m]) => ({ id, frames: (m.state.children || []).length }));
  return { rendered, links, unlinked, math: !!document.querySelector(".math, div.math, span.math") };
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
    // every widget view is a Lumino widget (a SelectionSlider lacks the `jupyter-widgets` class)
    const childEls = [...el.children].filter((c) => c.classList.contains("lm-Widget"));
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

const stackHidden = (tag) => document.querySelector(`[data-check-stack="${tag}"]`).offsetParent === null;

// Pictures drawn per edition (.mm-en / .mm-zh, minimind.lab.viz): only this edition's are shown.
function editionPictures(lang) {
  return [...document.querySelectorAll(".mm-en, .mm-zh")].flatMap((el) => {
    const mine = el.classList.contains(lang === "zh" ? "mm-zh" : "mm-en");
    const shown = el.offsetParent !== null && el.getBoundingClientRect().height > 0;
    return mine === shown ? [] : [`a picture for the ${mine ? "page's" : "other"} edition is ` +
      `${shown ? "shown" : "hidden"} (${el.className})`];
  });
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

// Literal `$` left in the rendered text outside code and outputs, and math MathJax did not typeset.
// (In-page functions are sent to the browser one by one, so each finds the article column itself.)
function unrenderedMath() {
  const root = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const skip = "pre, code, script, style, textarea, mjx-container, .math, .cell_output, .highlight, .MathJax";
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const dollars = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const text = node.nodeValue;
    if (!text.includes("$") || node.parentElement.closest(skip)) continue;
    const block = node.parentElement.closest("p, li, td, dd, h1, h2, h3, h4, div") || node.parentElement;
    const context = block.textContent.replace(/\s+/g, " ");
    const at = context.indexOf("$");
    dollars.push(context.slice(Math.max(0, at - 50), at + 50));
  }
  const untypeset = [...root.querySelectorAll(".math")]
    .filter((el) => !el.querySelector("mjx-container") && !el.closest(".cell_output"))
    .map((el) => el.textContent.replace(/\s+/g, " ").slice(0, 80));
  return { dollars: [...new Set(dollars)], untypeset };
}

// Code lines and outputs a reader cannot see in full: a <pre> wider than its box (code must wrap: a hidden
// horizontal scrollbar is not discoverable, and headless Chromium shows none), or any output element, table or
// display math whose content is wider than its box, or that sticks out of a clipping parent or out of the
// column, with no scrollbar to reach the rest. Widget internals are left to the widget (its box scrolls).
function clippedContent() {
  const root = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const style = (el) => getComputedStyle(el);
  const scrolls = (el) => ["auto", "scroll"].includes(style(el).overflowX);
  const where = (el) => {
    const cell = el.closest(".cell");
    const code = cell?.querySelector(".cell_input pre")?.textContent.trim().split("\n")[0].slice(0, 60);
    return cell ? `in the cell starting ${JSON.stringify(code || "")}` : "in the text";
  };
  const longest = (el) => (el.textContent || "").split("\n").reduce((a, b) => (b.length > a.length ? b : a), "")
    .trim().slice(0, 70);
  const describe = (el) => el.tagName === "PRE" ? "code/output line" : `<${el.tagName.toLowerCase()}${
    el.classList.length ? "." + [...el.classList].slice(0, 2).join(".") : ""}>`;
  const problems = [];
  const seen = new Set();
  const candidates = root.querySelectorAll(
    "pre, table, div.math, mjx-container[display='true'], .widget-subarea, .cell_output *");
  for (const el of candidates) {
    if (el.clientWidth === 0) continue;  // not displayed (e.g. a collapsed solution)
    if (el.closest(".widget-subarea") && !el.matches(".widget-subarea")) continue;
    if (el.closest("pre") && el.tagName !== "PRE") continue;
    if (el.closest("mjx-container") && el.tagName !== "MJX-CONTAINER") continue;
    const rect = el.getBoundingClientRect();
    const wider = el.scrollWidth > el.clientWidth + 2;
    let problem = null, right = rect.right;
    if (wider && el.tagName === "PRE") {
      problem = `${describe(el)} cut off: ${el.scrollWidth} px of text in a ${el.clientWidth} px box`;
    } else if (wider && ["hidden", "clip"].includes(style(el).overflowX)) {
      problem = `${describe(el)} cut off: ${el.scrollWidth} px wide in a ${el.clientWidth} px box, no scrollbar`;
    } else if (wider && !scrolls(el)) {
      right = rect.left + el.scrollWidth;  // visible overflow: where does the content end?
    }
    if (!problem) {
      let parent = el.parentElement;
      while (parent && parent !== root && style(parent).overflowX === "visible") parent = parent.parentElement;
      const limit = (parent || root).getBoundingClientRect().right;
      if (right > limit + 2 && !(parent && parent !== root && scrolls(parent))) {
        problem = `${describe(el)} cut off: it reaches ${Math.round(right - limit)} px past ` +
          `${!parent || parent === root ? "the text column" : "its clipping box"}, no scrollbar`;
      }
    }
    if (problem) {
      const text = `${problem} ${where(el)}: ${JSON.stringify(longest(el))}`;
      if (!seen.has(text)) problems.push(text), seen.add(text);
    }
  }
  return problems;
}

// What the slider's readout shows now (null when there is none on screen).
function readoutText(tag) {
  const el = document.querySelector(`[data-check-slider="${tag}"] .widget-readout`);
  if (!el || el.offsetParent === null || el.getBoundingClientRect().width === 0) return null;
  return el.textContent.trim();
}

// Paragraphs and list items of the prose (not code, outputs or widgets) written in English: in the Chinese
// edition they are messages the catalogue lacks or marks fuzzy, which Sphinx shows in English.
function englishProse() {
  const root = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const skip = "pre, code, .cell_output, .widget-subarea, .MathJax, mjx-container, .edition-switch, table";
  const english = [];
  for (const el of root.querySelectorAll("p, li, h1, h2, h3, .admonition-title")) {
    if (el.closest(skip) || el.querySelector("p, li")) continue;
    const clone = el.cloneNode(true);
    clone.querySelectorAll("code, mjx-container, .math").forEach((c) => c.remove());
    const text = clone.textContent.replace(/\s+/g, " ").trim();
    const words = text.match(/[A-Za-z]{2,}/g) || [];
    const pinyin = /[āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜ]/.test(text);  // the glossary's pinyin lines are not English
    if (words.length >= 4 && !pinyin && !/[\u4e00-\u9fff]/.test(text)) english.push(text.slice(0, 80));
  }
  // the sidebar's part captions come from _toc.yml
  for (const el of document.querySelectorAll(".caption-text")) {
    const text = el.textContent.trim();
    if ((text.match(/[A-Za-z]{2,}/g) || []).length >= 2 && !/[\u4e00-\u9fff]/.test(text)) english.push(text);
  }
  return english;
}

// The widgets' own text as rendered: descriptions (labels), readouts, HTML captions,
// buttons and dropdown options, without code font and <pre> (a poem the model wrote).
function widgetTexts() {
  const parts = ".widget-label, .widget-readout, .widget-html-content, button, option";
  const texts = [];
  for (const area of document.querySelectorAll(".widget-subarea")) {
    for (const el of area.querySelectorAll(parts)) {
      if (el.parentElement.closest(parts)) continue;
      const clone = el.cloneNode(true);
      clone.querySelectorAll("code, pre, style").forEach((c) => c.remove());
      const text = clone.textContent.replace(/\s+/g, " ").trim();
      if (text) texts.push(text);
    }
  }
  return texts;
}

// Latin words that stay Latin in the Chinese widgets (terms.tsv keeps them): the
// sampling settings as the code names them (top-k, top-p, top-1), the norm's eps and
// RMS, SiLU, softmax, token (kept as is), MiniMind, and `is_causal=True`, the wrong
// call ch04a's mask readout quotes. Single letters (T, k, q, d) are not words.
const LATIN_OK = new Set(["top", "eps", "RMS", "SiLU", "softmax", "token", "MiniMind",
  "is_causal", "True"]);
const englishWords = (text) =>
  (text.match(/[A-Za-z][A-Za-z_]+/g) || []).filter((word) => !LATIN_OK.has(word));

// The link to the other edition's page: its href and language.
function twinLink() {
  const a = document.querySelector("p.edition-switch a");
  return a ? { href: a.href, lang: a.getAttribute("hreflang") } : null;
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
    const expected = entry.widgets ?? null;
    if (expected > 0) {
      await page.waitForFunction((n) => document.querySelectorAll(".widget-subarea > *").length >= n,
        expected, { timeout: 30000 }).catch(() => problems.push("timed out waiting for widgets to render"));
    }
    const info = await page.evaluate(pageWidgetInfo);
    result.widgets = info.rendered.length;
    if (expected !== null && info.rendered.length !== expected) {
      problems.push(`expected ${expected} widget outputs, page has ${info.rendered.length}`);
    }
    info.rendered.filter((r) => !r.rendered).forEach((r) =>
      problems.push(`widget ${r.model_id} did not render${r.known ? "" : " (no saved state for it)"}`));

    const wantMath = entry.math ?? info.math;
    if (wantMath) {
      await page.waitForSelector("mjx-container", { state: "attached", timeout: 30000 })
        .catch(() => problems.push("math on the page but no mjx-container: MathJax did not render"));
      await page.evaluate(() => window.MathJax?.startup?.promise).catch(() => {});
      const merrors = await page.locator("mjx-merror").count();
      if (merrors) problems.push(`${merrors} MathJax errors (mjx-merror)`);
    }
    result.math = wantMath ? await page.locator("mjx-container").count() : 0;
    const math = await page.evaluate(unrenderedMath);
    math.dollars.forEach((text) => problems.push(`unrendered math: a literal $ in the text: "...${text}..."`));
    math.untypeset.forEach((text) => problems.push(`unrendered math: MathJax did not typeset ${JSON.stringify(text)}`));

    const expectedLinks = entry.slider_stacks ?? null;
    if (expectedLinks !== null && info.links.length !== expectedLinks) {
      problems.push(`expected ${expectedLinks} slider->stack links, state has ${info.links.length}`);
    }
    for (const [n, link] of info.links.entries()) {
      const dupes = (link.labels || []).filter((label, i, all) => all.indexOf(label) !== i);
      if (dupes.length) problems.push(`slider->stack link ${n}: frames share the label(s) ${JSON.stringify([...new Set(dupes)])}`);
    }
    info.unlinked.forEach((s) => problems.push(
      `a Stack of ${s.frames} frames is not jslinked to any slider: the reader only ever sees its first frame`));
    result.links = info.links.map(({ model, attr, frames, labels }) => ({ model, attr, frames, labels }));
    const hiddenStacks = [], walkedSliders = new Set();
    for (const [n, link] of info.links.entries()) {
      const tag = `l${n}`;
      const marked = await page.evaluate(markLinkedElements, [link.slider, link.stack, tag]);
      if (!marked.slider || !marked.stack) {
        problems.push(`slider->stack link ${n}: slider or stack not displayed`);
        continue;
      }
      // frames drawn per edition (viz.frame_player zh_frames): the other edition's Stack is hidden
      if (await page.evaluate(stackHidden, tag)) { hiddenStacks.push(link.slider); continue; }
      walkedSliders.add(link.slider);
      const handle = page.locator(`[data-check-slider="${tag}"] .noUi-handle`).first();
      const expectedReadout = (index) => (link.labels ? String(link.labels[index]) : String(index));
      const readValue = async () => Number(await handle.getAttribute("aria-valuenow"));
      const [min, max] = [Number(await handle.getAttribute("aria-valuemin")), Number(await handle.getAttribute("aria-valuemax"))];
      const steps = [];
      const expectFrame = async (value, how) => {
        // the jslink and the Image view update asynchronously: poll for up to 5 s
        let shown = null, readout = null;
        const want = expectedReadout(value);
        for (let t = 0; t < 50; t++) {
          shown = await page.evaluate(displayedChild, [link.stack, tag]);
          readout = await page.evaluate(readoutText, tag);
          if (shown.index === value && readout === want) break;
          await page.waitForTimeout(100);
        }
        steps.push({ how, value, shown: shown.index, readout });
        if (shown.index !== value) {
          problems.push(`slider->stack link ${n}: after ${how} slider=${value}, displayed child ` +
            `${shown.index} (${shown.why || "wrong frame"})`);
        }
        if (readout !== want) {
          problems.push(`slider->stack link ${n}: after ${how} to position ${value}, the readout shows ` +
            `${JSON.stringify(readout)} instead of ${JSON.stringify(want)}`);
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
    hiddenStacks.filter((slider) => !walkedSliders.has(slider)).forEach((slider) =>
      problems.push(`slider ${slider}: every Stack it moves is hidden on this page`));
    (await page.evaluate(editionPictures, entry.lang === "zh" ? "zh" : "en"))
      .forEach((p) => problems.push(p));
    (await page.evaluate(clippedContent)).forEach((p) => problems.push(p));
    if (entry.twin) {
      const twin = await page.evaluate(twinLink);
      if (!twin) problems.push("no link to the other edition (p.edition-switch)");
      else {
        const res = await page.request.get(twin.href).catch((err) => ({ status: () => err.message }));
        if (res.status() !== 200) problems.push(`the link to the other edition (${twin.href}) gives ${res.status()}`);
        result.twin = twin;
      }
    }
    if (entry.lang === "zh") {
      (await page.evaluate(englishProse)).forEach((text) =>
        problems.push(`prose left in English in the Chinese edition: ${JSON.stringify(text)}`));
      // every readout the slider walk saw, and what the widgets show now (widgets.po)
      const readouts = result.sliders.flatMap((s) => s.steps.map((st) => st.readout));
      const shown = await page.evaluate(widgetTexts);
      const texts = [...new Set([...readouts, ...shown])].filter(Boolean);
      for (const text of texts) {
        const words = englishWords(text);
        if (words.length) problems.push("widget text in English in the Chinese " +
          `edition: ${JSON.stringify(text.slice(0, 80))} (${words.join(", ")})`);
      }
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

// --- search ----------------------------------------------------------------------------------------
// Sphinx's search page with ?q=: wait until it has listed its results, then look for the expected page.
async function checkSearch(context, search) {
  const problems = [];
  const page = await context.newPage();
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  const url = new URL(`${search.page}?q=${encodeURIComponent(search.query)}`, base).href;
  let found = [];
  try {
    await page.goto(url, { waitUntil: "load", timeout: 60000 });
    const results = page.locator("#search-results ul.search li a, ul.search li a");
    for (let t = 0; t < 150 && found.length === 0; t++) {
      await page.waitForTimeout(100);
      found = await results.evaluateAll((links) => links.map((a) => a.href));
    }
    found = found.map((href) => new URL(href).pathname.replace(/^\//, ""));
    if (!found.some((f) => f === search.expect)) {
      problems.push(`searching ${JSON.stringify(search.query)} on ${search.page} does not find ${search.expect} ` +
        `(found ${found.length} pages: ${JSON.stringify(found.slice(0, 5))})`);
    }
  } catch (err) {
    problems.push(`driver error: ${err.message}`);
  } finally {
    await page.close();
  }
  return { ...search, found, problems };
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
  report.searches = [];
  for (const search of spec.searches || []) report.searches.push(await checkSearch(context, search));
  report.ok = report.pages.every((p) => p.problems.length === 0) &&
    report.searches.every((s) => s.problems.length === 0);
} catch (err) {
  report.error = `${err.message}`;
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
// process.exit() right after a large write to a pipe cuts stdout at 64 KiB: set the exit code and let Node
// finish writing (and write the report to a file as well, when the spec names one).
if (spec.report_path) writeFileSync(spec.report_path, JSON.stringify(report, null, 1));
process.stdout.write(JSON.stringify(report, null, 1) + "\n");
process.exitCode = report.ok ? 0 : 1;
