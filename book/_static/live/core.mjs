// Pure functions of the live panels (no DOM, no runtime): the sampling pipeline of minimind/sampling.py,
// the checks on the reader's text, and the state kept in the page's URL fragment. Tested in Node by
// book/_static/live/tests/core.test.mjs and against Python by tests/test_browser.py.

export const DEFAULTS = { temperature: 1.0, topK: 0, topP: 1.0, repetitionPenalty: 1.0 };

export function softmax(logits) {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  const out = new Float64Array(logits.length);
  if (max === -Infinity) return out;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) { out[i] = Math.exp(logits[i] - max); sum += out[i]; }
  for (let i = 0; i < out.length; i++) out[i] /= sum;
  return out;
}

export function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

// minimind.sampling.apply_repetition_penalty: seen tokens' positive logits / penalty, negative * penalty.
export function applyRepetitionPenalty(logits, seenIds, penalty) {
  const out = Float64Array.from(logits);
  if (penalty === 1.0) return out;
  for (const id of new Set(seenIds)) out[id] = logits[id] < 0 ? logits[id] * penalty : logits[id] / penalty;
  return out;
}

// minimind.sampling.top_k_filter: keep the k largest (ties with the k-th kept); 0 keeps all.
export function topKFilter(logits, k) {
  if (!k || k >= logits.length) return logits;
  const kth = Array.from(logits).sort((a, b) => b - a)[k - 1];
  return logits.map((v) => (v < kth ? -Infinity : v));
}

// minimind.sampling.top_p_filter: sort ascending, drop the worst tokens whose cumulative probability is
// at most 1 - top_p; the best token always stays.
export function topPFilter(logits, p) {
  if (p >= 1.0) return logits;
  const order = Array.from(logits.keys()).sort((a, b) => logits[a] - logits[b] || a - b);
  const sorted = Float64Array.from(order, (i) => logits[i]);
  const probs = softmax(sorted);
  const out = Float64Array.from(logits);
  let cumulative = 0;
  for (let j = 0; j < order.length - 1; j++) {
    cumulative += probs[j];
    if (cumulative <= 1 - p) out[order[j]] = -Infinity;
  }
  return out;
}

export function checkSettings({ temperature, topK, topP, repetitionPenalty }) {
  if (!(temperature > 0)) return "temperature";
  if (!(topK >= 0) || !Number.isInteger(topK)) return "topK";
  if (!(topP > 0 && topP <= 1)) return "topP";
  if (!(repetitionPenalty > 0)) return "repetitionPenalty";
  return null;
}

// minimind.sampling.next_token_distribution: penalty, temperature, top-k, top-p, softmax.
// Returns the probabilities before any filter (at T = 1), after the pipeline, and which tokens are kept.
export function nextTokenDistribution(logits, seenIds, settings) {
  const s = { ...DEFAULTS, ...settings };
  const before = softmax(Float64Array.from(logits));
  let z = applyRepetitionPenalty(logits, seenIds, s.repetitionPenalty).map((v) => v / s.temperature);
  z = topPFilter(topKFilter(z, s.topK), s.topP);
  const after = softmax(z);
  const kept = Array.from(z, (v) => v !== -Infinity);
  return { before, after, kept, logits: z };
}

// A draw from probabilities with a uniform number u in [0, 1).
export function sampleIndex(probs, u) {
  let cumulative = 0;
  for (let i = 0; i < probs.length; i++) {
    cumulative += probs[i];
    if (u < cumulative && probs[i] > 0) return i;
  }
  return argmax(probs);
}

// The top n entries of values, best first: [{id, value}].
export function topEntries(values, n) {
  return Array.from(values.keys()).sort((a, b) => values[b] - values[a] || a - b).slice(0, n)
    .map((id) => ({ id, value: values[id] }));
}

// What the panel must tell the reader about a text before running the model. encodeOne(char) -> ids.
export function inspectInput(text, ids, context, encodeOne) {
  const notes = [];
  if (!text.trim()) return { ids: [], notes: [{ key: "empty" }], refuse: true };
  const rare = [];
  for (const ch of new Set(Array.from(text))) {
    if (ch.codePointAt(0) > 127 && encodeOne(ch).length > 1) rare.push(ch);
  }
  if (rare.length) notes.push({ key: "rare", chars: rare.slice(0, 12).join(" ") });
  let kept = ids;
  if (ids.length > context) {
    notes.push({ key: "long", n: ids.length, context });
    kept = ids.slice(ids.length - context);
  }
  return { ids: kept, notes, refuse: false };
}

// The panel's state in the URL fragment: #live=<encoded JSON>. Only known keys of the right type survive.
const STATE_TYPES = { text: "string", temperature: "number", topK: "number", topP: "number",
  repetitionPenalty: "number", layer: "number", head: "number", maxNew: "number" };

export function encodeState(state) {
  const clean = {};
  for (const [k, type] of Object.entries(STATE_TYPES)) if (typeof state[k] === type) clean[k] = state[k];
  return "#live=" + encodeURIComponent(JSON.stringify(clean));
}

export function decodeState(hash) {
  if (!hash || !hash.startsWith("#live=")) return {};
  let parsed;
  try { parsed = JSON.parse(decodeURIComponent(hash.slice(6))); } catch { return {}; }
  const state = {};
  if (!parsed || typeof parsed !== "object") return state;
  for (const [k, type] of Object.entries(STATE_TYPES)) {
    if (typeof parsed[k] === type && (type !== "number" || Number.isFinite(parsed[k]))) state[k] = parsed[k];
  }
  if (typeof state.text === "string") state.text = state.text.slice(0, 20000);
  return state;
}
