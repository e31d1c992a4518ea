"""What chapter 5 (SwiGLU) measures: activation curves, FFN widths and FLOPs, and the trained gate's behaviour.

Pure functions return tensors or numbers; the chapter only draws them. `record_ffn` reads the two branches of
every feed-forward network with forward pre-hooks, which it removes when its `with` block ends.
"""
import math
from collections import Counter
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode
from transformers.activations import ACT2FN

from ..feed_forward import FeedForward
from ..loss import shifted_cross_entropy
from . import diagram
from .variants import GELUFeedForward, gelu_width

BREAKS = set("，。？！；：、\n")  # characters that end a line (or a clause) of a poem


# --- the mechanism, drawn from the config --------------------------------------------------------------------

def width_rule(hidden_size: int, multiple_of: int = 64) -> dict:
    """The steps of MiniMind's width rule (config region "ffn width"): d·π, in blocks of 64, rounded up."""
    blocks = hidden_size * math.pi / multiple_of
    return {"d·π": hidden_size * math.pi, "blocks of 64": blocks, "rounded up": math.ceil(blocks),
            "width": math.ceil(blocks) * multiple_of}


def swiglu_figure(config, batch="B", seq="S"):
    """SwiGLU's two branches with the sizes of `config`: x → gate_proj, up_proj → SiLU, × → down_proj.

    Chapter 5's mechanism diagram, in the visual language of ch01's architecture figure. 7 in wide.
    """
    import matplotlib.pyplot as plt
    d, width = config.hidden_size, config.intermediate_size
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese here; DejaVu has ⊙ and ⌈ ⌉
        fig, ax = diagram.canvas(7, 3.4, title=f"SwiGLU feed-forward: {d} → two branches of {width} → {d}")
        _draw_swiglu(ax, d, width, config.hidden_act, batch, seq)
    return fig


def _draw_swiglu(ax, d, width, act, batch, seq):
    mid, top, low = 25, 37.5, 11.5  # y of the input line, the gate branch, the up branch
    wide, narrow = f"[{batch}, {seq}, {width}]", f"[{batch}, {seq}, {d}]"
    diagram.box(ax, 1, mid - 5, 12, 10, "x\n(normed)", "tensor")
    diagram.shape(ax, 7, mid - 8.5, narrow, ha="center")
    diagram.line(ax, [(13.4, mid), (17, mid)])
    diagram.line(ax, [(17, low), (17, top)])
    for y, name, role in [(top, "gate_proj", "gate g"), (low, "up_proj", "up u")]:
        diagram.arrow(ax, (17, y), (21.5, y))
        diagram.box(ax, 22, y - 4, 20, 8, f"{name}\n{d} → {width}", "ffn")
        diagram.note(ax, 32, y + 7, f"{role}: {wide}", ha="center")
    diagram.arrow(ax, (42.4, top), (50.5, top))
    diagram.box(ax, 51, top - 4, 14, 8, "SiLU\nz·σ(z)" if act == "silu" else act,
                colour="#fff1e3")
    x_mul = 73
    diagram.line(ax, [(65.4, top), (x_mul, top)])
    diagram.arrow(ax, (x_mul, top), (x_mul, mid + 2.2))
    diagram.line(ax, [(42.4, low), (x_mul, low)])
    diagram.arrow(ax, (x_mul, low), (x_mul, mid - 2.2))
    diagram.node(ax, x_mul, mid, "×")
    diagram.note(ax, x_mul - 3, mid, f"h = SiLU(g) ⊙ u\n{wide}", ha="right")
    diagram.arrow(ax, (x_mul + 2.2, mid), (78.5, mid))
    diagram.box(ax, 79, mid - 4, 20, 8, f"down_proj\n{width} → {d}", "ffn")
    diagram.shape(ax, 89, mid - 8.5, f"out {narrow}", ha="center")
    params = 3 * d * width
    rule = width_rule(d)["width"] == width
    origin = f"{width} = ⌈{d}·π / 64⌉ · 64" if rule else f"{width}: set in the config"
    diagram.note(ax, 50, 1.5, f"width {origin};  three {d} × {width} weights, no biases: "
                 f"{params:,} per layer", ha="center")


# --- activations ---------------------------------------------------------------------------------------------

def activation_curves(x: torch.Tensor, names=("relu", "gelu", "silu")) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{name: (f(x), f'(x))} for activations from transformers' ACT2FN, the registry FeedForward uses.

    The derivative comes from autograd on the same function, not from a formula.
    """
    curves = {}
    for name in names:
        xs = x.detach().clone().requires_grad_(True)
        y = ACT2FN[name](xs)
        (dy,) = torch.autograd.grad(y.sum(), xs)
        curves[name] = (y.detach(), dy.detach())
    return curves


# --- widths, parameters and FLOPs ----------------------------------------------------------------------------

def llama_width(hidden_size: int, multiple_of: int = 64) -> int:
    """The 8/3 rule (LLaMA, and older MiniMind code): int(8·d/3), rounded up to a multiple of `multiple_of`."""
    width = int(hidden_size * 8 / 3)
    return multiple_of * math.ceil(width / multiple_of)


def ffn_kinds(config) -> dict[str, torch.nn.Module]:
    """Four feed-forward networks for one config, built from the package's own modules (random weights).

    MiniMind's SwiGLU (its config's width), SwiGLU at the 8/3 rule, the classic 4x GELU MLP, and a GELU MLP of
    MiniMind's parameter count (`variants.gelu_width`).
    """
    d, width = config.hidden_size, config.intermediate_size
    return {
        f"SwiGLU, MiniMind ({width})": FeedForward(config, width),
        f"SwiGLU, 8/3 rule ({llama_width(d)})": FeedForward(config, llama_width(d)),
        f"GELU MLP, 4x ({4 * d})": GELUFeedForward(config, 4 * d),
        f"GELU MLP, equal parameters ({gelu_width(width)})": GELUFeedForward(config, gelu_width(width)),
    }


def matmul_flops_per_token(module: torch.nn.Module, hidden_size: int, tokens: int = 4) -> float:
    """Floating-point operations of a position-wise module per token, counted by torch's FlopCounterMode.

    FlopCounterMode counts matrix products only (2 per multiply-add); the element-wise activation and product
    (a handful per hidden unit) are left out.
    """
    x = torch.zeros(1, tokens, hidden_size, device=next(module.parameters()).device)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(x)
    return counter.get_total_flops() / tokens


def flops_per_token_by_part(model, seq_len: int) -> dict[str, float]:
    """Forward FLOPs per token of a dense MiniMind at one sequence length, split into the model's parts.

    Counted by FlopCounterMode on a copy of the architecture on the meta device (shapes only, no arithmetic),
    over the blocks and the LM head. Attention scores (QKᵀ and the weighted sum of V) are counted for the full
    S x S square, as the math kernel computes them; a causal flash kernel skips about half.
    """
    config = model.config
    meta = model
    if not next(model.parameters()).is_meta:  # a copy on the meta device: no arithmetic
        with torch.device("meta"):
            meta = type(model)(config)
    hidden = torch.zeros(1, seq_len, config.hidden_size, device="meta")
    positions = (meta.model.freqs_cos[:seq_len], meta.model.freqs_sin[:seq_len])
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        for layer in meta.model.layers:
            hidden = layer(hidden, positions)[0]
        meta.lm_head(meta.model.norm(hidden))
    counts = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    projections = sum(counts.get(f"MiniMindBlock.self_attn.{p}_proj", 0) for p in "qkvo")
    parts = {
        "feed-forward": counts.get("MiniMindBlock.mlp", 0),
        "attention projections": projections,
        "attention scores": counts.get("MiniMindBlock.self_attn", 0) - projections,
        "LM head": counts.get("Linear", 0),
    }
    return {name: flops / seq_len for name, flops in parts.items()}


# --- inside the trained feed-forward networks ----------------------------------------------------------------

@contextmanager
def record_ffn(model):
    """Per layer, the two branches of each FeedForward: {"gate": gate_proj(x), "up": up_proj(x)}, [B, S, I] each.

    with record_ffn(model) as ffn: model(ids) -> ffn[layer]["gate"] is the gate *before* the activation.
    Forward hooks on the two projections keep their outputs (nothing is recomputed).
    """
    recorded, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        recorded[i] = {}
        for branch in ("gate", "up"):
            def keep(linear, args, output, i=i, branch=branch):
                recorded[i][branch] = output.detach()
            handles.append(getattr(layer.mlp, f"{branch}_proj").register_forward_hook(keep))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def ffn_removed(model, layers):
    """Inside the `with` block, the feed-forward networks of the listed layers add nothing to the residual stream.

    A forward hook replaces each listed FFN's output by zeros; the weights are untouched and the hooks are removed
    when the block ends.
    """
    handles = [model.model.layers[i].mlp.register_forward_hook(lambda mlp, args, out: torch.zeros_like(out))
               for i in layers]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def ffn_ablation_losses(model, ids: torch.Tensor, subsets) -> dict[tuple, float]:
    """Next-token loss of `ids` [B, S] (one batch) with the FFNs of each subset of
    layers removed (chapter 5): {sorted tuple of layers: loss}.

    The same as `mean_loss` inside `ffn_removed` for each subset, but the blocks that
    several subsets share (the same FFNs removed so far) run once, and a removed FFN is
    not computed.
    """
    body = model.model
    positions = (body.freqs_cos[:ids.shape[1]], body.freqs_sin[:ids.shape[1]])
    n_layers = len(body.layers)
    wanted = {tuple(sorted(s)): tuple(i in s for i in range(n_layers)) for s in subsets}
    states = {(): body.embed_tokens(ids)}  # removed or not, layers so far -> [B, S, d]
    for i, layer in enumerate(body.layers):
        after_attention, nxt = {}, {}
        for flags in {f[:i + 1] for f in wanted.values()}:
            x = states[flags[:-1]]
            if flags[:-1] not in after_attention:  # the block's order: attn + residual
                normed = layer.input_layernorm(x)
                after_attention[flags[:-1]] = layer.self_attn(normed, positions)[0] + x
            h = after_attention[flags[:-1]]  # [B, S, d]
            if flags[-1]:  # removed: the FFN adds nothing
                nxt[flags] = h
            else:
                out = layer.mlp(layer.post_attention_layernorm(h))
                nxt[flags] = h + (out[0] if isinstance(out, tuple) else out)
        states = nxt
    logits = {key: model.lm_head(body.norm(states[flags]))  # [B, S, V]
              for key, flags in wanted.items()}
    return {key: shifted_cross_entropy(z, ids).item() for key, z in logits.items()}


def sign_consistency(silu_gate: torch.Tensor, up: torch.Tensor, open_above: float = 1.0,
                     min_open: int = 20) -> torch.Tensor:
    """Per hidden unit, the share of its open tokens (SiLU(g) > open_above) on which
    h = SiLU(g)·u has the unit's more common sign (chapter 5): [I] in [0.5, 1].

    silu_gate, up: [N, I]. NaN for units open fewer than `min_open` times; 1.0 means the
    unit always writes its down_proj column with one sign.
    """
    opened = silu_gate > open_above  # [N, I]
    n_open = opened.sum(0)  # [I]
    negative = (opened & (up < 0)).sum(0)  # [I]; SiLU(g) > 0 where open: h has u's sign
    majority = torch.maximum(negative, n_open - negative) / n_open.clamp(min=1)
    return torch.where(n_open >= min_open, majority, torch.nan)


def keep_largest(hidden: torch.Tensor, k: int) -> torch.Tensor:
    """Per token, the k hidden units of largest magnitude kept and the others set to 0 (chapter 5, Ex. 6).

    By magnitude: a unit at SiLU's floor times a large up value writes as much as an open one.
    """
    index = hidden.abs().topk(k, dim=-1).indices  # [..., k]
    return torch.zeros_like(hidden).scatter(-1, index, hidden.gather(-1, index))  # [..., I]


@contextmanager
def hidden_kept(model, k: int):
    """Inside the `with` block every FFN's down_proj reads only the k largest hidden units of each token."""
    handles = [layer.mlp.down_proj.register_forward_pre_hook(lambda m, args: (keep_largest(args[0], k),))
               for layer in model.model.layers]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def near_zero_share(values: torch.Tensor, relative: float = 0.1) -> float:
    """Share of entries whose magnitude is below `relative` x the root-mean-square of all entries.

    Scale-free, so a trained layer and an untrained one (whose activations are ten times smaller) compare fairly.
    """
    values = values.float()
    threshold = relative * values.pow(2).mean().sqrt()
    return (values.abs() < threshold).float().mean().item()


def top_activations(acts: torch.Tensor, unit: int, k: int = 8):
    """The k largest values of one hidden unit over all tokens, and their positions: acts is [N, I]."""
    values, positions = acts[:, unit].topk(k)
    return values, positions


def top_token_purity(acts: torch.Tensor, token_ids: torch.Tensor, k: int = 20) -> torch.Tensor:
    """Per hidden unit, the share of its k top-activating tokens that are its most common token: [I] in (0, 1].

    1.0 means the unit's k strongest activations all fall on one token id (a "token detector").
    """
    top_ids = token_ids[acts.topk(k, dim=0).indices]  # [k, I]
    return torch.tensor([Counter(column.tolist()).most_common(1)[0][1] / k for column in top_ids.T])


def token_pieces(tokenizer, ids) -> list:
    """Each token as its raw UTF-8 bytes (byte-level BPE may split one character over two tokens), or as its
    text for special tokens such as <|im_start|>."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    to_byte = {ch: b for b, ch in bytes_to_unicode().items()}
    special = set(tokenizer.all_special_ids)
    pieces = []
    for token_id, token in zip(ids, tokenizer.convert_ids_to_tokens(list(ids))):
        pieces.append(token if token_id in special else bytes(to_byte[ch] for ch in token))
    return pieces


def line_positions(pieces: list) -> tuple[list[int], list[int]]:
    """For each token (from `token_pieces`): its character position in its line, and that line's length.

    Position counts the characters of the line up to and including the token (1 for the first character), by
    UTF-8 lead bytes, so a character split over two tokens counts once, at the token holding its first byte. A
    line ends at punctuation (，。？！；：、) or a newline, which gets position 0 and the length of the line it
    closes; special tokens (<|im_start|>, <|im_end|>) get (0, 0) and also end a line.
    """
    positions, lengths, line, count = [], [], [], 0  # `line`: indices of the tokens of the open line

    def close(length):
        for i in line:
            lengths[i] = length
        line.clear()

    for piece in pieces:
        if isinstance(piece, str):  # a special token
            close(count)
            positions.append(0), lengths.append(0)
            count = 0
        elif piece.decode("utf-8", errors="ignore") in BREAKS:
            close(count)
            positions.append(0), lengths.append(count)
            count = 0
        else:
            count += sum(1 for byte in piece if byte & 0xC0 != 0x80)
            line.append(len(positions))
            positions.append(count), lengths.append(0)
    close(count)
    return positions, lengths


def mean_by_line_position(values: torch.Tensor, positions, lengths, line_length: int) -> torch.Tensor:
    """Mean of `values` [N] over the tokens at character position 1..line_length of lines of that length: [L].

    NaN where no token sits at a position (a two-character token covers two positions but is counted at its last).
    """
    positions, lengths = torch.as_tensor(positions), torch.as_tensor(lengths)
    means = []
    for p in range(1, line_length + 1):
        chosen = (positions == p) & (lengths == line_length)
        means.append(values[chosen].float().mean() if chosen.any() else torch.tensor(float("nan")))
    return torch.stack(means)


# --- the gate widget, drawn for each edition (issue #23) ------------------------------

GATE_ZH = {  # English -> Chinese: gate_figure's x label, title, colour bar, in this order
    "hidden unit: the {} most active, by the token that opens it most":
        "隐藏单元：最活跃的 {} 个，按使其打开得最大的 token 排序",
    "{}, layer {}: SiLU(gate) per token and unit":
        "{}，第 {} 层：每个 token、每个单元的 SiLU(gate)",
    "SiLU(gate) (clipped at {:g})": "SiLU(gate)（截断于 {:g}）",
}


def gate_figure(silu, units, tokenizer, ids, layer, glosses=None, zh=False, vmax=6.0,
                model="poetry-dense"):
    """SiLU(gate) [tokens, I] of one layer for the chosen `units` (columns, in order),
    a row per token of `ids`, glossed by `glosses` ({"床": "bed"}): chapter 5's gate
    widget. Blue below 0 (SiLU's floor), white at 0, red open, clipped at vmax. zh: the
    Chinese edition's (issue #23): no glosses, Chinese titles (GATE_ZH)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from .viz import token_labels
    xlabel, title, bar_label = (GATE_ZH[k] if zh else k for k in GATE_ZH)
    rows = token_labels(tokenizer, ids, None if zh else glosses)
    fig, ax = plt.subplots(figsize=(7.5, 5.4))
    colours = TwoSlopeNorm(vmin=-0.3, vcenter=0, vmax=vmax)  # 0 white, the floor blue
    image = ax.imshow(silu[:, units].numpy(), cmap="RdBu_r", norm=colours,
                      aspect="auto")
    ax.set_yticks(range(len(rows)), rows, fontsize=9)
    ax.set_xticks(range(len(units)), [str(u) for u in units.tolist()], fontsize=9,
                  rotation=90)  # every column named: a stripe is read off its own label
    ax.set(xlabel=xlabel.format(len(units)), title=title.format(model, layer))
    bar = fig.colorbar(image, ax=ax, label=bar_label.format(vmax), shrink=0.8)
    bar.set_ticks([-0.278, 0, 2, 4, 6], labels=["−0.278", "0", "2", "4", "6"])
    return fig
