"""Chapter 3 helpers: the RoPE pairing diagram and the long-context scalings (PI, NTK-aware, YaRN).

The model only ever uses `minimind.rope`; the tables here are what the chapter hands a trained model
to compare the ways of stretching RoPE beyond the training length.
"""
from __future__ import annotations

import math

import torch

from . import diagram

SCALINGS = ("plain", "PI", "NTK-aware", "YaRN")


def ntk_base(rope_base: float, factor: float, dim: int) -> float:
    """NTK-aware scaling's new base, b · factor^(d / (d - 2)): the slowest pair is slowed by `factor`.

    (bloc97, r/LocalLLaMA 2023; chapter 3.) Pair 0 keeps θ_0 = 1; pair d/2 - 1 turns `factor` times slower.
    """
    return rope_base * factor ** (dim / (dim - 2))


def tables_from_frequencies(freqs: torch.Tensor, end: int, attention_factor: float = 1.0):
    """cos and sin tables [end, 2 · len(freqs)] in the rotate-half layout, as precompute_freqs_cis builds."""
    angles = torch.outer(torch.arange(end).float(), freqs)  # [end, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1) * attention_factor  # [end, d]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1) * attention_factor
    return cos, sin


def scaled_rope_tables(method: str, dim: int, end: int, rope_base: float, factor: float,
                       original: int, attention_factor: float = 1.0, beta_fast=32, beta_slow=1):
    """(cos, sin) [end, dim] for one way of reading `factor` × `original` positions (chapter 3).

    "plain": RoPE as trained. "PI" (Chen et al. 2023): every speed divided by `factor`.
    "NTK-aware": the base raised to `ntk_base`. "YaRN" (Peng et al. 2023): the package's own
    `precompute_freqs_cis` with `rope_scaling`, so this row is exactly what MiniMind runs.
    """
    from ..rope import precompute_freqs_cis, rope_frequencies
    if method == "plain":
        return precompute_freqs_cis(dim, end, rope_base)
    if method == "PI":
        return tables_from_frequencies(rope_frequencies(dim, rope_base) / factor, end)
    if method == "NTK-aware":
        return precompute_freqs_cis(dim, end, ntk_base(rope_base, factor, dim))
    if method == "YaRN":
        scaling = {"original_max_position_embeddings": original, "factor": factor,
                   "beta_fast": beta_fast, "beta_slow": beta_slow,
                   "attention_factor": attention_factor}
        return precompute_freqs_cis(dim, end, rope_base, scaling)
    raise ValueError(f"unknown scaling {method!r}: one of {SCALINGS}")


def speed_scales(dim: int, rope_base: float, factor: float, original: int) -> dict:
    """Per pair, each method's speed divided by plain RoPE's speed [dim/2] (1 = untouched)."""
    from ..rope import rope_frequencies, yarn_frequencies
    plain = rope_frequencies(dim, rope_base)
    scaling = {"original_max_position_embeddings": original, "factor": factor,
               "beta_fast": 32, "beta_slow": 1}
    return {"PI": plain / factor / plain,
            "NTK-aware": rope_frequencies(dim, ntk_base(rope_base, factor, dim)) / plain,
            "YaRN": yarn_frequencies(dim, rope_base, original * factor, scaling)[0] / plain}


@torch.no_grad()
def losses_with_tables(model, input_ids, cos, sin) -> torch.Tensor:
    """token_losses [B, S - 1] of `model` run with other RoPE tables (rows = positions 0, 1, ...).

    The weights are untouched and the model's own tables are put back afterwards.
    """
    from ..loss import token_losses
    inner = model.model
    saved = inner.freqs_cos, inner.freqs_sin
    inner.freqs_cos, inner.freqs_sin = cos.to(model.device), sin.to(model.device)
    try:
        return token_losses(model, input_ids)
    finally:
        inner.freqs_cos, inner.freqs_sin = saved


def band_means(losses: torch.Tensor, bands: dict) -> dict:
    """Mean of token losses [B, S - 1] over position ranges {name: (start, stop)}; NaN entries skipped."""
    return {name: losses[:, start:stop].float().nanmean().item() for name, (start, stop) in bands.items()}


# --- the mechanism diagram ---------------------------------------------------------------------------------

def _pair_colour(i: int, n: int):
    import matplotlib
    return matplotlib.colormaps["viridis"](0.1 + 0.8 * i / max(n - 1, 1))


def _dimension_bar(ax, x, y, w, h, colours):
    """A head vector as a bar of len(colours) cells, one colour per cell (the cell's pair)."""
    from matplotlib.patches import Rectangle
    cell = w / len(colours)
    for j, colour in enumerate(colours):
        ax.add_patch(Rectangle((x + j * cell, y), cell, h, facecolor=colour, edgecolor=colour, lw=0.3))
    ax.add_patch(Rectangle((x, y), w, h, facecolor="none", edgecolor=diagram.INK, lw=0.8))
    return cell


def _link(ax, x0, x1, y, depth, colour):
    """A bracket under a bar joining the cells at x0 and x1 (a pair)."""
    diagram.line(ax, [(x0, y), (x0, y - depth), (x1, y - depth), (x1, y)], colour=colour, lw=1.4)


def pairing_diagram(config):
    """How RoPE turns one head vector of `config` (chapter 3's opening figure).

    Top: the rotate-half pairing, dimension i with i + d/2 (colour = pair), against the adjacent
    pairs of RoFormer / Meta's LLaMA. Bottom: q and k are turned, pair i by m·θ_i; v is not.
    """
    import matplotlib.pyplot as plt
    D, half, base = config.head_dim, config.head_dim // 2, config.rope_theta
    H, H_kv, d = config.num_attention_heads, config.num_key_value_heads, config.hidden_size
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese here; DejaVu has θ · ᵢ
        fig, ax = diagram.canvas(7, 5.4, title=f"RoPE on one head vector: head_dim {D} "
                                               f"= {half} pairs, rope_theta {_power(base)}")
        x0, w, h = 6, 88, 3.2
        # 1. MiniMind's pairing: i with i + half
        diagram.note(ax, x0, 74, f"MiniMind (rotate_half): pair i = dimensions (i, i + {half})",
                     colour=diagram.INK, size=10)
        diagram.note(ax, x0 + w / 4, 70.5, f"first half x₁ = x[0:{half}]", ha="center")
        diagram.note(ax, x0 + 3 * w / 4, 70.5, f"second half x₂ = x[{half}:{D}]", ha="center")
        cell = _dimension_bar(ax, x0, 65, w, h, [_pair_colour(j % half, half) for j in range(D)])
        for i, depth in [(0, 4.5), (half - 1, 2.2)]:
            a, b = x0 + (i + 0.5) * cell, x0 + (i + half + 0.5) * cell
            _link(ax, a, b, 65, depth, _pair_colour(i, half))
            diagram.note(ax, (a + b) / 2, 65 - depth - 1.6, f"pair {i}: dims {i} and {i + half}",
                         ha="center", size=9)
        # 2. the adjacent layout, for contrast
        diagram.note(ax, x0, 51, "RoFormer / Meta LLaMA (not MiniMind): pair i = (2i, 2i + 1)",
                     size=10)
        cell = _dimension_bar(ax, x0, 45, w, h, [_pair_colour(j // 2, half) for j in range(D)])
        for i in (0, half - 1):
            _link(ax, x0 + (2 * i + 0.5) * cell, x0 + (2 * i + 1.5) * cell, 45, 1.6,
                  _pair_colour(i, half))
        diagram.note(ax, x0, 41, "pair 0: dims 0, 1", size=9)
        diagram.note(ax, x0 + w, 41, f"pair {half - 1}: dims {D - 2}, {D - 1}", ha="right", size=9)
        diagram.note(ax, 50, 37, "colour = pair.  Both are valid RoPE, but weights trained with one "
                     "layout\ngive wrong attention under the other.", ha="center", size=9)
        # 3. what is turned: q and k, pair i by m·θ_i; v passes untouched
        diagram.shape(ax, 1, 30.5, f"x [B, S, {d}]")
        diagram.line(ax, [(6, 28.5), (6, 7)])
        rows = [("q_proj", f"q  [B, S, {H}, {D}]", True, 23), ("k_proj", f"k  [B, S, {H_kv}, {D}]",
                True, 15), ("v_proj", f"v  [B, S, {H_kv}, {D}]", False, 7)]
        for name, label, turned, y in rows:
            diagram.arrow(ax, (6, y), (11.5, y))
            diagram.box(ax, 12, y - 2.3, 12, 4.6, name, "attn")
            diagram.arrow(ax, (25, y), (31, y))
            diagram.shape(ax, 32, y, label)
            diagram.arrow(ax, (55, y), (59, y))
            text = "turned: pair i by angle m·θᵢ" if turned else "not turned (no position)"
            diagram.box(ax, 60, y - 2.3, 38, 4.6, text, "norm" if turned else "loss", size=9,
                        ls="-" if turned else "--")
        theta_last = base ** (-2 * (half - 1) / D)
        diagram.note(ax, 50, 1, f"m = position;  θᵢ = {_power(base)}^(−2i/{D}):  θ₀ = 1 rad per token,  "
                     f"θ{_subscript(half - 1)} = {theta_last:.2g} rad per token", ha="center",
                     colour=diagram.INK, size=9.5)
    return fig


def _power(base: float) -> str:
    """10⁶ for 1e6 (a power of ten), else the number as written by :g."""
    exponent = round(math.log10(base))
    return "10" + _superscript(exponent) if 10 ** exponent == base else f"{base:g}"


def _superscript(n: int) -> str:
    return str(n).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))


def _subscript(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
