// The live panels (book/_ext/live_panels.py) in headless Chromium: node check_live.mjs SPEC.json
// SPEC: {base_url, file_root, chromium, pages: [{page, kind, lang}], reference: {lines, ids, prompts:
// [{ids, logits_last, greedy}]}, numeric_page, report_path}. Per page: the panel starts on a click (progress,
// then a picture), typing changes the picture, bad inputs give their message, markup typed or linked stays
// text, zero console errors, zero requests outside the book. On numeric_page: the page's token ids, logits
// and greedy continuation against the Python references. Then the file:// fallback.
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const isLocal = (url) => /^(http:\/\/127\.0\.0\.1[:/]|file:|data:|blob:|about:)/.test(url);
const MARKUP = "<img src=x onerror=alert(1)></script>";
const IGNORED_CONSOLE = [/strict mode: use allowUnionTypes/];

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
  await page.waitForFunction((n) => Number(document.querySelector(".live-panel").dataset.renders || 0) > n, before, { timeout })
    .catch(() => problems.push(`no new picture after ${what}`));
}

const resultText = (page) => page.evaluate(() => document.querySelector(".live-result").textContent);
const notes = (page) => page.evaluate(() => Array.from(document.querySelectorAll(".live-note"), (n) => n.className + ": " + n.textContent));
const imgsInPanel = (page) => page.evaluate(() => document.querySelectorAll(".live-panel img").length);

async function checkPage(context, entry) {
  const problems = [];
  const page = await context.newPage();
  watch(page, problems);
  const result = { page: entry.page, problems, timings: {} };
  try {
    await page.goto(new URL(entry.page, spec.base_url).href, { waitUntil: "load", timeout: 60000 });
    const start = Date.now();
    await page.click(".live-panel .live-start");
    await page.waitForFunction(() => document.querySelector(".live-progress"), null, { timeout: 10000 })
      .catch(() => problems.push("no progress indicator"));
    await page.waitForFunction(() => document.querySelector(".live-panel.live-on, .live-panel.live-error"), null, { timeout: 60000 });
    const status = await page.textContent(".live-status");
    if (!(await page.$(".live-panel.live-on"))) { problems.push(`the panel did not start: ${status}`); return result; }
    if (entry.kind !== "poem") await waitRender(page, 0, "start", problems);
    result.timings.first_picture_ms = Date.now() - start;
    if (entry.lang === "zh" && !/[\u4e00-\u9fff]/.test(status)) problems.push(`status not in Chinese: ${status}`);

    if (entry.kind === "poem") {
      await page.click(".live-write");
      await page.waitForFunction(() => document.querySelectorAll(".live-new-token").length >= 8, null, { timeout: 30000 })
        .catch(() => problems.push("no tokens arrived from write"));
      await waitRender(page, 0, "writing", problems, 60000);
      const speed = await page.textContent(".live-speed");
      result.timings.poem = speed;
    } else {
      const first = await resultText(page);
      const before = await typeLine(page, "白日依山尽，黄河入海流。");
      await waitRender(page, before, "typing", problems);
      if ((await resultText(page)) === first) problems.push("typing a new line did not change the picture");
      if (entry.kind === "next-token") {
        const t = await renders(page);
        await page.fill(".live-control input >> nth=0", "0.3").catch(() => {});
        await page.evaluate(() => { const s = document.querySelector(".live-control input"); s.value = "0.3"; s.dispatchEvent(new Event("input", { bubbles: true })); });
        await waitRender(page, t, "moving temperature", problems);
        const g = await renders(page);
        await page.click(".live-greedy");
        await waitRender(page, g, "greedy", problems);
      }
    }
    // bad inputs
    // the long input (a 512-token forward) on one page only: it is the slowest step on a busy machine
    const bad = [["", "empty"], ["月🌙龘", "rare"], ...(entry.page === spec.numeric_page ? [["月".repeat(2100), "long"]] : [])];
    for (const [text, key] of bad) {
      const b = await typeLine(page, text);
      await page.waitForFunction((k) => document.querySelector(`.live-note-${k}`), key, { timeout: 30000 })
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
    await page.close();
  }
  return result;
}

async function numericChecks(page, problems) {
  const ref = spec.reference;
  const ids = await page.evaluate((lines) => window.minimindLive.encode(lines), ref.lines);
  const wrong = ref.lines.filter((_, i) => JSON.stringify(ids[i]) !== JSON.stringify(ref.ids[i]));
  if (wrong.length) problems.push(`token ids differ from Python on ${wrong.length} of ${ref.lines.length} lines, e.g. ${JSON.stringify(wrong.slice(0, 3))}`);
  let maxLogit = 0;
  for (const prompt of ref.prompts) {
    const got = await page.evaluate(async ({ ids, n }) => {
      const logits = await window.minimindLive.logits(ids);
      const t0 = performance.now();
      await window.minimindLive.logits(ids);
      const forwardMs = performance.now() - t0;
      const t1 = performance.now();
      const greedy = await window.minimindLive.greedy(ids, n);
      return { last: logits.slice(logits.length - 6400), greedy, forwardMs, genMs: performance.now() - t1 };
    }, { ids: prompt.ids, n: prompt.greedy.length });
    prompt.logits_last.forEach((v, i) => { maxLogit = Math.max(maxLogit, Math.abs(v - got.last[i])); });
    if (JSON.stringify(got.greedy) !== JSON.stringify(prompt.greedy)) problems.push(`greedy differs: ${JSON.stringify(got.greedy)} vs ${JSON.stringify(prompt.greedy)}`);
    prompt.forward_ms = got.forwardMs;
    prompt.tokens_per_s = (got.greedy.length / got.genMs) * 1000;
  }
  if (!(maxLogit <= 1e-4)) problems.push(`logits differ from Python by ${maxLogit}`);
  return { lines: ref.lines.length, max_logit_diff: maxLogit,
    forward_ms: ref.prompts.map((p) => [p.ids.length, p.forward_ms]), tokens_per_s: ref.prompts.map((p) => p.tokens_per_s) };
}

async function checkLink(context, entry) {
  const problems = [];
  const page = await context.newPage();
  watch(page, problems);
  const state = { text: MARKUP, temperature: 1.3 };
  const url = new URL(entry.page, spec.base_url).href + "#live=" + encodeURIComponent(JSON.stringify(state));
  try {
    await page.goto(url, { waitUntil: "load", timeout: 60000 });
    await page.waitForFunction(() => document.querySelector(".live-panel.live-on"), null, { timeout: 60000 });
    await waitRender(page, 0, "opening the link", problems);
    if ((await page.inputValue(".live-text")) !== MARKUP) problems.push("the link's text is not in the box");
    const t = await page.textContent(".live-control output");
    if (t !== "1.3") problems.push(`the link's temperature is not set: ${t}`);
    if (await imgsInPanel(page)) problems.push("linked markup became an element");
  } catch (err) {
    problems.push(`driver error: ${err.message}`);
  } finally {
    await page.close();
  }
  return { page: `${entry.page}#live=…`, problems };
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
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: spec.chromium || "/usr/bin/chromium", headless: true, viewport: { width: 1280, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  await context.route((url) => !isLocal(url.href), (route) => route.abort("blockedbyclient"));
  for (const entry of spec.pages) report.pages.push(await checkPage(context, entry));
  report.pages.push(await checkLink(context, spec.pages.find((p) => p.kind === "next-token")));
  report.pages.push(await checkFile(context, spec.pages.find((p) => p.kind === "next-token")));
} catch (err) {
  report.error = err.message;
} finally {
  await context?.close();
  writeFileSync(spec.report_path, JSON.stringify(report, null, 1));
}
