"""What chapter 10 (sampling and generation) measures and draws: each sampling stage on a real next-token
distribution, its kept set and entropy, a chi-square test of the draws, and quality/diversity measures of samples.

Pure functions return numbers or tensors; the figure functions only draw them. The sampling itself is always the
package's (`minimind.sampling`); nothing here re-implements a stage.
"""
import csv
import functools
import math
from collections import Counter

import torch

from ..sampling import apply_repetition_penalty, apply_temperature, top_k_filter, top_p_filter
from ..training.data import poem_lines
from .viz import edition_text

GLOSSES = {  # short English glosses of the tokens the chapter draws (pinyin is given in the prose)
    "金": "gold", "珠": "pearl", "朱": "vermilion", "琼": "fine jade", "银": "silver", "红": "red", "花": "flower",
    "青": "blue-green", "香": "fragrant", "罗": "silk gauze", "丹": "cinnabar", "龙": "dragon", "玉": "jade",
    "春": "spring", "小": "small", "水": "water", "不": "not", "人": "person", "山": "mountain", "日": "sun",
    "一": "one", "风": "wind", "云": "cloud", "仙": "immortal", "树": "tree", "万": "ten thousand", "独": "alone",
    "宫": "palace", "殿": "hall", "台": "terrace", "门": "gate", "翠": "kingfisher green", "紫": "purple",
    "白": "white", "碧": "jade green", "锦": "brocade", "彩": "coloured", "凤": "phoenix", "天": "sky",
    "明月": "bright moon", "光": "light", "床": "bed", "前": "before", "，": "comma", "。": "full stop",
    "妾": "I (a woman)", "泪": "tears", "衣": "robe", "宝": "treasure", "铜": "bronze", "画": "painted",
    "绣": "embroidered", "瑶": "precious jade", "黄": "yellow", "绿": "green", "雕": "carved", "华": "splendid",
}
PUNCTUATION = set("，。！？；：、")


def gloss(text: str) -> str:
    """A token's text with its English gloss when one is known: '金' -> '金 (gold)'."""
    return f"{text} ({GLOSSES[text]})" if text in GLOSSES else text


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) along the last axis; -inf logits (filtered tokens) count as 0 · log 0 = 0."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return 0.0 - (logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)  # 0.0 - x: one kept token gives 0.0, not -0.0


def kept_count(logits: torch.Tensor) -> torch.Tensor:
    """How many tokens a filter left (finite logits) per row."""
    return torch.isfinite(logits).sum(-1)


def pipeline_stages(logits, input_ids, repetition_penalty=1.0, temperature=1.0, top_k=0, top_p=1.0):
    """[(stage name, logits [B, V])] after each stage of `generate`'s pipeline, computed with the package."""
    stages = [("model", logits)]
    stages.append((f"repetition penalty {repetition_penalty:g}",
                   apply_repetition_penalty(stages[-1][1], input_ids, repetition_penalty)))
    stages.append((f"temperature {temperature:g}", apply_temperature(stages[-1][1], temperature)))
    stages.append((f"top-k {top_k}", top_k_filter(stages[-1][1], top_k)))
    stages.append((f"top-p {top_p:g}", top_p_filter(stages[-1][1], top_p)))
    return stages


def transformers_stages(logits, input_ids, repetition_penalty=1.0, temperature=1.0, top_k=0, top_p=1.0):
    """The same stages with transformers' own logits processors (the independent implementation compared)."""
    from transformers import (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
                              TopPLogitsWarper)
    processors = [RepetitionPenaltyLogitsProcessor(repetition_penalty), TemperatureLogitsWarper(temperature)]
    processors += [TopKLogitsWarper(top_k) if top_k > 0 else (lambda ids, x: x),
                   TopPLogitsWarper(top_p) if top_p < 1 else (lambda ids, x: x)]
    stages, current = [("model", logits)], logits
    for processor in processors:
        current = processor(input_ids, current.clone())
        stages.append(("", current))
    return stages


def empirical_counts(samples: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """How often each token id appears among `samples` (any shape): [vocab_size] int64."""
    return torch.bincount(samples.flatten(), minlength=vocab_size)


def chi_square_test(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0):
    """Pearson's chi-square test that `counts` [V] were drawn from `probs` [V]: (statistic, degrees of freedom, p).

    Tokens with probability 0 must have count 0 (else p = 0). Bins expected fewer than `min_expected` times are
    pooled into one, as the test's approximation needs. p is the chi-square survival function: scipy's when it
    is importable, else the regularised upper incomplete gamma function from torch.special (the same function).
    """
    counts, probs = counts.double(), probs.double()
    if counts[probs == 0].sum() > 0:
        return float("inf"), 0, 0.0
    n = counts.sum()
    expected = probs * n
    big = expected >= min_expected
    observed_bins = torch.cat([counts[big], counts[(~big) & (probs > 0)].sum().view(1)])
    expected_bins = torch.cat([expected[big], expected[(~big) & (probs > 0)].sum().view(1)])
    if expected_bins[-1] < min_expected:  # the pooled remainder is still too small: fold it into the last bin
        observed_bins = torch.cat([observed_bins[:-2], observed_bins[-2:].sum().view(1)])
        expected_bins = torch.cat([expected_bins[:-2], expected_bins[-2:].sum().view(1)])
    statistic = float(((observed_bins - expected_bins) ** 2 / expected_bins).sum())
    df = len(expected_bins) - 1
    return statistic, df, chi_square_p_value(statistic, df)


def chi_square_p_value(statistic: float, df: int) -> float:
    """P(X >= statistic) for X ~ chi-square(df)."""
    try:
        from scipy.stats import chi2
        return float(chi2.sf(statistic, df))
    except ImportError:
        return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                             torch.tensor(statistic / 2, dtype=torch.float64)))


def poem_characters(text: str) -> list[str]:
    """The characters of a poem without its punctuation and line breaks."""
    return [ch for ch in text if ch not in PUNCTUATION and not ch.isspace()]


def ngrams(text: str, n: int) -> list[str]:
    """Character n-grams inside each line (never across punctuation)."""
    return [line[i:i + n] for line in poem_lines(text) for i in range(len(line) - n + 1)]


def distinct_n(texts, n: int = 2) -> float:
    """Distinct-n: different character n-grams / all n-grams, pooled over `texts` (1 = no n-gram repeats)."""
    grams = [g for text in texts for g in ngrams(text, n)]
    return len(set(grams)) / max(1, len(grams))


def repeated_ngram_share(text: str, n: int = 2) -> float:
    """Share of a text's n-grams that already occurred earlier in the same text (0 = never repeats itself)."""
    grams, seen, repeats = ngrams(text, n), set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / max(1, len(grams))


def repeated_line_share(texts) -> float:
    """Share of lines that repeat an earlier line of the same text, pooled over `texts`."""
    repeats = total = 0
    for text in texts:
        lines = poem_lines(text)
        counts = Counter(lines)
        repeats += sum(c - 1 for c in counts.values())
        total += len(lines)
    return repeats / max(1, total)


def read_grid(path) -> list[dict]:
    """bench/results/sampling_grid.csv as a list of rows with numbers converted."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append({k: (v if k in ("decoding",) else float(v)) for k, v in row.items()})
    return rows


# --- figures ---------------------------------------------------------------------------------------------------

KEPT, REMOVED, OTHER = "#3b75af", "#dddddd", "#e3a33b"  # OTHER: a summed bar

ZH = {  # the Chinese edition's figure strings (issue #23): terms.tsv, ch10's .po
    "probability": "概率", "kept": "保留", "removed (probability 0)": "已移除（概率为 0）",
    "model": "模型", "repetition penalty": "重复惩罚", "temperature": "温度",
    "after: {name}": "{name} 之后", "after: model": "模型输出",
    "kept {kept:,} tokens, entropy {h:.2f} nats": "保留 {kept:,} 个 token，熵 {h:.2f} 奈特",
    "poetry-dense: the next token after {context}":
        "poetry-dense：“{context}”之后的下一个 token",
    "other {rest:,}": "其余 {rest:,} 个",
    "kept {kept:,} of {vocab:,} tokens\nentropy {h:.2f} nats\n"
    "these {n} tokens: {mass:.2f}":
        "保留 {kept:,} / {vocab:,} 个 token\n熵 {h:.2f} 奈特\n这 {n} 个 token 合计：{mass:.2f}",
    "the other {rest:,} tokens, summed": "其余 {rest:,} 个 token 之和",
    # the chapter's frame titles
    "temperature {T}: the model after {tail}": "温度 {T}：模型在“{tail}”之后",
    "top-p {p}, after {tail}": "top-p {p}：模型在“{tail}”之后",
    "top-k = {k}, after {tail}": "top-k = {k}：模型在“{tail}”之后",
    "top-k = {k} (off), after {tail}": "top-k = {k}（关闭）：模型在“{tail}”之后",
}


say = functools.partial(edition_text, ZH)  # say(text, zh, **values)


def _stage_name(name: str, zh=False) -> str:
    """A pipeline stage's name for the edition: 'temperature 0.8' -> '温度 0.8' (top-k and
    top-p keep their names)."""
    words, _, value = name.rpartition(" ")
    if not zh:
        return name
    return f"{ZH[words]} {value}" if words in ZH else ZH.get(name, name)


def stage_bars(ax, probs, labels, removed, title, ymax, note=None, note_x=0.98,
               zh=False):
    """One bar chart: probability of each shown token (its text, `gloss`ed unless
    `zh`), fixed y range. A removed token has probability 0: it gets a grey hatched
    strip at 0 (no bar) and a grey label."""
    probs = probs.detach().float().cpu()
    labels = labels if zh else [gloss(text) for text in labels]
    x = list(range(len(labels)))
    gone = [i for i, r in enumerate(removed) if r]
    if gone:  # a strip at 0, 3% of the axis high: "nothing here", not a bar reaching some probability
        ax.bar(gone, [0.03 * ymax] * len(gone), width=0.8, color=REMOVED, hatch="xxx",
               edgecolor="#999999", linewidth=0.5, zorder=1)
    ax.bar(x, probs.numpy(), color=KEPT, edgecolor="#555555", linewidth=0.5, zorder=2)
    ax.set_xticks(x, labels, rotation=90, fontsize=9)
    for tick, r in zip(ax.xaxis.get_major_ticks(len(labels)), removed):
        if r:
            tick.label1.set_color("#888888")
    ax.set_ylim(0, ymax)
    ax.set_ylabel(say("probability", zh), fontsize=9)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_title(title, fontsize=10)
    if note:
        ax.text(note_x, 0.95, note, transform=ax.transAxes, va="top", fontsize=9,
                ha="right" if note_x > 0.9 else "center",
                bbox=dict(facecolor="white", edgecolor="#999999", alpha=0.9))


def _legend_handles(removed=True, other=None, zh=False):
    """Legend patches: kept, removed (if a filter ran), the summed bar (`other`)."""
    from matplotlib.patches import Patch
    handles = [Patch(color=KEPT, label=say("kept", zh))]
    if removed:
        handles.append(Patch(facecolor=REMOVED, edgecolor="#999999", hatch="xxx",
                             label=say("removed (probability 0)", zh)))
    if other:
        handles.append(Patch(facecolor=OTHER, edgecolor="#555555", label=other))
    return handles


def stage_ymax(stages, shown_ids) -> float:
    """The y range of a stage figure from its data (chapter 10): the tallest shown bar
    over all `stages` [(name, logits [1, V])] plus 10%, up to a tenth, at most 1."""
    tallest = max(torch.softmax(z[0].float(), -1)[shown_ids].max().item()
                  for _, z in stages)
    return min(1.0, math.ceil(tallest * 11) / 10)


def pinned_png(png: bytes) -> bytes:
    """The figure with a FIXED palette: the chart's colours and their blends with
    white and with each other, so the kept blue is the same pixel in every frame (a
    palette chosen per frame, `viz.palette_png`, can shift it in a frame with little
    blue)."""
    import io

    from PIL import Image
    inks = [KEPT, OTHER, REMOVED, "#555555", "#999999", "#888888", "#000000"]
    rgb = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in inks]
    colours = {(255, 255, 255)}
    for a in rgb:  # each ink blended with white and with the other inks (anti-aliasing)
        for b in [(255, 255, 255), *rgb]:
            steps = 16 if b == (255, 255, 255) else 2
            colours |= {tuple(round(x + (y - x) * t / steps) for x, y in zip(a, b))
                        for t in range(steps)}
    assert len(colours) <= 256  # white and every ink among them: nothing is cut
    palette = torch.tensor(sorted(colours), dtype=torch.float32)  # [C, 3]
    import numpy as np
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))  # [H, W, 3] uint8
    rgb24 = image.reshape(-1, 3).astype(np.int64) @ np.array([65536, 256, 1])  # [H·W]
    unique, where = np.unique(rgb24, return_inverse=True)  # a few hundred colours
    unique = torch.from_numpy(np.stack([unique // 65536, unique // 256 % 256,
                                        unique % 256], -1)).float()  # [U, 3]
    nearest = torch.cdist(unique, palette).argmin(-1).numpy()  # exact where an ink is
    indices = nearest[where.reshape(-1)].astype(np.uint8).reshape(image.shape[:2])
    flat = Image.fromarray(indices)  # "L"; putpalette makes it "P"
    flat.putpalette([int(v) for v in palette.flatten().tolist()])
    buffer = io.BytesIO()
    flat.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def stages_figure(stages, shown_ids, labels, ymax, context="", zh=False):
    """Every pipeline stage as a bar chart of the same tokens (chapter 10): kept in blue, removed as a
    grey strip at 0. The legend sits under the title, clear of every panel's info box.
    `labels`: the tokens' texts, glossed in English; `zh`: for the Chinese edition, no
    glosses, its words from ZH."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(stages), 1, figsize=(7, 1.9 * len(stages) + 1.0), sharex=True,
                             layout="constrained")
    for ax, (name, logits) in zip(axes, stages):
        probs = torch.softmax(logits[0].float(), -1)
        removed = [not math.isfinite(logits[0, i].item()) for i in shown_ids]
        note = say("kept {kept:,} tokens, entropy {h:.2f} nats", zh,
                   kept=kept_count(logits)[0].item(), h=entropy(logits)[0].item())
        key = "after: model" if name == "model" else "after: {name}"  # zh: 模型输出
        title = say(key, zh, name=_stage_name(name, zh))
        stage_bars(ax, probs[shown_ids], labels, removed, title, ymax, note, zh=zh)
    title = say("poetry-dense: the next token after {context}", zh, context=context)
    fig.suptitle(title, fontsize=10.5)
    fig.legend(handles=_legend_handles(zh=zh), fontsize=9, loc="outside lower center",
               ncol=2)
    return fig


def distribution_frame(logits, shown_ids, labels, ymax, title, other=False, zh=False):
    """One widget frame: the shown tokens' probabilities under `logits` [1, V], kept set
    and entropy noted. `other=True` adds a last bar in its own colour, every other
    token's probability summed (where the mass goes at a high temperature); the legend then has
    no "removed" entry, since temperature removes nothing. `labels`: the tokens' texts,
    glossed in English; `zh`: for the Chinese edition, no glosses, its words from ZH
    (`title`: the caller's)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 2.9), layout="constrained")
    probs = torch.softmax(logits[0].float(), -1)
    removed = [not math.isfinite(logits[0, i].item()) for i in shown_ids]
    shown_probs, shown_mass = probs[shown_ids], probs[shown_ids].sum().item()
    rest = logits.shape[-1] - len(shown_ids)
    if other:
        shown_probs = torch.cat([shown_probs, (1 - shown_probs.sum()).clamp(min=0).view(1)])
        labels = [*labels, say("other {rest:,}", zh, rest=rest)]
        removed = [*removed, False]
    note = say("kept {kept:,} of {vocab:,} tokens\nentropy {h:.2f} nats\n"
               "these {n} tokens: {mass:.2f}", zh, kept=kept_count(logits)[0].item(),
               vocab=logits.shape[-1], h=entropy(logits)[0].item(), n=len(shown_ids),
               mass=shown_mass)
    # the tall bars can only be the first token's and the last one's: notes go in the middle
    stage_bars(ax, shown_probs, labels, removed, title, ymax, note, note_x=0.7, zh=zh)
    if other:  # the summed bar in its own colour: it is not one token
        ax.patches[-1].set_facecolor(OTHER)
    summed = say("the other {rest:,} tokens, summed", zh, rest=rest) if other else None
    handles = _legend_handles(removed=not other, other=summed, zh=zh)
    ax.legend(handles=handles, fontsize=9, loc="upper center",
              bbox_to_anchor=(0.36, 1.0), ncol=1)
    return fig


# --- the mechanism, drawn -------------------------------------------------------------------------------------

PIPELINE = [  # (box text, what it does, written on) in transformers' order
    ("repetition\npenalty", "seen tokens:\nz > 0: z / r\nz < 0: z · r", "logits"),
    ("temperature", "every logit:\nz / T", "logits"),
    ("top-k", "keep the k\nlargest, the\nrest −∞", "logits"),
    ("top-p", "keep the best\ntokens until\ntheir mass ≥ p", "logits"),
    ("softmax", "exp(z) / Σ exp\n(−∞ → 0)", "probabilities"),
    ("sample", "multinomial:\none token id", "token"),
]


def pipeline_figure(vocab_size, kept, settings):
    """The sampling pipeline in transformers' order, one box per stage (chapter 10). `kept`: the tokens
    left after each of the six stages (measured), `settings`: r, T, k, p as shown on the boxes."""
    from . import diagram
    fig, ax = diagram.canvas(7.0, 3.3, title="From logits to a token: the pipeline of generate "
                                             "(transformers' order)")
    w, gap, y, h, x0 = 14.6, 2.2, 20.0, 11.0, 0.8
    values = [f"r = {settings['repetition_penalty']:g}", f"T = {settings['temperature']:g}",
              f"k = {settings['top_k']}", f"p = {settings['top_p']:g}", "", ""]
    diagram.shape(ax, x0, y + h + 9.5, f"the model's logits [1, {vocab_size:,}]")
    # choose_next_token's first step, in force until min_new_tokens are written
    diagram.box(ax, 50.0, y + h + 6.6, 48.0, 6.2,
                "first, until min_new_tokens are written:\n"
                "the end token is banned (its logit −∞)",
                kind="tensor", size=9, ls="--", edge=diagram.MUTED)
    diagram.arrow(ax, (x0 + 1.0, y + h + 7.5), (x0 + 1.0, y + h + 0.6))
    for i, (name, what, space) in enumerate(PIPELINE):
        x = x0 + i * (w + gap)
        kind = "loss" if space != "logits" else "attn"
        diagram.box(ax, x, y, w, h, f"{name}\n{values[i]}".strip(), kind=kind, size=9)
        diagram.note(ax, x + w / 2, y - 8.0, what, ha="center", size=9)
        left = "1 drawn" if i == len(PIPELINE) - 1 else f"{kept[i]:,} left"
        diagram.note(ax, x + w / 2 + 1.5, y + h + 3.2, left, ha="center", size=9, colour=diagram.SHAPE_INK)
        if i:
            diagram.arrow(ax, (x - gap + 0.3, y + h / 2), (x - 0.3, y + h / 2))
    x4 = x0 + 4 * (w + gap)
    diagram.line(ax, [(x0, 4.0), (x4 - gap / 2, 4.0)], colour=diagram.MUTED, lw=0.8)
    diagram.line(ax, [(x4 + gap / 2, 4.0), (100, 4.0)], colour=diagram.MUTED, lw=0.8)
    diagram.note(ax, (x0 + x4) / 2, 1.8, "on logits: a removed token gets −∞", ha="center")
    diagram.note(ax, x4 + w + gap / 2, 1.8, "on probabilities", ha="center")
    return fig


def continuation_context(text: str, lines: int = 3) -> str:
    """`text` cut after its `lines`-th line mark (，。！？；): the position just before the next line."""
    count = 0
    for i, ch in enumerate(text):
        count += ch in PUNCTUATION
        if count == lines:
            return text[:i + 1]
    return text


def last_line(text: str) -> str:
    """The last line of `text` with its mark: '床前明月光，春入玉门春。玉殿金台下，' -> '玉殿金台下，'."""
    cut = max([i for i, ch in enumerate(text[:-1]) if ch in PUNCTUATION], default=-1)
    return text[cut + 1:]


# --- min-p (Nguyen et al. 2024): not in the package's generate; checked against transformers -------------------

def min_p_filter(logits, min_p: float):
    """Keep the tokens whose probability is at least min_p × the best token's, the rest -inf
    (chapter 10; transformers' MinPLogitsWarper with min_tokens_to_keep=1)."""
    probs = torch.softmax(logits, dim=-1)  # [B, V]
    threshold = min_p * probs.amax(dim=-1, keepdim=True)  # [B, 1]: scales with the model's certainty
    return logits.masked_fill(probs < threshold, float("-inf"))  # the best token is never below it


def transformers_min_p(logits, min_p: float):
    """The same with transformers' own MinPLogitsWarper (the independent implementation compared)."""
    from transformers import MinPLogitsWarper
    return MinPLogitsWarper(min_p)(None, logits.clone())


# --- byte-level tokens: why a sample can show U+FFFD -----------------------------------------------------------

def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet backwards: the printable character standing for each byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The raw UTF-8 bytes a byte-level BPE token stands for (a Chinese character is 3 bytes)."""
    decoder = _byte_decoder()
    return bytes(decoder[ch] for ch in tokenizer.convert_ids_to_tokens(int(token_id)))


def partial_character_tokens(tokenizer, ids) -> list[tuple[int, int, bytes]]:
    """(position, token id, bytes) of each token in `ids` whose bytes are not whole UTF-8 characters."""
    found = []
    for position, token_id in enumerate(ids):
        raw = token_bytes(tokenizer, token_id)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            found.append((position, int(token_id), raw))
    return found


# --- the build-it exercise: the common ways to get the pipeline wrong ------------------------------------------

def _probs_filters(probs, top_k, top_p):
    """Top-k then top-p on probabilities [B, V], never renormalised (chapter 10's
    pitfall): a removed token gets 0, and top-p reads what top-k's survivors keep."""
    if 0 < top_k < probs.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[..., -1, None]  # [B, 1]
        probs = probs.masked_fill(probs < kth, 0.0)
    if top_p < 1.0:
        sorted_probs, idx = probs.sort(dim=-1)  # ascending, as transformers
        remove = sorted_probs.cumsum(-1) <= 1 - top_p
        probs = probs.masked_fill(remove.scatter(1, idx, remove), 0.0)
    return probs


def penalty_per_occurrence(logits, input_ids, penalty):
    """The penalty once per occurrence (a loop over input_ids): z / r^n or z · r^n."""
    ones = torch.ones_like(input_ids, dtype=logits.dtype)
    counts = torch.zeros_like(logits).scatter_add(1, input_ids, ones)  # [B, V]
    factor = torch.as_tensor(penalty, dtype=logits.dtype) ** counts  # 1 if unseen
    return torch.where(logits > 0, logits / factor, logits * factor)


def pipeline_mistakes(logits, input_ids, repetition_penalty, temperature, top_k,
                      top_p) -> dict:
    """{mistake: probabilities [B, V]} for chapter 10's pipeline exercise, each made of
    the package's stages with one thing wrong, so the checker can name the mistake.

    "top-p read the distribution from before top-k" covers two ways to write it: top-p
    run before top-k, and a nucleus computed on the whole distribution. Both keep the
    same tokens (the nucleus and the top-k set are both runs of the best tokens, so
    either way the smaller is kept): no case tells them apart, so they share a name."""
    def probs(z):
        return torch.softmax(z, dim=-1)

    def filters(z):
        return top_p_filter(top_k_filter(z, top_k), top_p)

    def after_temperature(z):
        return probs(filters(apply_temperature(z, temperature)))

    penalised = apply_repetition_penalty(logits, input_ids, repetition_penalty)
    scaled = apply_temperature(penalised, temperature)
    raw = _probs_filters(probs(scaled), top_k, top_p)  # on probabilities
    seen = torch.gather(logits, 1, input_ids)  # [B, S]
    divided = logits.scatter(1, input_ids, seen / repetition_penalty)  # z < 0 goes *up*
    late = apply_repetition_penalty(filters(apply_temperature(logits, temperature)),
                                    input_ids, repetition_penalty)
    return {
        "temperature after the filters":
            probs(apply_temperature(filters(penalised), temperature)),
        "top-p read the distribution from before top-k":
            probs(top_k_filter(top_p_filter(scaled, top_p), top_k)),
        "filtering probabilities without renormalising": raw,
        "filtering probabilities, renormalised only at the end":
            raw / raw.sum(-1, keepdim=True),
        "penalty divides negative logits": after_temperature(divided),
        "penalty once per occurrence": after_temperature(
            penalty_per_occurrence(logits, input_ids, repetition_penalty)),
        "penalty after the filters": probs(late),
    }


def kept_probs_miss(got, expected):
    """Chapter 10's fallback for a distribution [B, V]: the first row keeping another
    number of tokens (probability > 0) than the package's; None when all rows agree."""
    if not (torch.is_tensor(got) and got.shape == expected.shape):
        return None
    pairs = zip((got > 0).sum(-1).tolist(), (expected > 0).sum(-1).tolist())
    for row, (g, e) in enumerate(pairs, 1):
        if g != e:
            return (f"row {row}: you keep {g:,} token{'s' * (g != 1)}, "
                    f"the package keeps {e:,}")
    return None
