// The live panels (placed by book/_ext/live_panels.py): a text box with the chapter's example line, the
// chapter's controls, and its picture recomputed by the model in the page. The reader's text is only ever
// put into the page as text (textContent, value), never as HTML.
import { argmax, decodeState, encodeState, inspectInput, nextTokenDistribution, sampleIndex, topEntries } from "./core.mjs";
import { decode, encode, forward, generate, lastLogits, loadModel, loadRuntime } from "./runtime.mjs";

const STRINGS = {
  en: {
    text: "Your line", examples: "Examples:", loading: "Loading the live model…", runtime: "runtime",
    ready: (model) => `Live: computed in your browser by ${model}.`, empty: "Type a line first: the box is empty.",
    rare: (m) => `Not whole tokens in the poetry vocabulary (each is cut into byte pieces, the model saw them rarely or never): ${m.chars}`,
    long: (m) => `Your text is ${m.n} tokens; the live panel reads at most ${m.context} at once: only the last ${m.context} are used.`,
    shown: (n) => `The picture shows the first ${n} tokens.`,
    failed: "The live model failed:", temperature: "temperature", topK: "top-k (0 = off)", topP: "top-p",
    repetitionPenalty: "repetition penalty", sample: "sample", greedy: "greedy", write: "write a poem",
    stop: "stop", maxNew: "new tokens", layer: "layer", head: "head", token: "token", prob: "p",
    before: "model p", after: "p sampled from", kept: "kept", removed: "removed", link: "link to this view",
    nextAfter: (n) => `Next token after your text: ${n} kept`, generated: "Generated:", expert: "expert", stage: "stage",
    shape: "shape", rms: "mean |vector|", embeddings: "embeddings", block: (b) => `after block ${b}`, id: "id",
    layerName: (l) => `layer ${l}`, headName: (l, h) => ` (layer ${l}, head ${h})`,
    lensTitle: "Top guess of the logit lens after each block (rows) at each position (columns)",
    expertsTitle: "Expert chosen for each token (rows: layers); hover for the router's probabilities",
    attnTitle: "Attention probabilities: row = query token, column = key token",
    tokensTitle: "Your line, cut into tokens", stagesTitle: "The residual stream after each stage",
    speed: (n, ms) => `${n} tokens in ${ms} ms`,
  },
  zh: {
    text: "你的诗句", examples: "例句：", loading: "正在加载实时模型……", runtime: "运行时",
    ready: (model) => `实时模式：模型 ${model} 在你的浏览器中运行。`, empty: "请先输入一句：文本框是空的。",
    rare: (m) => `这些字不是诗歌词表中的完整 token（每个被切成字节片段，模型很少或从未见过）：${m.chars}`,
    long: (m) => `你的文本有 ${m.n} 个 token；实时面板一次最多读 ${m.context} 个：只使用最后 ${m.context} 个。`,
    shown: (n) => `图中只显示前 ${n} 个 token。`,
    failed: "实时模型出错：", temperature: "温度", topK: "top-k（0 = 关闭）", topP: "top-p",
    repetitionPenalty: "重复惩罚", sample: "采样", greedy: "贪心", write: "写一首诗",
    stop: "停止", maxNew: "新 token 数", layer: "层", head: "头", token: "token", prob: "概率",
    before: "模型概率", after: "抽样概率", kept: "保留", removed: "移除", link: "本视图的链接",
    nextAfter: (n) => `下一个 token（保留 ${n.toLocaleString("en-US")} 个）：`, generated: "生成：", expert: "专家", stage: "阶段",
    shape: "形状", rms: "向量平均长度", embeddings: "嵌入", block: (b) => `块 ${b} 之后`, id: "编号",
    layerName: (l) => `第 ${l} 层`, headName: (l, h) => `（第 ${l} 层第 ${h} 个头）`,
    lensTitle: "logit lens：每个块之后（行）在每个位置（列）的首选 token",
    expertsTitle: "每个 token 选中的专家（行：层）；悬停可见路由器的概率",
    attnTitle: "注意力概率：行 = 查询 token，列 = 键 token",
    tokensTitle: "你的诗句切成的 token", stagesTitle: "每个阶段之后的残差流",
    speed: (n, ms) => `已处理 ${n} 个 token，用时 ${ms} 毫秒`,
  },
};
const PICTURE_TOKENS = 48; // grids (attention, lens, experts) show at most this many tokens
const PAGE_CONTEXT = 512; // the page runs at most this many tokens at once (all layers' attention fits in memory)

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k in node) node[k] = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

function shade(value, hue = 210) {
  const v = Math.max(0, Math.min(1, value));
  return `hsl(${hue}, 70%, ${Math.round(97 - 55 * v)}%)`;
}

function tokenText(rt, id) {
  const text = decode(rt, [id]);
  return text.replace(/\n/g, "⏎").replace(/\t/g, "⇥").replace(/ /g, "␠") || "∅";
}

function slider(label, min, max, step, value) {
  const input = el("input", { type: "range", min, max, step, value });
  const readout = el("output", { text: String(value) });
  input.addEventListener("input", () => { readout.textContent = input.value; });
  const wrap = el("label", { class: "live-control" }, [el("span", { text: label + " " }), input, readout]);
  return { wrap, input, readout, get value() { return Number(input.value); },
    set(v) { input.value = v; readout.textContent = input.value; } };
}

class Panel {
  constructor(root) {
    this.root = root;
    this.kind = root.dataset.kind;
    this.modelName = root.dataset.model;
    this.s = STRINGS[root.dataset.lang] || STRINGS.en;
    this.status = root.querySelector(".live-status");
    this.state = decodeState(location.hash);
    this.build();
  }

  build() {
    const s = this.s;
    const examples = JSON.parse(this.root.dataset.examples || "[]");
    this.text = el("textarea", { class: "live-text", rows: 2, maxLength: 20000, "aria-label": s.text,
      spellcheck: false });
    this.text.value = this.state.text ?? examples[0] ?? "";
    const exampleButtons = examples.map((line) => {
      const b = el("button", { type: "button", class: "live-example", text: line });
      b.addEventListener("click", () => { this.text.value = line; this.changed(); });
      return b;
    });
    this.progress = el("progress", { class: "live-progress", max: 1, value: 0 });
    this.message = el("div", { class: "live-message", role: "status" });
    this.controls = el("div", { class: "live-controls" });
    this.result = el("div", { class: "live-result" });
    this.linkOut = el("a", { class: "live-link", href: "#", text: s.link });
    this.body = el("div", { class: "live-body" }, [
      el("label", { class: "live-label", text: s.text }), this.text,
      el("div", { class: "live-examples" }, [el("span", { text: s.examples + " " }), ...exampleButtons]),
      this.controls, this.progress, this.message, this.result, this.linkOut]);
    this.root.append(this.body);
    this.addControls();
    let timer = null;
    this.text.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => this.changed(), 150); });
    this.controls.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => this.changed(false), 60); });
  }

  addControls() {
    const s = this.s, st = this.state;
    const add = (...items) => items.forEach((i) => this.controls.append(i.wrap || i));
    if (this.kind === "next-token" || this.kind === "poem") {
      this.temperature = slider(s.temperature, 0.1, 2, 0.05, st.temperature ?? (this.kind === "poem" ? 0.8 : 1));
      this.topK = slider(s.topK, 0, 50, 1, st.topK ?? (this.kind === "poem" ? 20 : 0));
      this.topP = slider(s.topP, 0.05, 1, 0.05, st.topP ?? (this.kind === "poem" ? 0.9 : 1));
      this.penalty = slider(s.repetitionPenalty, 1, 2, 0.05, st.repetitionPenalty ?? 1);
      add(this.temperature, this.topK, this.topP, this.penalty);
    }
    if (this.kind === "next-token") {
      this.sampleButton = el("button", { type: "button", class: "live-sample", text: s.sample });
      this.greedyButton = el("button", { type: "button", class: "live-greedy", text: s.greedy });
      this.sampleButton.addEventListener("click", () => this.extend(true));
      this.greedyButton.addEventListener("click", () => this.extend(false));
      add(this.sampleButton, this.greedyButton);
    }
    if (this.kind === "poem") {
      this.maxNew = slider(s.maxNew, 4, 64, 1, st.maxNew ?? 32);
      this.writeButton = el("button", { type: "button", class: "live-write", text: s.write });
      this.writeButton.addEventListener("click", () => this.write());
      add(this.maxNew, this.writeButton);
    }
    if (this.kind === "attention") {
      this.layer = slider(s.layer, 0, 3, 1, st.layer ?? 0);
      this.head = slider(s.head, 0, 3, 1, st.head ?? 0);
      add(this.layer, this.head);
    }
  }

  settings() {
    return { temperature: this.temperature?.value ?? 1, topK: this.topK?.value ?? 0, topP: this.topP?.value ?? 1,
      repetitionPenalty: this.penalty?.value ?? 1 };
  }

  saveState() {
    const state = { text: this.text.value, ...this.settings() };
    if (this.layer) Object.assign(state, { layer: this.layer.value, head: this.head.value });
    if (this.maxNew) state.maxNew = this.maxNew.value;
    const hash = encodeState(state);
    this.linkOut.href = hash;
    history.replaceState(null, "", hash);
  }

  async start() {
    const s = this.s;
    this.status.textContent = s.loading;
    const progress = (fraction, what) => {
      this.progress.value = fraction;
      this.status.textContent = `${s.loading} ${what === "runtime" ? s.runtime : what} ${Math.round(100 * fraction)}%`;
    };
    try {
      this.rt = await loadRuntime(this.root.dataset.static, progress);
      this.model = await loadModel(this.rt, this.modelName, progress);
      if (this.layer) { this.layer.input.max = this.model.info.layers - 1; this.head.input.max = this.model.info.heads - 1; }
      this.progress.hidden = true;
      this.status.textContent = s.ready(this.modelName);
      this.root.classList.add("live-on");
      await this.changed();
    } catch (err) {
      this.fail(err);
    }
  }

  fail(err) {
    this.status.textContent = `${this.s.failed} ${err && err.message ? err.message : err}`;
    this.root.classList.add("live-error");
  }

  // Tokenise and check the text; show the notes. Returns the ids to run, or null.
  inputIds() {
    const s = this.s;
    const text = this.text.value;
    const all = text.trim() ? encode(this.rt, text) : [];
    const checked = inspectInput(text, all, Math.min(this.model.info.context, PAGE_CONTEXT), (ch) => encode(this.rt, ch));
    this.message.replaceChildren(...checked.notes.map((n) => el("p", { class: `live-note live-note-${n.key}`,
      text: typeof s[n.key] === "function" ? s[n.key](n) : s[n.key] })));
    return checked.refuse ? null : checked.ids;
  }

  async changed(resetOutput = true) {
    if (!this.model) return;
    this.saveState();
    const ids = this.inputIds();
    if (!ids) { this.result.replaceChildren(); return; }
    const ticket = (this.ticket = (this.ticket || 0) + 1);
    try {
      const t0 = performance.now();
      const out = this.kind === "poem" ? null : await forward(this.rt, this.model, ids);
      if (ticket !== this.ticket) return; // a newer change is on its way
      this.lastMs = Math.round(performance.now() - t0);
      if (this.kind === "poem" && !resetOutput) return; // a new setting applies to the next poem
      this.draw(ids, out);
      this.root.dataset.renders = String(Number(this.root.dataset.renders || 0) + 1);
    } catch (err) {
      this.fail(err);
    }
  }

  draw(ids, out) {
    const kinds = { "next-token": this.drawNextToken, poem: this.drawPoem, attention: this.drawAttention,
      experts: this.drawExperts, lens: this.drawLens, tokens: this.drawTokens };
    kinds[this.kind].call(this, ids, out);
  }

  drawNextToken(ids, out) {
    const s = this.s;
    const logits = lastLogits(out);
    const dist = nextTokenDistribution(logits, ids, this.settings());
    this.dist = dist;
    const rows = topEntries(dist.before, 20).map(({ id }) => el("tr", { class: dist.kept[id] ? "live-kept" : "live-removed" }, [
      el("td", { class: "live-token", text: tokenText(this.rt, id) }),
      el("td", { text: dist.before[id].toFixed(3) }),
      el("td", { text: dist.after[id].toFixed(3), style: `background:${shade(dist.after[id])}` }),
      el("td", { text: dist.kept[id] ? s.kept : s.removed }),
    ]));
    const nKept = dist.kept.filter(Boolean).length;
    this.result.replaceChildren(
      el("p", { text: s.nextAfter(nKept) }),
      el("table", { class: "live-table" }, [el("thead", {}, [el("tr", {}, [s.token, s.before, s.after, ""].map((h) => el("th", { text: h })))]),
        el("tbody", {}, rows)]),
      el("p", { class: "live-speed", text: s.speed(ids.length, this.lastMs) }));
  }

  extend(doSample) {
    if (!this.dist) return;
    const id = doSample ? sampleIndex(this.dist.after, Math.random()) : argmax(this.dist.after);
    this.text.value += decode(this.rt, [id]);
    this.changed();
  }

  drawPoem(ids) {
    const tokens = el("span", { class: "live-prompt-tokens" }, this.labels(ids).map((t) => el("span", { class: "live-chip", text: t })));
    this.result.replaceChildren(el("p", { class: "live-generated" }, [el("span", { text: this.s.tokensTitle + ": " }), tokens]));
  }

  async write() {
    const ids = this.inputIds();
    if (!ids || !this.model) return;
    this.saveState();
    const line = el("span", { class: "live-poem" });
    const speed = el("p", { class: "live-speed" });
    this.result.replaceChildren(el("p", { class: "live-generated" }, [el("span", { text: this.s.generated + " " }), line]), speed);
    const settings = this.settings();
    const ticket = (this.ticket = (this.ticket || 0) + 1);
    const t0 = performance.now();
    let n = 0, last = null;
    const choose = (logits, seen) => sampleIndex(nextTokenDistribution(logits, seen, settings).after, Math.random());
    try {
      for await (const id of generate(this.rt, this.model, ids, this.maxNew.value, choose)) {
        if (ticket !== this.ticket) return;
        n += 1;
        last = id;
        line.append(el("span", { class: "live-new-token", text: decode(this.rt, [id]) }));
        speed.textContent = this.s.speed(n, Math.round(performance.now() - t0));
      }
      Object.assign(this.root.dataset, { written: String(n), asked: String(this.maxNew.value) });
      this.root.dataset.stop = last === this.model.info.eos ? "eos" : "length";
      this.root.dataset.renders = String(Number(this.root.dataset.renders || 0) + 1);
    } catch (err) {
      this.fail(err);
    }
  }

  labels(ids) {
    return ids.slice(0, PICTURE_TOKENS).map((id) => tokenText(this.rt, id));
  }

  grid(title, rowLabels, colLabels, cell) {
    const table = el("table", { class: "live-grid" });
    table.append(el("caption", { text: title }));
    table.append(el("tr", {}, [el("th"), ...colLabels.map((c) => el("th", { text: c }))]));
    rowLabels.forEach((r, i) => table.append(el("tr", {}, [el("th", { text: r }), ...colLabels.map((_, j) => cell(i, j))])));
    const notes = [];
    if (colLabels.length < (this.nTokens || 0)) notes.push(el("p", { class: "live-note", text: this.s.shown(colLabels.length) }));
    return [el("div", { class: "live-scroll" }, [table]), ...notes];
  }

  drawAttention(ids, out) {
    const { data, dims } = out.attentions; // [L, H, S, S]
    const [, H, S, T] = dims;
    const layer = Math.min(this.layer.value, dims[0] - 1), head = Math.min(this.head.value, H - 1);
    const labels = this.labels(ids);
    this.nTokens = S;
    const base = (layer * H + head) * S * T;
    this.result.replaceChildren(...this.grid(this.s.attnTitle + this.s.headName(layer, head),
      labels, labels, (i, j) => {
        const p = j <= i ? data[base + i * T + j] : 0;
        return el("td", { class: "live-cell", title: p.toFixed(3), style: `background:${j <= i ? shade(p) : "#f4f4f4"}`,
          text: j <= i ? p.toFixed(2) : "" });
      }), el("p", { class: "live-speed", text: this.s.speed(ids.length, this.lastMs) }));
  }

  drawExperts(ids, out) {
    const { data: probs, dims } = out.router_probs; // [L, S, E]
    const choice = out.router_choice.data; // [L, S, k] int64
    const [L, S, E] = dims, k = out.router_choice.dims[2];
    const labels = this.labels(ids);
    this.nTokens = S;
    const hues = [210, 30, 120, 280, 0, 60, 170, 320];
    this.result.replaceChildren(...this.grid(this.s.expertsTitle, Array.from({ length: L }, (_, l) => this.s.layerName(l)),
      labels, (l, j) => {
        const e = Number(choice[(l * S + j) * k]);
        const p = Array.from({ length: E }, (_, x) => probs[(l * S + j) * E + x]);
        return el("td", { class: "live-cell live-expert", title: p.map((v, x) => `${this.s.expert} ${x}: ${v.toFixed(3)}`).join("\n"),
          style: `background:${shade(0.35 + 0.5 * p[e], hues[e % hues.length])}`, text: `E${e}` });
      }), el("p", { class: "live-speed", text: this.s.speed(ids.length, this.lastMs) }));
  }

  drawLens(ids, out) {
    const { data: lensIds, dims } = out.lens_ids; // [L, S, top]
    const lensProbs = out.lens_probs.data;
    const [L, S, top] = dims;
    const labels = this.labels(ids);
    this.nTokens = S;
    this.result.replaceChildren(...this.grid(this.s.lensTitle, Array.from({ length: L }, (_, l) => this.s.block(l)),
      labels, (l, j) => {
        const at = (l * S + j) * top;
        const p = lensProbs[at];
        return el("td", { class: "live-cell", title: p.toFixed(3), style: `background:${shade(p)}`,
          text: tokenText(this.rt, Number(lensIds[at])) });
      }), el("p", { class: "live-speed", text: this.s.speed(ids.length, this.lastMs) }));
  }

  drawTokens(ids, out) {
    const s = this.s;
    const chips = ids.map((id) => el("span", { class: "live-chip", title: `${s.id} ${id}` },
      [el("span", { class: "live-chip-text", text: tokenText(this.rt, id) }), el("sub", { text: String(id) })]));
    const { data, dims } = out.hidden; // [L + 1, S, hidden]
    const [stages, S, D] = dims;
    const rows = Array.from({ length: stages }, (_, st) => {
      let total = 0;
      for (let i = 0; i < S; i++) {
        let sq = 0;
        for (let d = 0; d < D; d++) sq += data[(st * S + i) * D + d] ** 2;
        total += Math.sqrt(sq);
      }
      return el("tr", {}, [el("td", { text: st === 0 ? s.embeddings : s.block(st - 1) }),
        el("td", { text: `[1, ${S}, ${D}]` }), el("td", { text: (total / S).toFixed(2) })]);
    });
    this.result.replaceChildren(el("p", { text: `${s.tokensTitle} (${ids.length})` }), el("div", { class: "live-chips" }, chips),
      el("table", { class: "live-table" }, [el("caption", { text: s.stagesTitle }),
        el("tr", {}, [s.stage, s.shape, s.rms].map((h) => el("th", { text: h }))), ...rows]),
      el("p", { class: "live-speed", text: s.speed(ids.length, this.lastMs) }));
  }
}

let mounted = null;

export function mountAll() {
  if (!mounted) {
    const panels = Array.from(document.querySelectorAll(".live-panel"), (root) => new Panel(root));
    mounted = Promise.all(panels.map((p) => p.start())).then(() => panels);
    // For the browser test and the curious reader: the page's own tokenizer and model.
    window.minimindLive = {
      panels: mounted,
      async encode(texts) { const [p] = await mounted; return texts.map((t) => encode(p.rt, t)); },
      async logits(ids, name) {
        const [p] = await mounted;
        const model = await loadModel(p.rt, name || p.modelName);
        return Array.from((await forward(p.rt, model, ids)).logits.data);
      },
      async greedy(ids, n, name) {
        const [p] = await mounted;
        const model = await loadModel(p.rt, name || p.modelName);
        const outIds = [];
        for await (const id of generate(p.rt, model, ids, n, (logits) => argmax(logits))) outIds.push(id);
        return outIds;
      },
      async outputs(ids, name) {
        const [p] = await mounted;
        const model = await loadModel(p.rt, name || p.modelName);
        const out = await forward(p.rt, model, ids);
        const plain = {};
        for (const [k, v] of Object.entries(out)) if (k !== "past") plain[k] = { dims: v.dims, data: Array.from(v.data, Number) };
        return plain;
      },
    };
  }
  return mounted;
}
