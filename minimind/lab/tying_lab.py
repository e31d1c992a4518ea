"""What chapter 8 (weight tying) measures: whether two ends really share one Parameter, what the tie saves, each
end's share of the gradient, and what the trained embedding has learned (neighbours, a 2-D projection).

Pure functions return numbers or tensors; the chapter only prints and draws them.
"""
import copy
import csv
import functools

import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..model import MiniMindForCausalLM
from .params import count_parameters
from .variants import untied_model
from .viz import edition_text

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"
MIB = 2 ** 20  # the book's unit of memory

GLOSSES = {  # pinyin and a short English gloss for the characters the chapter prints or draws
    "一": ("yī", "one"), "二": ("èr", "two"), "三": ("sān", "three"), "四": ("sì", "four"), "五": ("wǔ", "five"),
    "六": ("liù", "six"), "七": ("qī", "seven"), "八": ("bā", "eight"), "九": ("jiǔ", "nine"), "十": ("shí", "ten"),
    "百": ("bǎi", "hundred"), "千": ("qiān", "thousand"), "万": ("wàn", "ten thousand"),
    "春": ("chūn", "spring"), "夏": ("xià", "summer"), "秋": ("qiū", "autumn"), "冬": ("dōng", "winter"),
    "红": ("hóng", "red"), "青": ("qīng", "blue-green"), "白": ("bái", "white"), "黄": ("huáng", "yellow"),
    "绿": ("lǜ", "green"), "紫": ("zǐ", "purple"),
    "东": ("dōng", "east"), "南": ("nán", "south"), "西": ("xī", "west"), "北": ("běi", "north"),
    "月": ("yuè", "moon"), "山": ("shān", "mountain"), "水": ("shuǐ", "water"), "花": ("huā", "flower"),
    "风": ("fēng", "wind"), "云": ("yún", "cloud"), "日": ("rì", "sun, day"), "夜": ("yè", "night"),
    "雪": ("xuě", "snow"), "雨": ("yǔ", "rain"), "路": ("lù", "road"), "地": ("dì", "ground"),
    "天": ("tiān", "sky"), "江": ("jiāng", "river"), "人": ("rén", "person"), "寒": ("hán", "cold"),
    "朝": ("zhāo", "morning"), "香": ("xiāng", "fragrance"), "前": ("qián", "before"), "不": ("bù", "not"),
    "独": ("dú", "alone"), "自": ("zì", "self"), "未": ("wèi", "not yet"), "欲": ("yù", "about to"),
    "玉": ("yù", "jade"), "大": ("dà", "big"), "横": ("héng", "across"), "海": ("hǎi", "sea"),
    "草": ("cǎo", "grass"), "长": ("cháng", "long"), "新": ("xīn", "new"), "，": ("", "comma"),
    "。": ("", "full stop"),
}


def gloss(text: str) -> str:
    """'月 (yuè, moon)'; the bare text when the character has no gloss here."""
    if text not in GLOSSES:
        return text
    pinyin, meaning = GLOSSES[text]
    return f"{text} ({pinyin + ', ' if pinyin else ''}{meaning})"


# --- is it one Parameter? ------------------------------------------------------------------------------------

def tie_report(model) -> dict:
    """How the embedding and the head weight relate: the same Python object, the same first element in memory,
    the same storage, equal values; and how many parameters the model reports (shared ones counted once)."""
    embed, head = model.model.embed_tokens.weight, model.lm_head.weight
    return {"same object": head is embed,
            "same data_ptr": head.data_ptr() == embed.data_ptr(),
            "same storage": head.untyped_storage().data_ptr() == embed.untyped_storage().data_ptr(),
            "equal values": head.shape == embed.shape and torch.equal(head, embed),
            "parameters": sum(p.numel() for p in model.parameters())}


def is_tied(model) -> bool:
    """True only for a real tie: one Parameter object at both ends (equal values or a shared storage is not enough)."""
    return model.lm_head.weight is model.model.embed_tokens.weight


def tying_savings(config) -> dict:
    """Parameters of `config` built tied and untied (on the meta device: no memory), and what the tie saves,
    in parameters, as a share of the untied model, and in MiB at 4 (float32) and 2 (bfloat16) bytes each."""
    with torch.device("meta"):
        tied_config = copy.deepcopy(config)
        tied_config.tie_word_embeddings = True
        tied = count_parameters(MiniMindForCausalLM(tied_config))["total"]
        untied = count_parameters(untied_model(config))["total"]
    saved = untied - tied
    return {"tied": tied, "untied": untied, "saved": saved, "share": saved / untied,
            "saved MiB fp32": saved * 4 / MIB, "saved MiB bf16": saved * 2 / MIB}


# --- gradients from both ends --------------------------------------------------------------------------------

def end_gradients(model, input_ids, labels=None):
    """(gradient through the embedding, gradient through the head, loss) for a tied model on one batch.

    The model runs with two separate copies of the shared matrix (torch.func.functional_call, tie_weights=False),
    so autograd keeps the two contributions apart; their sum is the tied Parameter's .grad.
    """
    weight = model.lm_head.weight.detach()
    embed, head = weight.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    labels = input_ids if labels is None else labels
    out = functional_call(model, {EMBED: embed, HEAD: head}, (input_ids,), {"labels": labels}, tie_weights=False)
    g_embed, g_head = torch.autograd.grad(out.loss, (embed, head))
    return g_embed, g_head, out.loss.detach()


def gradient_summary(g_embed: torch.Tensor, g_head: torch.Tensor) -> dict:
    """Norms of the two contributions, each one's share of the total (its projection on g = g_embed + g_head,
    the two shares add up to 1), the cosine between them, and how many rows (tokens) each one touches."""
    total = g_embed + g_head
    squared = total.pow(2).sum()
    return {"norm embed": g_embed.norm().item(), "norm head": g_head.norm().item(), "norm total": total.norm().item(),
            "share embed": ((g_embed * total).sum() / squared).item(),
            "share head": ((g_head * total).sum() / squared).item(),
            "cosine": F.cosine_similarity(g_embed.flatten(), g_head.flatten(), dim=0).item(),
            "rows embed": int((g_embed != 0).any(-1).sum()), "rows head": int((g_head != 0).any(-1).sum())}


# --- the trained embedding -----------------------------------------------------------------------------------

def nearest_neighbours(weight: torch.Tensor, index: int, k: int = 5):
    """(indices [k], cosines [k]): the rows of `weight` [V, d] most similar in direction to row `index`, itself
    excluded."""
    unit = F.normalize(weight.float(), dim=-1)
    cosines = unit @ unit[index]
    cosines[index] = -float("inf")
    values, indices = cosines.topk(k)
    return indices, values


def pca_2d(x: torch.Tensor):
    """(coordinates [N, 2], explained variance share [2]) of the rows of x [N, d] on their first two principal
    axes (exact SVD of the centred rows; each axis signed so that its largest coordinate is positive)."""
    centred = x.float() - x.float().mean(0)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    coords = centred @ vh[:2].T
    flip = torch.where(coords.gather(0, coords.abs().argmax(0, keepdim=True)) < 0, -1.0, 1.0)
    return coords * flip, (s[:2] ** 2) / (s ** 2).sum()


def category_cohesion(weight: torch.Tensor, groups: dict) -> dict:
    """{group: (mean cosine between two members, mean cosine from a member to the other groups' members)}."""
    names = list(groups)
    rows = [i for name in names for i in groups[name]]
    owner = torch.tensor([n for n, name in enumerate(names) for _ in groups[name]])
    unit = F.normalize(weight[rows].float(), dim=-1)
    cos = unit @ unit.T
    result = {}
    for n, name in enumerate(names):
        inside = owner == n
        block = cos[inside][:, inside]
        size = int(inside.sum())
        within = (block.sum() - block.diagonal().sum()) / (size * size - size)
        result[name] = (within.item(), cos[inside][:, ~inside].mean().item())
    return result


def nearest_in_same_group(weight: torch.Tensor, groups: dict) -> tuple[int, int]:
    """(hits, members): how many members' nearest other member (cosine, full dimension) is in their own group."""
    names = list(groups)
    rows = [i for name in names for i in groups[name]]
    owner = torch.tensor([n for n, name in enumerate(names) for _ in groups[name]])
    unit = F.normalize(weight[rows].float(), dim=-1)
    cos = unit @ unit.T
    cos.fill_diagonal_(-float("inf"))
    return int((owner[cos.argmax(1)] == owner).sum()), len(rows)


# --- two figures drawn for both editions (issue #23) -----------------------------

# Every English string of those figures, with its Chinese (terms.tsv, ch08's .po).
ZH = {"gradient norm of its row (log)": "该行的梯度范数（对数）",
      "not read\n({n:,} tokens)": "未读入\n（{n:,} 个 token）",
      "head end (drawn 8% right)": "输出头端（向右错开 8%）",
      "embedding end (drawn 8% left)": "嵌入端（向左错开 8%）",
      "head end, tokens not read (embedding end: 0)": "输出头端，未读入的 token（嵌入端为 0）",
      "full stop {piece}": "句号 {piece}", "comma {piece}": "逗号 {piece}",
      "times the token is read in the batch (log)": "该 token 在批次中被读入的次数（对数）",
      "tokens read in the batch": "批次中读入的 token",
      "poetry-dense, one batch: gradient per vocabulary row, from each end":
          "poetry-dense，一个批次：词表每一行从两端得到的梯度",
      "numbers": "数字", "seasons": "季节", "colours": "颜色", "directions": "方位",
      "{name}: {chars} ({glosses})": "{name}：{chars}",
      "principal axis 1 ({share:.1%} of the variance)": "第一主轴（方差的 {share:.1%}）",
      "principal axis 2 ({share:.1%})": "第二主轴（{share:.1%}）",
      "poetry-dense: embedding rows (= LM-head rows) of {n} characters":
          "poetry-dense：{n} 个汉字的嵌入行（= 输出头的行）"}
CATEGORY_COLOURS = {"numbers": "tab:blue", "seasons": "tab:green", "colours": "tab:red",
                    "directions": "tab:purple"}


say = functools.partial(edition_text, ZH)  # say(text, zh, **values)


def group_gloss(chars: str) -> str:
    """The English glosses of a category's characters: 'spring, summer, autumn, winter',
    or the first and last of a long one ('one … ten thousand')."""
    meanings = [GLOSSES[ch][1] for ch in chars]
    return f"{meanings[0]} … {meanings[-1]}" if len(chars) > 5 else ", ".join(meanings)


def row_norm_figure(g_embed, g_head, batch, tokenizer, zh: bool = False):
    """Chapter 8: each vocabulary row's gradient norm from each end [V, d] against how
    often the batch [B, S] reads its token; the unread tokens in a strip of their own
    (no log axis for 0). zh: drawn for the Chinese edition."""
    import matplotlib.pyplot as plt
    counts = torch.bincount(batch[:, :-1].flatten().cpu(), minlength=g_embed.shape[0])
    e, h = g_embed.norm(dim=-1).cpu(), g_head.norm(dim=-1).cpu()  # [V] each
    read, unread = counts > 0, counts == 0
    layout = {"width_ratios": [1, 5], "wspace": 0.05}
    fig, (strip, ax) = plt.subplots(1, 2, figsize=(7.2, 3.8), sharey=True,
                                    gridspec_kw=layout)
    jitter = torch.rand(int(unread.sum()), generator=torch.Generator().manual_seed(0))
    strip.scatter(jitter, h[unread], s=3, color="tab:red", alpha=0.4)
    strip.set(xlim=(-0.3, 1.3), xticks=[0.5], xticklabels=["0"], yscale="log",
              ylabel=say("gradient norm of its row (log)", zh))
    strip.set_title(say("not read\n({n:,} tokens)", zh, n=int(unread.sum())),
                    fontsize=9)
    dodge = 1.08  # the two ends of one token side by side, not on top of each other
    ax.scatter(counts[read] * dodge, h[read], s=8, color="tab:orange",
               label=say("head end (drawn 8% right)", zh))
    ax.scatter(counts[read] / dodge, e[read], s=8, color="tab:blue",
               label=say("embedding end (drawn 8% left)", zh))
    ax.scatter([], [], s=8, color="tab:red",  # the strip's legend entry
               label=say("head end, tokens not read (embedding end: 0)", zh))
    for i, dy in zip(counts.topk(2).indices.tolist(), (-35, -60)):
        piece = tokenizer.decode([i])
        name = "full stop {piece}" if piece == "。" else "comma {piece}"
        ax.annotate(say(name, zh, piece=piece), (counts[i] / dodge, e[i]),
                    textcoords="offset points", xytext=(-150, dy), fontsize=12,
                    arrowprops={"arrowstyle": "-", "lw": 0.5})
    ticks = [1, 2, 5, 10, 20, 40]
    ax.set(xscale="log", xlabel=say("times the token is read in the batch (log)", zh),
           title=say("tokens read in the batch", zh), xticks=ticks, xticklabels=ticks)
    ax.legend(fontsize=9, loc="lower right")
    fig.suptitle(say("poetry-dense, one batch: gradient per vocabulary row, from each "
                     "end", zh), fontsize=10)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.83, bottom=0.14)
    return fig


def category_map(weight, groups, categories, tokenizer, zh: bool = False):
    """Chapter 8: the rows of `weight` [V, d] for the token ids of `groups` ({category:
    ids}) on their first two principal axes, each drawn as its character in its
    category's colour; the legend gives `categories` ({category: characters}), in the
    English edition with their glosses. zh: drawn for the Chinese edition."""
    import matplotlib.pyplot as plt
    rows = [i for name in groups for i in groups[name]]
    coords, explained = pca_2d(weight[rows].cpu())  # [N, 2], [2]
    fig, ax = plt.subplots(figsize=(7.2, 5.3))
    start = 0
    for name, members in groups.items():
        xy = coords[start:start + len(members)]
        start += len(members)
        label = say("{name}: {chars} ({glosses})", zh, name=say(name, zh),
                    chars=categories[name], glosses=group_gloss(categories[name]))
        ax.scatter(xy[:, 0], xy[:, 1], s=25, color=CATEGORY_COLOURS[name], label=label)
        for k, ((x, y), i) in enumerate(zip(xy.tolist(), members)):
            offset = (4, 3) if k % 2 == 0 else (-14, -15)  # alternate: fewer overlaps
            ax.annotate(tokenizer.decode([i]), (x, y), textcoords="offset points",
                        xytext=offset, fontsize=12, color=CATEGORY_COLOURS[name])
    ax.set(xlabel=say("principal axis 1 ({share:.1%} of the variance)", zh,
                      share=explained[0]),
           ylabel=say("principal axis 2 ({share:.1%})", zh, share=explained[1]),
           title=say("poetry-dense: embedding rows (= LM-head rows) of {n} characters",
                     zh, n=len(rows)))
    fig.legend(fontsize=9, loc="lower center", ncol=1, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.93, bottom=0.3)
    return fig


# --- the committed benchmark (bench/results/tied_vs_untied.csv) ----------------------------------------------

def read_curves(path) -> dict:
    """{variant: {"step", "train", "val_step", "val"}} from a bench/train_variants.py results table."""
    curves = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            c = curves.setdefault(row["variant"], {"step": [], "train": [], "val_step": [], "val": []})
            c["step"].append(int(row["step"]))
            c["train"].append(float(row["train_loss"]))
            if row["val_loss"]:
                c["val_step"].append(int(row["step"]))
                c["val"].append(float(row["val_loss"]))
    return curves


def running_mean(values, window: int) -> torch.Tensor:
    """Mean of the last `window` values at each step (fewer at the start): a smoothed training curve."""
    x = torch.as_tensor(values, dtype=torch.float64)
    sums = torch.cat([torch.zeros(1, dtype=x.dtype), x.cumsum(0)])
    ends = torch.arange(1, len(x) + 1)
    starts = (ends - window).clamp(min=0)
    return (sums[ends] - sums[starts]) / (ends - starts)



# --- the mechanism, drawn (chapter 8's first figure) ------------------------------

def tying_figure(config, others: dict | None = None):
    """One V × d matrix read at both ends: the embedding looks up a row, the LM head
    takes a dot product with every row (chapter 8).

    Sizes from `config`; `others` ({name: config}) adds a note line.
    """
    import matplotlib.pyplot as plt
    from . import diagram
    V, d, L = config.vocab_size, config.hidden_size, config.num_hidden_layers
    title = f"Weight tying: one {V:,} × {d} matrix W at both ends of the model"
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese on this figure
        fig, ax = diagram.canvas(7, 3.7, title=title)
        _draw_tying(ax, V, d, L)
        if others:
            sizes = "; ".join(f"{name}: {c.vocab_size:,} × {c.hidden_size}"
                              for name, c in others.items())
            diagram.note(ax, 50, 1.2, f"the same picture, other sizes: {sizes}",
                         ha="center")
    return fig


def _draw_tying(ax, V, d, L):
    from matplotlib.patches import Rectangle
    from . import diagram
    y, h = 38, 9  # the forward pass, left to right: (x, width, text, kind, shape above)
    flow = [(1, 12.5, "token ids", "tensor", "[B, S]"),
            (18, 19, "embed_tokens\nx = W[id]", "embed", f"x [B, S, {d}]"),
            (41, 17, f"{L} blocks\n+ final norm", "attn", f"h [B, S, {d}]"),
            (62.5, 19, "lm_head\nz = h · W$^\\top$", "embed", ""),
            (86, 13, "logits z", "loss", f"[B, S, {V:,}]")]
    for k, (x, w, text, kind, shape) in enumerate(flow):
        diagram.box(ax, x, y, w, h, text, kind)
        if shape:
            diagram.shape(ax, x + w / 2, y + h + 3, shape, ha="center")
        if k:
            end_of_previous = flow[k - 1][0] + flow[k - 1][1]
            diagram.arrow(ax, (end_of_previous + 0.5, y + h / 2), (x - 0.5, y + h / 2))
    mx, mw, my, mh = 27, 46, 9, 14  # the one matrix
    diagram.box(ax, mx, my, mw, mh, "", "embed", lw=1.6)
    ax.add_patch(Rectangle((mx, my + 9), mw, 1.6, facecolor=diagram.HEAD_COLOURS[1],
                           alpha=0.9))  # one row
    diagram.note(ax, mx + mw / 2, my + 4.5,
                 f"W  [{V:,}, {d}]\none Parameter, {V * d:,} weights",
                 ha="center", colour=diagram.INK)
    diagram.note(ax, mx + mw + 1.5, my + 9.8, "row v: token v's\nvector, in and out")
    ink = diagram.SHAPE_INK
    diagram.arrow(ax, (mx + 3, my + mh + 0.5), (27.5, y - 0.6), colour=ink)
    diagram.note(ax, 2, 28.5, "input: read row id\n(a lookup, 1 row\nper position)")
    diagram.arrow(ax, (mx + mw - 3, my + mh + 0.5), (72, y - 0.6), colour=ink)
    diagram.note(ax, 74, 28.5,
                 f"output: dot product\nof h with all {V:,}\nrows (1 logit each)")


# --- the build-it exercise: a tied head -------------------------------------------

def tied_logits(hidden: torch.Tensor, embedding: torch.nn.Embedding) -> torch.Tensor:
    """Chapter 8's tied LM head: logit v = hidden · row v of the embedding's matrix."""
    return F.linear(hidden, embedding.weight)  # [B, S, d] @ [V, d]^T -> [B, S, V]


def through_both_ends(head, weight, ids, targets):
    """(logits, gradient of the embedding's matrix) of a toy model that reads `ids`
    [B, S] through an embedding made from `weight` [V, d] and scores with
    `head(hidden, embedding)`.

    The embedding is used at both ends, so a real tie sends the loss's gradient to its
    matrix from the lookup and from the head; a head that uses a copy sends only the
    lookup's share.
    """
    matrix = weight.detach().clone()
    embedding = torch.nn.Embedding.from_pretrained(matrix, freeze=False)
    x = embedding(ids)  # [B, S, d]
    hidden = torch.tanh(x + x.roll(1, dims=1))  # stands in for the blocks
    logits = head(hidden, embedding)  # [B, S, V]
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    return logits.detach(), embedding.weight.grad


def head_miss(got, expected) -> str | None:
    """Chapter 8's tied-head exercise: what a miss means (transposed, or a copy); for a
    copy, (message, COPY_HINT), the hint that fits that mistake."""
    (logits, grad), (logits_ref, grad_ref) = got, expected
    if logits.shape != logits_ref.shape:
        return (f"your logits have shape {list(logits.shape)}: the head gives one "
                f"score per token of the vocabulary, {logits_ref.shape[-1]} a position")
    if not torch.allclose(logits, logits_ref, atol=1e-5, rtol=1e-4):
        return ("your logits have the right shape but not the right values: logit v "
                "should be the dot product of h with row v of the matrix")
    if grad is None or not torch.allclose(grad, grad_ref, atol=1e-5, rtol=1e-4):
        return ("the logits are right, but the embedding's matrix does not get the "
                "head's share of the gradient: your head uses another tensor (a copy, "
                "or a second Parameter over the same memory), not the embedding's own "
                "Parameter", COPY_HINT)  # (message, the hint that fits this mistake)
    return None


COPY_HINT = ("`.detach().clone()`, `.data`, `torch.tensor(...)` and `nn.Parameter(...)` "
             "all make a tensor outside autograd's graph: use `embedding.weight` itself. "
             "(A plain `.clone()` inside the head passes the gradient back; a copy made "
             "once at build time, as in pitfall 1, does not.)")


# --- the go-further experiment: untie, train, watch the ends drift ----------------

def end_drift(embed: torch.Tensor, head: torch.Tensor) -> tuple[float, float]:
    """(RMS of head − embed over all entries, mean over rows v of the cosine between
    the two rows v): how far an untied model's ends moved apart; 0 and 1 if equal."""
    difference = (head - embed).float()  # [V, d]
    cosine = F.cosine_similarity(head.float(), embed.float(), dim=-1)  # [V]
    return difference.pow(2).mean().sqrt().item(), cosine.mean().item()


def drift_run(untied, rows, steps: int = 15, rows_per_step: int = 2, lr: float = 1e-3,
              optimizer: str = "adamw"):
    """Train an untied model on `rows` [N, S] with AdamW (or plain SGD, `optimizer=
    "sgd"`: chapter 8's control run), `rows_per_step` rows a step; after each step,
    `end_drift` on two fixed groups of rows: the tokens the run reads (at a position
    whose prediction is scored) and those it never reads (chapter 8).

    Returns {"step", "read", "unread", "n_read", "moved"}; "moved": per group, the RMS
    of how far the embedding and the head each moved from the start, after the run.
    """
    optimizers = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    last = len(rows) - rows_per_step + 1
    starts = [(k * rows_per_step) % last for k in range(steps)]
    read = torch.zeros(untied.config.vocab_size, dtype=torch.bool, device=rows.device)
    for s in starts:
        read[rows[s:s + rows_per_step, :-1].flatten()] = True
    start = untied.lm_head.weight.detach().clone()  # [V, d]: both ends begin equal
    optimizer = optimizers[optimizer](untied.parameters(), lr=lr)
    untied.train()
    history = {"step": [], "read": [], "unread": [], "n_read": int(read.sum())}
    for step, s in enumerate(starts, 1):
        batch = rows[s:s + rows_per_step]  # [rows_per_step, S]
        optimizer.zero_grad()
        untied(batch, labels=batch).loss.backward()
        optimizer.step()
        embed = untied.model.embed_tokens.weight.detach()  # [V, d]
        head = untied.lm_head.weight.detach()  # [V, d]
        history["step"].append(step)
        history["read"].append(end_drift(embed[read], head[read]))
        history["unread"].append(end_drift(embed[~read], head[~read]))
    untied.eval()
    history["moved"] = {
        name: tuple((end[mask] - start[mask]).pow(2).mean().sqrt().item()
                    for end in (embed, head))
        for name, mask in (("read", read), ("unread", ~read))}
    return history
