// node --test book/_static/live/tests/  (the pure functions of core.mjs; the model itself is checked
// against Python by tests/test_browser.py)
import assert from "node:assert/strict";
import { test } from "node:test";
import { applyRepetitionPenalty, decodeState, encodeState, inspectInput, nextTokenDistribution, sampleIndex,
  softmax, topKFilter, topPFilter } from "../core.mjs";

test("softmax sums to one and keeps order", () => {
  const p = softmax([1, 2, 3]);
  assert.ok(Math.abs(p.reduce((a, b) => a + b) - 1) < 1e-12);
  assert.ok(p[2] > p[1] && p[1] > p[0]);
});

test("repetition penalty divides positive and multiplies negative logits of seen tokens", () => {
  assert.deepEqual(Array.from(applyRepetitionPenalty([2, -2, 1], [0, 1, 1], 2)), [1, -4, 1]);
});

test("top-k keeps ties with the k-th; top-p always keeps the best token", () => {
  assert.deepEqual(Array.from(topKFilter(Float64Array.from([3, 1, 3, 2]), 1)), [3, -Infinity, 3, -Infinity]);
  const kept = topPFilter(Float64Array.from([0, 10, 0]), 0.01);
  assert.deepEqual(Array.from(kept, Number.isFinite), [false, true, false]);
  const all = topPFilter(Float64Array.from([1, 1, 1, 1]), 0.6); // 0.25 each: only the worst (0.25 <= 0.4) goes
  assert.equal(Array.from(all, Number.isFinite).filter(Boolean).length, 3);
});

test("the pipeline: temperature sharpens, filters remove", () => {
  const d = nextTokenDistribution([1, 2, 3, 4], [], { temperature: 0.5, topK: 2 });
  assert.deepEqual(d.kept, [false, false, true, true]);
  assert.ok(d.after[3] > 0.8 && d.after[0] === 0);
  assert.equal(sampleIndex(d.after, 0), 2);
  assert.equal(sampleIndex(d.after, 0.999), 3);
});

test("inputs: empty refused, long truncated to the last tokens, rare characters named", () => {
  assert.equal(inspectInput("  ", [], 8, () => [1]).refuse, true);
  const long = inspectInput("abc", [1, 2, 3, 4, 5], 3, () => [1]);
  assert.deepEqual(long.ids, [3, 4, 5]);
  assert.equal(long.notes[0].key, "long");
  const rare = inspectInput("月🌙", [5, 6, 7], 8, (ch) => (ch === "🌙" ? [1, 2, 3, 4] : [9]));
  assert.deepEqual(rare.notes, [{ key: "rare", chars: "🌙" }]);
});

test("the fragment keeps text and settings, drops unknown keys and wrong types", () => {
  const text = "<img src=x onerror=alert(1)></script>";
  const state = decodeState(encodeState({ text, temperature: 1.3, evil: "x", topK: "5" }));
  assert.deepEqual(state, { text, temperature: 1.3 });
  assert.deepEqual(decodeState("#live=%7Bnot json"), {});
  assert.deepEqual(decodeState("#other"), {});
});
