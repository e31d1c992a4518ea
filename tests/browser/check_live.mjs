// The live panels (book/_ext/live_panels.py) in headless Chromium: node check_live.mjs SPEC.json
// SPEC: {base_url, file_root, chromium, pages: [{page, kind, lang}], full_lang, numeric_page, long_page,
// link_page, reference: {lines, ids, prompts: [{ids, logits_last, greedy}], attention: [{model, ids, dims,
// data}], router: [{model, ids, dims, choice}]}, report_path}.
// One browser for everything. Each panel kind is checked fully on one edition (full_lang): the panel starts on
// a click (progress, then a picture), typing changes the picture, bad inputs give their message, markup typed
// stays text. The other edition's panels: the panel starts, its labels are in that language, typing changes the
// picture. On every page: zero console errors, zero requests outside the book. link_page is opened through a
// #live= link (text and settings in the fragment) and then fully checked in that same page; on numeric_page
// the page's tokenizer, logits, greedy continuation, attention rows and router choices are compared with the
// Python references in one page evaluation, with the model already loaded. Then the file:// fallback.
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const isLocal = (url) => /^(http:\/\/127\.0\.0\.1[:/]|file:|data:|blob:|about:)/.test(url);
const MARKUP = "<img src=x onerror=alert(1)></script>";
const IGNORED_CONSOLE = [/strict mode: use allowUnionTypes/];
const CJK = /[\u4e00-\u9fff]/;

function watch(page, problems) {
  page.on("console", (msg) => {
    if (msg.type() === "error" && !IGNORED_CONSOLE.some((re) => re.test(msg.text()))) problems.push(`console error: ${msg.text()}`);
  });
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("dialog", (d) => { problems.push(`a dialog opened: ${d.message()}`); d.dismiss(); });
  page.on("request", (req) => { if (!isLocal(req.url())) problems.push(`request leaves the book: ${req.url()}`); });
  page.on("requestfailed", (req) => problems.push(`failed request: ${req.url()} (${req.failure()?.errorText})`));
  page.on("response", (res) => { if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`); });
}

const renders = (page) => page.evaluate(() => Number(document.querySelector(".live-panel")?.dataset.renders || 0));

async function typeLine(page, text) {
  const before = await renders(page);
  await page.evaluate((t) => {
    const box = document.querySelector(".live-text");
    box.value = t;
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }, text);
  return before;
}

async function waitRender(page, before, what, problems, timeout = 30000) {
  await page.waitForFunction((n) => Number(document.querySelector(".live-panel").dataset.renders || 0) > n, before,
    { timeout, polling: 50 }).catch(() => problems.push(`no new picture after ${what}`));
}

const resultText = (page) => page.evaluate(() => document.querySelector(".live-result").textContent);
const imgsInPanel = (page) => page.evaluate(() => document.querySelectorAll(".live-panel img").length);

async function open(context, url, problems) {
  const page = await context.newPage();
  watch(page, problems);
  await page.goto(url, { waitUntil: "load", timeout: 60000 });
  const styled = await page.evaluate(() => {
    const panel = document.querySelector(".live-panel");
    return !!panel && getComputedStyle(panel).borderTopStyle === "solid";
  });
  if (!styled) problems.push("the panel is unstyled: live.css is not loaded");
  return page;
}

// Click the start button (unless the link started the panel); wait for the first picture.
async function start(page, entry, problems, timings, clicked = true) {
  const t0 = Date.now();
  if (clicked) {
    await page.click(".live-panel .live-start");
    await page.waitForFunction(() => document.querySelector(".live-progress"), null, { timeout: 10000, polling: 50 })
      .catch(() => problems.push("no progress indicator"));
  }
  await page.waitForFunction(() => document.querySelector(".live-panel.live-on, .live-panel.live-error"), null,
    { timeout: 60000, polling: 50 });
  const status = await page.textContent(".live-status");
  if (!(await page.$(".live-panel.live-on"))) { problems.push(`the panel did not start: ${status}`); return false; }
  await waitRender(page, 0, "start", problems);
  timings.first_picture_ms = Date.now() - t0;
  if (entry.lang === "zh" && !CJK.test(status)) problems.push(`status not in Chinese: ${status}`);
  return true;
}

async function typingChangesPicture(page, problems) {
  const first = await resultText(page);
  const before = await typeLine(page, "白日依山尽，黄河入海流。");
  await waitRender(page, before, "typing", problems);
  if ((await resultText(page)) === first) problems.push("typing a new line did not change the picture");
}

// The other edition: the panel starts, speaks the page's language, and follows the box.
async function lightCheck(context, entry) {
  const problems = [], timings = {};
  const result = { page: entry.page, problems, timings, depth: "labels, typing, console" };
  let page;
  try {
    page = await open(context, new URL(entry.page, spec.base_url).href, problems);
    if (!(await start(page, entry, problems, timings))) return result;
    const labels = await page.evaluate(() => Array.from(document.querySelectorAll(
      ".live-label, .live-examples > span, .live-control > span, .live-controls button, .live-result caption, " +
      ".live-result th, .live-result p"), (n) => n.textContent.trim()).filter((t) => /[A-Za-z]{3}/.test(t) || /[\u4e00-\u9fff]/.test(t)));
    // "token" is the Chinese edition's own term (terms.tsv), like top-k and the expert ids
    const wrongLanguage = labels.filter((t) => (entry.lang === "zh") !== CJK.test(t) &&
      !/^(top-[kp]|E\d|id)\b|^token$/.test(t));
    if (!labels.length) problems.push("no labels found in the panel");
    if (wrongLanguage.length) problems.push(`labels not in ${entry.lang}: ${JSON.stringify(wrongLanguage.slice(0, 5))}`);
    await typingChangesPicture(page, problems);
  } catch (err) {
    problems.push(`driver error: ${err.message}`);
  } finally {
    await page?.close();
  }
  return result;
}

async function fullCheck(context, entry) {
  const problems = [], timings = {};
  const result = { page: entry.page, problems, timings, depth: "full" };
  const linked = entry.page === spec.link_page;
  const state = { text: MARKUP, temperature: 1.3 };
  const url = new URL(entry.page, spec.base_url).href + (linked ? "#live=" + encodeURIComponent(JSON.stringify(state)) : "");
  let page;
  try {
    page = await open(context, url, problems);
    if (!(await start(page, entry, problems, timings, !linked))) return result;
    if (linked) {
      result.link = "#live=" + JSON.stringify(state);
      if ((await page.inputValue(".live-text")) !== MARKUP) problems.push("the link's text is not in the box");
      const t = await page.textContent(".live-control output");
      if (t !== "1.3") problems.push(`the link's temperature is not set: ${t}`);
      if (await imgsInPanel(page)) problems.push("linked markup became an element");
    }
    if (entry.kind === "poem") {
      const w = await renders(page);
      await page.click(".live-write");
      await waitRender(page, w, "writing", problems, 90000);
      // sampling is unseeded: the model may end the poem (EOS) before max new tokens
      const { written, stop, shown, max } = await page.evaluate(() => {
        const { written, stop, asked } = document.querySelector(".live-panel").dataset;
        return { written: Number(written), stop, max: Number(asked),
          shown: document.querySelectorAll(".live-new-token").length };
      });
      if (!(written >= 1 && shown === written)) problems.push(`write showed ${shown} of ${written} tokens`);
      if (stop !== "eos" && written !== max) problems.push(`write stopped after ${written} of ${max} tokens without EOS`);
      timings.poem = await page.textContent(".live-speed");
    } else {
      await typingChangesPicture(page, problems);
      if (entry.kind === "next-token") {
        const t = await renders(page);
        await page.evaluate(() => { const s = document.querySelector(".live-control input"); s.value = "0.3"; s.dispatchEvent(new Event("input", { bubbles: true })); });
        await waitRender(page, t, "moving temperature", problems);
        const g = await renders(page);
        await page.click(".live-greedy");
        await waitRender(page, g, "greedy", problems);
      }
    }
    // bad inputs; the long one (a 512-token forward) on one page only
    const bad = [["", "empty"], ["月🌙龘", "rare"], ...(entry.page === spec.long_page ? [["月".repeat(2100), "long"]] : [])];
    for (const [text, key] of bad) {
      const b = await typeLine(page, text);
      await page.waitForFunction((k) => document.querySelector(`.live-note-${k}`), key, { timeout: 30000, polling: 50 })
        .catch(() => problems.push(`no message for the ${key} input`));
      if (key !== "empty" && entry.kind !== "poem") await waitRender(page, b, `the ${key} input`, problems, 60000);
    }
    // markup typed stays text
    const b = await typeLine(page, MARKUP);
    if (entry.kind !== "poem") await waitRender(page, b, "markup", problems);
    if (await imgsInPanel(page)) problems.push("typed markup became an element");
    if ((await page.inputValue(".live-text")) !== MARKUP) problems.push("the box changed the typed markup");
    if (entry.page === spec.numeric_page) result.numeric = await numericChecks(page, problems);
  } catch (err) {
    problems.push(`driver error: ${err.message}`);
  } finally {
    await page?.close();
  }
  return result;
}

// Everything against Python in one evaluation: the page's own tokenizer and models (loaded once).
async function numericChecks(page, problems) {
  const got = await page.evaluate(async (ref) => {
    const live = window.minimindLive;
    const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
    const ids = await live.encode(ref.lines);
    const wrongLines = ref.lines.map((line, i) => [line, ids[i], ref.ids[i]]).filter(([, a, b]) => !same(a, b));
    const prompts = [];
    for (const p of ref.prompts) {
      const logits = await live.logits(p.ids, "poetry-dense");
      const last = logits.slice(logits.length - p.logits_last.length);
      const t0 = performance.now();
      await live.logits(p.ids, "poetry-dense");
      const forwardMs = performance.now() - t0;
      const t1 = performance.now();
      const greedy = await live.greedy(p.ids, p.greedy.length, "poetry-dense");
      const genMs = performance.now() - t1;
      prompts.push({ n: p.ids.length, maxLogit: Math.max(...p.logits_last.map((v, i) => Math.abs(v - last[i]))),
        greedy, greedyOk: same(greedy, p.greedy), forwardMs, tokensPerS: (greedy.length / genMs) * 1000 });
    }
    const attention = [];
    for (const a of ref.attention) {
      const out = (await live.outputs(a.ids, a.model)).attentions;
      let max = 0;
      a.data.forEach((v, i) => { max = Math.max(max, Math.abs(v - out.data[i])); });
      attention.push({ n: a.ids.length, dims: out.dims, dimsOk: same(out.dims, a.dims), max });
    }
    const router = [];
    for (const r of ref.router) {
      const out = (await live.outputs(r.ids, r.model)).router_choice;
      const differ = r.choice.filter((v, i) => v !== out.data[i]).length;
      router.push({ n: r.ids.length, dimsOk: same(out.dims, r.dims), differ, total: r.choice.length });
    }
    return { wrongLines: wrongLines.slice(0, 3), nWrong: wrongLines.length, prompts, attention, router };
  }, spec.reference);
  const ref = spec.reference;
  if (got.nWrong) problems.push(`token ids differ from Python on ${got.nWrong} of ${ref.lines.length} lines, e.g. ${JSON.stringify(got.wrongLines)}`);
  const maxLogit = Math.max(...got.prompts.map((p) => p.maxLogit));
  if (!(maxLogit <= 1e-4)) problems.push(`logits differ from Python by ${maxLogit}`);
  got.prompts.filter((p) => !p.greedyOk).forEach((p) => problems.push(`greedy continuation of a ${p.n}-token prompt differs: ${JSON.stringify(p.greedy)}`));
  const maxAttention = Math.max(...got.attention.map((a) => a.max));
  got.attention.filter((a) => !a.dimsOk).forEach((a) => problems.push(`attention of a ${a.n}-token line has shape ${a.dims}`));
  if (!(maxAttention <= 1e-5)) problems.push(`attention rows differ from Python by ${maxAttention}`);
  got.router.filter((r) => !r.dimsOk || r.differ).forEach((r) => problems.push(`router choices of a ${r.n}-token line: ${r.differ} of ${r.total} differ from Python`));
  return { lines: ref.lines.length, max_logit_diff: maxLogit, max_attention_diff: maxAttention,
    attention_prompts: got.attention.length, router_prompts: got.router.length,
    router_choices_compared: got.router.reduce((s, r) => s + r.total, 0),
    forward_ms: got.prompts.map((p) => [p.n, p.forwardMs]), tokens_per_s: got.prompts.map((p) => p.tokensPerS) };
}

async function checkFile(context, entry) {
  const problems = [];
  const page = await context.newPage();
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  try {
    await page.goto("file://" + path.join(spec.file_root, entry.page), { waitUntil: "load", timeout: 60000 });
    const status = await page.textContent(".live-status");
    if (!status.includes("python -m http.server -d _build/html")) problems.push(`no file:// message: ${status}`);
    if (!(await page.$(".live-panel.live-off"))) problems.push("the panel is not marked off");
    await page.waitForFunction(() => document.querySelectorAll(".widget-subarea > *").length > 0, null, { timeout: 30000 })
      .catch(() => problems.push("the static widgets did not render from file://"));
  } catch (err) {
    problems.push(`driver error: ${err.message}`);
  } finally {
    await page.close();
  }
  return { page: `file://${entry.page}`, problems };
}

const profile = mkdtempSync(path.join(tmpdir(), "live-chromium-"));
const report = { pages: [] };
const began = Date.now();
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: spec.chromium || "/usr/bin/chromium", headless: true, viewport: { width: 1280, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-extensions",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-renderer-backgrounding", "--disable-background-timer-throttling"],
  });
  await context.route((url) => !isLocal(url.href), (route) => route.abort("blockedbyclient"));
  const full = spec.full_lang || "en";
  for (const entry of spec.pages) {
    const t0 = Date.now();
    const result = await (entry.lang === full ? fullCheck : lightCheck)(context, entry);
    result.seconds = (Date.now() - t0) / 1000;
    report.pages.push(result);
  }
  report.pages.push(await checkFile(context, spec.pages.find((p) => p.kind === "next-token")));
} catch (err) {
  report.error = err.message;
} finally {
  await context?.close();
  report.seconds = (Date.now() - began) / 1000;
  writeFileSync(spec.report_path, JSON.stringify(report, null, 1));
}
