// The browser half of bench/bench_live.py: node bench/live_bench.mjs SPEC.json (playwright-core from
// tests/browser/node_modules, Debian's chromium, headless). SPEC: {base_url, chromium, pages: [{page, kind,
// lang}], timed_page, ids32, prompt, new_tokens, repeats, report_path}.
// 1. Asset bytes: each live page in turn, its panel started; the live assets it requests (runtime, tokenizer,
//    models, the panel's modules), by URL; sizes come from the files (bench_live.py).
// 2. First interaction -> first live picture on timed_page: in a fresh profile (nothing cached), then again
//    with the browser's cache warm (a second visit).
// 3. In that page, with the model loaded: a forward over ids32 (best of `repeats`), and greedy generation of
//    new_tokens tokens after `prompt` with the KV-cache (best of `repeats`), as tokens per second.
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "../tests/browser/node_modules/playwright-core/index.mjs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const LIVE_ASSET = /\/_static\/(live\/|offline\/onnxruntime-web\/|offline\/tokenizers\/)/;
const ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-extensions",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

async function browser() {
  const profile = mkdtempSync(path.join(tmpdir(), "live-bench-"));
  return chromium.launchPersistentContext(profile, { executablePath: spec.chromium, headless: true,
    viewport: { width: 1280, height: 900 }, args: ARGS });
}

// Open a page, click its panel's start button, wait for the first picture: ms from the click, asset URLs.
async function firstPicture(context, entry) {
  const page = await context.newPage();
  const assets = new Set();
  page.on("request", (req) => { if (LIVE_ASSET.test(req.url())) assets.add(new URL(req.url()).pathname); });
  await page.goto(new URL(entry.page, spec.base_url).href, { waitUntil: "load", timeout: 120000 });
  const t0 = Date.now();
  await page.click(".live-panel .live-start");
  await page.waitForFunction(() => Number(document.querySelector(".live-panel")?.dataset.renders || 0) > 0
    || document.querySelector(".live-panel.live-error"), null, { timeout: 120000, polling: 20 });
  const ms = Date.now() - t0;
  if (await page.$(".live-panel.live-error")) throw new Error(`${entry.page}: ${await page.textContent(".live-status")}`);
  return { page, ms, assets: [...assets] };
}

const report = { pages: [] };
let context;
try {
  context = await browser();  // cold: a fresh profile
  const timed = spec.pages.find((p) => p.page === spec.timed_page);
  const cold = await firstPicture(context, timed);
  await cold.page.close();
  const warm = await firstPicture(context, timed);
  report.first_picture_ms = { cold: cold.ms, warm: warm.ms };
  report.pages.push({ page: timed.page, assets: cold.assets });
  report.timings = await warm.page.evaluate(async ({ ids32, prompt, newTokens, repeats }) => {
    const live = window.minimindLive;
    await live.logits(ids32);  // warm-up: the first run allocates
    const forward = [];
    for (let r = 0; r < repeats; r++) {
      const t0 = performance.now();
      await live.logits(ids32);
      forward.push(performance.now() - t0);
    }
    const generate = [];
    let tokens = [];
    for (let r = 0; r < repeats; r++) {
      const t0 = performance.now();
      tokens = await live.greedy(prompt, newTokens);
      generate.push(performance.now() - t0);
    }
    return { forward_ms: Math.min(...forward), generate_ms: Math.min(...generate), generated: tokens.length, tokens };
  }, { ids32: spec.ids32, prompt: spec.prompt, newTokens: spec.new_tokens, repeats: spec.repeats });
  await warm.page.close();
  for (const entry of spec.pages) {
    if (entry.page === timed.page) continue;
    const { page, assets } = await firstPicture(context, entry);
    report.pages.push({ page: entry.page, assets });
    await page.close();
  }
} catch (err) {
  report.error = err.message;
} finally {
  await context?.close();
  writeFileSync(spec.report_path, JSON.stringify(report, null, 1));
}
