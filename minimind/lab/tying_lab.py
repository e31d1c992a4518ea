"""What chapter 8 (weight tying) measures: whether two ends really share one Parameter, what the tie saves, each
end's share of the gradient, and what the trained embedding has learned (neighbours, a 2-D projection).

Pure functions return numbers or tensors; the chapter only prints and draws them.
"""
import copy
import csv

import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..model import MiniMindForCausalLM
from .params import count_parameters
from .variants import untied_model

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
