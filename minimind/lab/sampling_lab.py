"""What chapter 10 (sampling and generation) measures and draws: each sampling stage on a real next-token
distribution, its kept set and entropy, a chi-square test of the draws, and quality/diversity measures of samples.

Pure functions return numbers or tensors; the figure functions only draw them. The sampling itself is always the
package's (`minimind.sampling`); nothing here re-implements a stage.
"""
import csv
import math
from collections import Counter

import torch

from ..sampling import apply_repetition_penalty, apply_temperature, top_k_filter, top_p_filter
from ..training.data import poem_lines

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

KEPT, REMOVED = "#3b75af", "#dddddd"


def stage_bars(ax, probs, labels, removed, title, ymax, note=None):
    """One bar chart: probability of each shown token (as text), fixed y range. A removed token has probability 0,
    so its bar would be invisible: it gets a full-height grey column instead, and a grey label."""
    probs = probs.detach().float().cpu()
    x = list(range(len(labels)))
    gone = [i for i, r in enumerate(removed) if r]
    if gone:
        ax.bar(gone, [ymax] * len(gone), width=0.8, color=REMOVED, zorder=0)
    ax.bar(x, probs.numpy(), color=KEPT, edgecolor="#555555", linewidth=0.5, zorder=2)
    ax.set_xticks(x, labels, rotation=90, fontsize=9)
    for tick, r in zip(ax.xaxis.get_major_ticks(len(labels)), removed):
        if r:
            tick.label1.set_color("#888888")
    ax.set_ylim(0, ymax)
    ax.set_ylabel("probability", fontsize=9)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_title(title, fontsize=10)
    if note:
        ax.text(0.98, 0.95, note, transform=ax.transAxes, ha="right", va="top", fontsize=9,
                bbox=dict(facecolor="white", edgecolor="#999999", alpha=0.9))


def stages_figure(stages, shown_ids, labels, ymax):
    """Every pipeline stage as a bar chart of the same tokens (chapter 10): kept in blue, removed in grey columns."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    fig, axes = plt.subplots(len(stages), 1, figsize=(7, 1.9 * len(stages) + 0.8), sharex=True,
                             layout="constrained")
    for ax, (name, logits) in zip(axes, stages):
        probs = torch.softmax(logits[0].float(), -1)
        removed = [not math.isfinite(logits[0, i].item()) for i in shown_ids]
        note = f"kept {kept_count(logits)[0].item():,} tokens, entropy {entropy(logits)[0].item():.2f} nats"
        stage_bars(ax, probs[shown_ids], labels, removed, f"after: {name}", ymax, note)
    axes[0].legend(handles=[Patch(color=KEPT, label="kept"), Patch(color=REMOVED, label="removed (probability 0)")],
                   fontsize=9, loc="upper center", ncol=2)
    fig.suptitle("poetry-dense: the next token after 床前明月光，春入玉门春。玉殿金台下，", fontsize=10.5)
    return fig


def distribution_frame(logits, shown_ids, labels, ymax, title):
    """One widget frame: the shown tokens' probabilities under `logits` [1, V], kept set and entropy noted."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(figsize=(7, 2.9), layout="constrained")
    probs = torch.softmax(logits[0].float(), -1)
    removed = [not math.isfinite(logits[0, i].item()) for i in shown_ids]
    shown_mass = probs[shown_ids].sum().item()
    note = (f"kept {kept_count(logits)[0].item():,} of {logits.shape[-1]:,} tokens\n"
            f"entropy {entropy(logits)[0].item():.2f} nats\nthese {len(shown_ids)} tokens: {shown_mass:.2f}")
    stage_bars(ax, probs[shown_ids], labels, removed, title, ymax, note)
    ax.legend(handles=[Patch(color=KEPT, label="kept"), Patch(color=REMOVED, label="removed (probability 0)")],
              fontsize=9, loc="upper center", ncol=2)
    return fig
