"""Measurements behind chapter 9's figures: yardsticks for a loss, which tokens count, how the mean is taken.

Pure functions take token ids, per-token losses or a training log and return numbers; the two `*_figure`
functions only draw what the others computed.
"""
import csv
import functools
import math
from pathlib import Path

import torch

from .viz import edition_text

IGNORE_INDEX = -100


# --- yardsticks ---------------------------------------------------------------------------------------------

def perplexity(nats_per_token: float) -> float:
    """exp(loss): the number of equally likely tokens that would leave a model as unsure as this loss says."""
    return math.exp(nats_per_token)


def bits_per_character(nats_per_token: float, chars_per_token: float) -> float:
    """A loss in nats per token as bits per character: / ln 2 turns nats into bits, / chars_per_token spreads
    each token's bits over the characters it covers."""
    return nats_per_token / math.log(2) / chars_per_token


def unigram_loss(ids: torch.Tensor, vocab_size: int) -> float:
    """Cross-entropy (nats/token) of the best context-free model of `ids`: each token predicted with its own
    frequency in `ids` (fitted on the same tokens it scores, so an optimistic yardstick)."""
    counts = torch.bincount(ids.flatten(), minlength=vocab_size).double()
    p = counts[counts > 0] / counts.sum()
    return -(p * p.log()).sum().item()


def prediction_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the predicted next-token distribution at every position: [..., V] -> [...]."""
    log_p = logits.float().log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


# --- which tokens count -------------------------------------------------------------------------------------

def pad_batch(sequences, pad_id: int, label_pad: int = IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to one length: (input_ids [B, L] padded with pad_id, labels [B, L] padded with label_pad).

    label_pad = IGNORE_INDEX leaves the padding out of the loss; label_pad = pad_id is the classic mistake.
    """
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    labels = torch.full((len(sequences), length), label_pad, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.as_tensor(s, dtype=torch.long)
        labels[i, :len(s)] = torch.as_tensor(s, dtype=torch.long)
    return ids, labels


def prompt_masked_labels(input_ids: torch.Tensor, prompt_len: int, ignore_index: int = IGNORE_INDEX):
    """Labels for supervised fine-tuning: the ids themselves, with the first prompt_len positions ignored, so
    only the answer's tokens (including the first, predicted from the prompt's last position) are scored."""
    labels = input_ids.clone()
    labels[..., :prompt_len] = ignore_index
    return labels


def counted_targets(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> int:
    """How many (position, next token) pairs the shifted loss averages over."""
    return int((labels[..., 1:] != ignore_index).sum())


# --- how the mean is taken ----------------------------------------------------------------------------------

def sequence_means(losses: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Per-row mean of per-token losses [B, S - 1] over the targets labels[:, 1:] that are not ignored: [B]."""
    counted = labels[:, 1:] != ignore_index
    return (losses.float() * counted).sum(1) / counted.sum(1)


def segment_index(input_ids: torch.Tensor, start_id: int) -> torch.Tensor:
    """For packed rows [B, S]: which document (counted over the flattened rows from 0) each position belongs to,
    a new document beginning at each `start_id`; text before the first start_id, if any, is document 0."""
    starts = (input_ids.flatten() == start_id).long()
    index = starts.cumsum(0) - starts[0]
    return index.view(input_ids.shape)


def group_means(values: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Mean of `values` [N] per group id in `groups` [N] (ids 0..G-1, NaN values skipped): [G]."""
    keep = ~values.isnan()
    values, groups = values[keep].double(), groups[keep]
    sums = torch.zeros(int(groups.max()) + 1, dtype=torch.float64).index_add_(0, groups, values)
    counts = torch.bincount(groups, minlength=len(sums)).double()
    return (sums / counts).float()


def batch_means_mean(losses: torch.Tensor, batch_size: int) -> float:
    """What mean_loss reports: the plain mean of per-batch means over rows of per-token losses [N, S - 1]."""
    means = [b.float().mean().item() for b in losses.split(batch_size)]
    return sum(means) / len(means)


# --- where in a line --------------------------------------------------------------------------------------

def line_slots(pieces) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each token (pieces from ffn_lab.token_pieces): (position of its first character in its line, from 1;
    characters it holds; length of its line). Punctuation and special tokens get (0, 0, ...)."""
    from .ffn_lab import line_positions
    positions, lengths = line_positions(pieces)
    chars = [sum(1 for byte in p if byte & 0xC0 != 0x80) if isinstance(p, bytes) else 0 for p in pieces]
    positions, lengths, chars = (torch.tensor(x) for x in (positions, lengths, chars))
    chars = torch.where(positions > 0, chars, torch.zeros_like(chars))
    first = torch.where(positions > 0, positions - chars + 1, torch.zeros_like(positions))
    return first, chars, lengths


def mean_by_slot(values: torch.Tensor, first: torch.Tensor, chars: torch.Tensor, lengths: torch.Tensor,
                 line_length: int, single_only=True) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of per-token `values` [N] by the position (1..line_length) of the token's first character, over lines
    of `line_length`; single_only keeps one-character tokens. Returns (means [L], counts [L]), NaN where empty."""
    chosen = (lengths == line_length) & (first > 0) & ~values.isnan()
    if single_only:
        chosen &= chars == 1
    means, counts = [], []
    for p in range(1, line_length + 1):
        here = chosen & (first == p)
        counts.append(int(here.sum()))
        means.append(values[here].float().mean() if here.any() else torch.tensor(float("nan")))
    return torch.stack(means), torch.tensor(counts)


# --- the training log ---------------------------------------------------------------------------------------

def read_train_log(path) -> dict[str, list]:
    """train_log.csv as columns: step (int), lr, train_loss, aux_loss (floats), val_loss (float or NaN)."""
    with open(Path(path)) as f:
        rows = list(csv.DictReader(f))
    out = {"step": [int(r["step"]) for r in rows]}
    for name in ("lr", "train_loss", "aux_loss", "tokens_per_s"):
        out[name] = [float(r[name]) for r in rows]
    out["val_loss"] = [float(r["val_loss"]) if r["val_loss"] else float("nan") for r in rows]
    return out


def moving_average(values, window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start): same length as `values`."""
    t = torch.tensor(values, dtype=torch.float64)
    sums = torch.cat([torch.zeros(1, dtype=torch.float64), t.cumsum(0)])
    ends = torch.arange(1, len(t) + 1)
    starts = (ends - window).clamp(min=0)
    return ((sums[ends] - sums[starts]) / (ends - starts)).tolist()


# --- figures ------------------------------------------------------------------------------------------------

ZH = {  # the Chinese edition's figure strings (issue #23): terms.tsv, ch09's .po
    "loss of this token (nats)": "该 token 的损失（奈特）",
    "end": "结束",
    "The shifted loss: position t is scored on the label at t + 1":
        "移位损失：位置 t 以 t + 1 处的标签计分",
    "labels[:, 1:]\n(targets)": "labels[:, 1:]\n（目标）",
    "−log p(target)\n[B, S − 1]": "−log p(目标)\n[B, S − 1]",
    "no\ntarget": "没有\n目标",
    "masked": "已屏蔽",
    "{mean}: the mean over the {kept} kept targets;\n−100 is neither summed nor "
    "counted, and the last position has no target":
        "{mean}：对保留的 {kept} 个目标取平均；\n−100 既不求和也不计数，"
        "最后一个位置没有目标",
    "log_softmax\nover {V}": "log_softmax\n对 {V} 个 token",
    "gather\nat the label": "gather\n取标签处的值",
    "mask −100,\nmean": "屏蔽 −100，\n取平均",
    "the same, as the package's shifted_cross_entropy computes it:":
        "同样的步骤，按包中 shifted_cross_entropy 的算法：",
    "江南曲 (Li Yi): the loss of each token, read alone after <|im_start|>":
        "李益《江南曲》：每个 token 的损失，在 <|im_start|> 之后单独读入",
    "{title}\nmean loss: {means}": "{title}\n平均损失：{means}",
}


say = functools.partial(edition_text, ZH)  # say(text, zh, **values)


def poem_layout(texts) -> list[tuple[int, int, int]]:
    """(line, column, width) for each token text: widths in characters, a new line after a token that ends with
    ，。？！； ; special tokens take width 1 and never break a line."""
    layout, line, col = [], 0, 0
    for text in texts:
        width = 1 if text.startswith("<|") else max(1, len(text))
        layout.append((line, col, width))
        col += width
        if text and text[-1] in "，。？！；":
            line, col = line + 1, 0
    return layout


def loss_grid_figure(texts, losses: dict, vmax: float, title: str, glosses=None,
                     cmap="magma_r", stacked=False, zh=False):
    """The tokens of a poem laid out line by line, one panel per model, each cell coloured by the loss (nats) of
    predicting that token; one colour scale (0..vmax) for every panel; `glosses` (optional, 9 pt) under each token
    make the cells twice as wide; `stacked` puts the panels one above the other.
    `zh`: for the Chinese edition, no glosses, its words from ZH (`title`: the
    caller's)."""
    import matplotlib.pyplot as plt
    from matplotlib import colors
    glosses = None if zh else glosses
    layout = poem_layout(texts)
    n_lines = max(l for l, _, _ in layout) + 1
    n_cols = max(c + w for _, c, w in layout)
    norm, cm = colors.Normalize(0, vmax), plt.get_cmap(cmap)
    names = list(losses)
    cell_w, cell_h = (0.95, 0.62) if glosses is not None else (0.42, 0.4)  # inches
    across, down = (1, len(names)) if stacked else (len(names), 1)
    size = (min(7.5, 1.1 + across * (n_cols * cell_w + 0.2)),
            0.75 + down * (n_lines * cell_h + 0.3))
    fig, axes = plt.subplots(down, across, squeeze=False, figsize=size,
                             layout="constrained")  # keeps suptitle off the titles
    for ax, name in zip(axes.flatten(), names):
        for i, ((line, col, width), text) in enumerate(zip(layout, texts)):
            value = losses[name][i]
            face = "#eeeeee" if math.isnan(value) else cm(norm(value))
            ax.add_patch(plt.Rectangle((col + 0.04, -line - 0.96), width - 0.08, 0.92, color=face))
            ink = "white" if not math.isnan(value) and norm(value) > 0.55 else "black"
            label = say("end", zh) if text == "<|im_end|>" else text
            y = -line - (0.36 if glosses is not None else 0.5)
            ax.text(col + width / 2, y, label, ha="center", va="center", color=ink,
                    fontsize=(14 if glosses is not None else 11) if len(label) < 3 else 9)
            if glosses is not None:
                ax.text(col + width / 2, -line - 0.78, glosses[i], ha="center", va="center", fontsize=9, color=ink)
        ax.set_xlim(0, n_cols), ax.set_ylim(-n_lines, 0)
        ax.axis("off")
        ax.set_title(name, fontsize=10)
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cm),
                       ax=axes.flatten().tolist(), shrink=0.8, pad=0.02)
    bar.set_label(say("loss of this token (nats)", zh), fontsize=9)
    bar.ax.tick_params(labelsize=9)
    fig.suptitle(title, fontsize=10)
    return fig


# --- the mechanism, drawn -------------------------------------------------------

def shifted_loss_figure(vocab_size: int, tokens, glosses, title=None, losses=None,
                        vmax=12.0, cmap="magma_r", zh=False):
    """Chapter 9's mechanism diagram: one right-padded row of ids, its labels shifted by
    one, logits [B, S, V] -> float32 log-softmax -> the label's log-prob, -100 masked,
    the mean over the rest.

    `tokens`: the row's token texts (the last may be the pad token, label -100);
    `glosses`: an English word under each; `losses` (optional): the measured loss of
    each kept target, written in its box and coloured on the scale 0..vmax of
    `loss_grid_figure`. Drawn with `diagram`, 7 in wide. `zh`: for the Chinese edition,
    the positions without their glosses (None will do), the words from ZH.
    """
    import matplotlib.pyplot as plt
    from matplotlib import colors
    from . import diagram
    n = len(tokens)
    fig, ax = diagram.canvas(7, 4.6, title=title or say(
        "The shifted loss: position t is scored on the label at t + 1", zh))
    left, cell, top = 19, 80 / n, 59
    pads = [t == "<|endoftext|>" for t in tokens]
    short = {"<|im_start|>": "<|im_\nstart|>", "<|endoftext|>": "<|endof\ntext|>"}
    norm, cm = colors.Normalize(0, vmax), plt.get_cmap(cmap)
    ink = diagram.INK
    diagram.note(ax, 1, top, "input_ids\n[B, S]", colour=ink)
    diagram.note(ax, 1, top - 14, say("labels[:, 1:]\n(targets)", zh), colour=ink)
    diagram.note(ax, 1, top - 27, say("−log p(target)\n[B, S − 1]", zh), colour=ink)
    for t, (text, gloss) in enumerate(zip(tokens, glosses or [""] * n)):
        x, w = left + t * cell + 0.6, cell - 1.2  # this position's column
        diagram.box(ax, x, top - 3.5, w, 7, short.get(text, text), "embed",
                    size=9 if text in short else 10)
        diagram.note(ax, x + w / 2, top - 5.8, f"{t}" if zh else f"{t}: {gloss}",
                     ha="center")
        if t == n - 1:  # the last position predicts nothing: logits[:, :-1] drops it
            diagram.note(ax, x + w / 2, top - 14, say("no\ntarget", zh), ha="center")
            continue
        ignored = pads[t + 1]
        label = "−100" if ignored else short.get(tokens[t + 1], tokens[t + 1])
        diagram.box(ax, x, top - 17.5, w, 7, label, "loss", size=10,
                    colour="#d9d9d9" if ignored else None, ls="--" if ignored else "-")
        mid = x + w / 2
        diagram.arrow(ax, (mid + cell - 1, top - 7.6), (mid + 1.5, top - 10.2),
                      colour=diagram.MUTED, lw=0.9)
        if ignored or losses is None:
            text = say("masked", zh) if ignored else f"ℓ{t}"
            diagram.box(ax, x, top - 30.5, w, 7, text,
                        "loss", colour="#f2f2f2" if ignored else "#fbd9bd", size=9)
            continue
        value = norm(losses[t])
        diagram.box(ax, x, top - 30.5, w, 7, colour=cm(value))
        ax.text(mid, top - 27, f"ℓ{t}\n{losses[t]:.1f}", ha="center", va="center",
                fontsize=9, linespacing=1.2, color="white" if value > 0.55 else ink)
    if losses is not None:  # the colour scale of the poem figures, as a small bar
        x0, limits = left + (n - 1) * cell + 1, (ax.get_xlim(), ax.get_ylim())
        ax.imshow([[i / 99 for i in range(100)]], cmap=cm, aspect="auto",
                  extent=(x0, x0 + cell - 2, top - 26, top - 23.5))
        ax.set(xlim=limits[0], ylim=limits[1])  # imshow resets them to its extent
        diagram.note(ax, x0 - 0.5, top - 28.5, "0", size=9)
        diagram.note(ax, x0 + cell - 1.5, top - 28.5, f"{vmax:g}", ha="right", size=9)
        diagram.note(ax, x0 + (cell - 2) / 2, top - 21.5, "nats", ha="center", size=9)
    kept = sum(not p for p in pads[1:])
    value = "" if losses is None else f" = {sum(losses[:kept]) / kept:.2f}"
    mean = f"loss = (ℓ0 + ℓ1 + … + ℓ{kept - 1}) / {kept}{value}"
    diagram.note(ax, left, top - 37.5, say(
        "{mean}: the mean over the {kept} kept targets;\n−100 is neither summed nor "
        "counted, and the last position has no target", zh, mean=mean, kept=kept),
        colour=ink)
    _draw_loss_steps(ax, vocab_size, zh=zh)
    return fig


def _draw_loss_steps(ax, vocab_size, y=2.5, width=15.4, gap=4.6, zh=False):
    """The bottom strip of the diagram: the package's steps, left to right."""
    from . import diagram
    steps = [f"logits\n[B, S, {vocab_size}]", ".float()\nfloat32",
             say("log_softmax\nover {V}", zh, V=vocab_size),
             say("gather\nat the label", zh), say("mask −100,\nmean", zh)]
    for i, text in enumerate(steps):
        x = 1 + i * (width + gap)
        diagram.box(ax, x, y, width, 8, text, "loss" if i else "embed", size=9)
        if i:
            diagram.arrow(ax, (x - gap + 0.5, y + 4), (x - 0.5, y + 4))
    diagram.note(ax, 1, y + 11.5, say(
        "the same, as the package's shifted_cross_entropy computes it:", zh),
        colour=diagram.INK)


# --- the build-it exercise: the common mistakes, named ----------------------------

def loss_mistakes(logits: torch.Tensor, labels: torch.Tensor) -> dict:
    """What the usual wrong shifted losses give for logits [B, S, V], labels [B, S]: no
    shift, shifted the wrong way, the ignored positions averaged in (as 0, or clamped to
    token 0 and scored), low precision."""
    def per_token(z, y):  # [B, T, V], [B, T] -> [B, T]; an ignored label scores token 0
        picked = z.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return torch.logsumexp(z, -1) - picked

    z, y = logits[:, :-1].float(), labels[:, 1:]  # [B, S-1, V], [B, S-1]
    keep = y != IGNORE_INDEX
    back = labels[:, :-1]  # the wrong way: logits at t + 1 scored on label t
    return {
        "no shift": per_token(logits.float(), labels)[labels != IGNORE_INDEX].mean(),
        "shifted the wrong way":
            per_token(logits[:, 1:].float(), back)[back != IGNORE_INDEX].mean(),
        "ignored averaged in": (per_token(z, y) * keep).sum() / keep.numel(),
        "ignored scored as token 0": per_token(z, y).mean(),  # -100 clamped to 0
        "low precision": per_token(logits[:, :-1], y)[keep].float().mean(),
    }


_MISTAKES = {
    "no shift": "you score position t on its own label: the loss must shift by one",
    "shifted the wrong way": "you shift the wrong way: logits at t are scored on "
                             "label t + 1",
    "ignored averaged in": "your mean counts the ignored (−100) positions too: divide "
                           "by the kept ones only",
    "ignored scored as token 0": "your mean counts the ignored (−100) positions too: "
                                 "divide by the kept ones only",
    "low precision": "your loss matches one computed in the logits' low precision: "
                     "upcast to float32 first",
}


class ShiftedLossReference:
    """The package's shifted loss as `check`'s reference. It remembers each case's
    arguments, so that `explain` can name the mistake (chapter 9, Exercise 1)."""

    def __init__(self):
        self.args = None

    def __call__(self, logits, labels):
        from minimind.loss import shifted_cross_entropy
        self.args = (logits, labels)
        return shifted_cross_entropy(logits, labels)

    def explain(self, got, expected):
        """The miss in the exercise's terms, or None (then the checker's message)."""
        if not torch.is_tensor(got) or got.numel() != 1:
            return None
        if not torch.isfinite(got).all():
            return ("your loss is inf or NaN: e^z overflowed somewhere; compute it "
                    "through logsumexp, which never exponentiates a large logit")
        low = self.args[0].dtype != torch.float32
        if low and got.dtype != torch.float32:
            kind = str(got.dtype).replace("torch.", "")
            return (f"your loss is {kind}: the logits are low precision here, and the "
                    "package computes the loss in float32")
        mine = got.detach().double().cpu()
        for name, value in loss_mistakes(*self.args).items():
            if name == "low precision" and not low:
                continue
            if torch.isclose(mine, value.double().cpu(), atol=1e-5, rtol=1e-4):
                return _MISTAKES[name]
        if low and abs(got.item() - expected.item()) <= 0.02 * abs(expected.item()):
            return ("your loss is off by rounding: it was computed in the logits' low "
                    "precision; upcast them to float32 first")
        return None


def explain_sft_labels(got, expected) -> str | None:
    """Chapter 9, Exercise 3: `got` and `expected` are (labels, the input ids after the
    call). The miss in the exercise's terms (the input changed in place, how many
    positions are masked), or None."""
    (labels, after), (want, before) = got, expected
    if torch.is_tensor(after) and not torch.equal(after, before):
        return ("your function changed the input ids in place: set -100 on a copy "
                "(`.clone()`)")
    if not torch.is_tensor(labels) or labels.shape != want.shape:
        return None
    for r, (mine, theirs) in enumerate(zip(labels, want), 1):
        yours = int((mine == IGNORE_INDEX).sum())
        package = int((theirs == IGNORE_INDEX).sum())
        if yours != package:
            return f"row {r}: you mask {yours} positions, the package masks {package}"
        wrong = (mine != theirs).nonzero().flatten()
        if len(wrong):
            c = int(wrong[0])
            should = "be -100" if theirs[c] == IGNORE_INDEX else "keep its token id"
            return f"row {r}: position {c} (counting from 0) should {should}"
    return None


def explain_smoothing_floor(got, expected) -> str | None:
    """Chapter 9, Exercise 5: a NaN floor is 0 · ln 0 computed as NaN; else None."""
    if isinstance(got, float) and math.isnan(got):
        return ("your floor is NaN: a target entry of 0 contributes 0 · ln 0, which "
                "counts as 0")
    return None


# --- beyond the plain loss ---------------------------------------------------------

def label_smoothing_floor(vocab_size: int, smoothing: float) -> float:
    """The lowest loss F.cross_entropy(..., label_smoothing=smoothing) can report over
    `vocab_size` tokens: its value at the minimiser, the log of the smoothed target
    (chapter 9)."""
    import torch.nn.functional as F
    target = torch.full((1, vocab_size), smoothing / vocab_size, dtype=torch.float64)
    target[0, 0] += 1 - smoothing  # [1, V]: 1 - eps on the label, eps spread over all V
    label = torch.tensor([0])
    return F.cross_entropy(target.log(), label, label_smoothing=smoothing).item()


def z_loss(logits: torch.Tensor, coef: float = 1e-4) -> torch.Tensor:
    """PaLM's auxiliary z-loss, coef * mean(logsumexp(logits)^2), logits [..., V]
    (chapter 9)."""
    log_z = torch.logsumexp(logits.float(), dim=-1)  # [...]
    return coef * log_z.pow(2).mean()


def packing_summary(sequences, seq_len: int) -> dict[str, int]:
    """What `pack` keeps of id lists: tokens in all, tokens in full rows, rows,
    documents whole and documents begun in the rows (a tail short of a row is
    dropped)."""
    lengths = torch.tensor([len(s) for s in sequences])
    total = int(lengths.sum())
    rows = total // seq_len
    kept = rows * seq_len
    ends = lengths.cumsum(0)
    starts = ends - lengths
    return {"tokens": total, "kept": kept, "dropped": total - kept, "rows": rows,
            "whole": int((ends <= kept).sum()), "begun": int((starts < kept).sum())}


# --- the widget's poems, glossed --------------------------------------------------

# Chapter 9's widget: for each of its six poems (keyed by the first five characters),
# a title (the known title, else the first line, translated) and one English
# gloss per predicted token, <|im_end|> included (token boundaries of the shipped
# tokenizer).
POEM_GLOSSES = {
    "此地无驻马": ("此地无驻马 (“No horse halts here”)", [
        "here", "no", "halting horse", ",", "night", "in", "still", "run", "wheels",
        ".", "so", "thus", "road", "side", "grass", ",", "less", "than",
        "on clothes", "dust", ".", "(poem ends)"]),
    "嫁得瞿塘贾": ("江南曲 (Song of the South, Li Yi)", [
        "marry", "get", "Qú-", "-táng", "trader", ",", "each dawn", "miss", "me",
        "date", ".", "had I known", "tide", "has", "faith", ",", "marry", "to",
        "play", "tide", "lad", ".", "(poem ends)"]),
    "夜闻邻妇泣": ("夜闻邻妇泣 (“At night, a neighbour's wife weeps”)", [
        "night", "hear", "neighbour", "wife", "weep", ",", "keen", "keen",
        "lingering", "grief", ".", "then", "ask", "because of", "what matter", ",",
        "soldier", "war", "not back", ".", "(poem ends)"]),
    "醉后乐无极": ("醉后乐无极 (“Drunk, my joy knows no end”)", [
        "once drunk", "joy", "no", "limit", ",", "far", "better", "not yet", "drunk",
        "time", ".", "move", "face", "all is", "dance", ",", "utter", "words",
        "always", "become", "poem", ".", "(poem ends)"]),
    "今日山晴后": ("今日山晴后 (“Today, after the hills clear”)", [
        "today", "hills", "clear", "after", ",", "last", "cicadas", "asters",
        "bloom", "time", ".", "climb tower", "see", "autumn hues", ",", "where",
        "most", "longing", ".", "(poem ends)"]),
    "信书成自误": ("信书成自误 (“Trusting books, I misled myself”)", [
        "trust", "books", "become", "self", "misled", ",", "through", "affairs",
        "slowly", "know", "wrong", ".", "today", "at the fork", "part", ",",
        "which year", "await", "you", "return", ".", "(poem ends)"]),
}
ZH.update({  # the widget's titles in Chinese: the poem's title, else its first line
    "此地无驻马 (“No horse halts here”)": "此地无驻马",
    "江南曲 (Song of the South, Li Yi)": "李益《江南曲》",
    "夜闻邻妇泣 (“At night, a neighbour's wife weeps”)": "夜闻邻妇泣",
    "醉后乐无极 (“Drunk, my joy knows no end”)": "醉后乐无极",
    "今日山晴后 (“Today, after the hills clear”)": "今日山晴后",
    "信书成自误 (“Trusting books, I misled myself”)": "信书成自误",
})
