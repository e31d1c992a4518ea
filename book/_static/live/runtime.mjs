// The model in the page: onnxruntime-web (wasm, one thread) runs the graphs that
// minimind/lab/browser_export.py exported from the shipped checkpoints; @huggingface/tokenizers cuts the
// text with the shipped tokenizer.json. Everything is fetched from the book itself, once, on first use.

let runtime = null;
const sessions = new Map();

async function fetchBytes(url, onProgress) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const total = Number(response.headers.get("Content-Length")) || 0;
  if (!response.body || !total) return new Uint8Array(await response.arrayBuffer());
  const bytes = new Uint8Array(total);
  const reader = response.body.getReader();
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes.set(value, received);
    received += value.length;
    onProgress?.(received, total);
  }
  return bytes;
}

async function fetchJson(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

// staticRoot: the English build's _static/ as seen from this page. onProgress(fraction, what).
export function loadRuntime(staticRoot, onProgress) {
  if (runtime) return runtime;
  runtime = (async () => {
    const root = new URL(staticRoot, location.href).href;
    const ortDir = root + "offline/onnxruntime-web/";
    const [ort, { Tokenizer }, tokenizerJson, tokenizerConfig, models] = await Promise.all([
      import(ortDir + "ort.wasm.min.mjs"),
      import(root + "offline/tokenizers/tokenizers.min.mjs"),
      fetchJson(root + "live/models/tokenizer.json"),
      fetchJson(root + "live/models/tokenizer_config.json"),
      fetchJson(root + "live/models/models.json"),
    ]);
    const wasm = await fetchBytes(ortDir + "ort-wasm-simd-threaded.wasm",
      (got, total) => onProgress?.(got / total, "runtime"));
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.wasmBinary = wasm;
    ort.env.wasm.wasmPaths = { mjs: ortDir + "ort-wasm-simd-threaded.mjs" };
    const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);
    return { ort, tokenizer, models, modelsUrl: root + "live/models/" };
  })();
  runtime.catch(() => { runtime = null; });
  return runtime;
}

export async function loadModel(rt, name, onProgress) {
  if (!sessions.has(name)) {
    const promise = (async () => {
      const info = rt.models[name];
      if (!info) throw new Error(`no model ${name} in models.json`);
      const bytes = await fetchBytes(rt.modelsUrl + info.file, (got, total) => onProgress?.(got / total, name));
      const session = await rt.ort.InferenceSession.create(bytes, { executionProviders: ["wasm"] });
      return { session, info, name };
    })();
    promise.catch(() => sessions.delete(name));
    sessions.set(name, promise);
  }
  return sessions.get(name);
}

export function encode(rt, text) {
  return Array.from(rt.tokenizer.encode(text, { add_special_tokens: false }).ids);
}

export function decode(rt, ids) {
  return rt.tokenizer.decode(ids, { skip_special_tokens: false });
}

function tensorOut(t) {
  return { data: t.data, dims: t.dims.map(Number) };
}

// One forward: ids (numbers) after the cached positions in `past` (null for a fresh line).
export async function forward(rt, model, ids, past = null) {
  const { ort } = rt;
  const { info, session } = model;
  const feeds = { input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]) };
  info.past.forEach((name, i) => {
    feeds[name] = past ? past[i] : new ort.Tensor("float32", new Float32Array(0), [1, 0, info.kv_heads, info.head_dim]);
  });
  const out = await session.run(feeds);
  const result = {};
  for (const name of info.outputs) if (!name.startsWith("present_")) result[name] = tensorOut(out[name]);
  result.past = info.outputs.filter((n) => n.startsWith("present_")).map((n) => out[n]);
  return result;
}

// The next-token logits of the last position as a Float32Array [vocab].
export function lastLogits(result) {
  const [, seq, vocab] = result.logits.dims;
  return result.logits.data.subarray((seq - 1) * vocab, seq * vocab);
}

// Generation with the KV-cache: choose(logits, idsSoFar) -> next id; yields each new id as it comes.
export async function* generate(rt, model, promptIds, maxNew, choose) {
  let result = await forward(rt, model, promptIds);
  const ids = [...promptIds];
  for (let step = 0; step < maxNew && ids.length < model.info.context; step++) {
    const next = choose(lastLogits(result), ids);
    ids.push(next);
    yield next;
    if (next === model.info.eos) return;
    result = await forward(rt, model, [next], result.past);
  }
}
