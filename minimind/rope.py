"""Rotary position embedding (RoPE) and its YaRN extension for long contexts (chapter 3)."""
import math

import torch


def rope_frequencies(dim: int, rope_base: float = 1e6):
    """theta_i = base^(-2i/dim) for i = 0 .. dim/2 - 1: one angular speed per pair of dimensions."""
    return 1.0 / (rope_base ** (torch.arange(0, dim, 2).float() / dim))


def yarn_frequencies(dim: int, rope_base: float, end: int, rope_scaling: dict):
    """YaRN's frequencies and attention factor: slow pairs are divided by `factor`, fast ones kept.

    The mix is freqs * (1 - ramp + ramp / factor), written in transformers' order of operations
    (keep = 1 - ramp, then 1 - keep) so that an exported Qwen3 model gets bit-identical tables.
    """
    freqs = rope_frequencies(dim, rope_base)
    orig_max, factor = rope_scaling["original_max_position_embeddings"], rope_scaling["factor"]
    if end / orig_max > 1.0:
        keep = 1 - yarn_ramp(dim, rope_base, orig_max, rope_scaling["beta_fast"], rope_scaling["beta_slow"])
        divided = 1.0 / (factor * rope_base ** (torch.arange(0, dim, 2).float() / dim))  # freqs / factor
        freqs = divided * (1 - keep) + freqs * keep  # [dim/2]
    return freqs, rope_scaling.get("attention_factor", 1.0)


def yarn_ramp(dim: int, rope_base: float, original_max: int, beta_fast: float, beta_slow: float):
    """0 for pairs that keep their frequency, 1 for pairs divided by `factor`, linear in between.

    A pair that turns more than `beta_fast` times over the original context is left alone;
    one that turns fewer than `beta_slow` times is fully interpolated.
    """
    def pair_index(turns):  # which pair completes `turns` rotations over `original_max` positions
        return dim * math.log(original_max / (turns * 2 * math.pi)) / (2 * math.log(rope_base))

    low = max(math.floor(pair_index(beta_fast)), 0)
    high = min(math.ceil(pair_index(beta_slow)), dim // 2 - 1)
    return torch.clamp((torch.arange(dim // 2).float() - low) / max(high - low, 0.001), 0, 1)


def precompute_freqs_cis(dim: int, end: int = 32 * 1024, rope_base: float = 1e6, rope_scaling: dict | None = None):
    """cos and sin tables, each [end, dim], in the rotate-half layout (the 48 angles repeated twice)."""
    if rope_scaling is None:
        freqs, attn_factor = rope_frequencies(dim, rope_base), 1.0
    else:
        freqs, attn_factor = yarn_frequencies(dim, rope_base, end, rope_scaling)
    angles = torch.outer(torch.arange(end).float(), freqs)  # [end, dim/2]
    freqs_cos = torch.cat([torch.cos(angles), torch.cos(angles)], dim=-1) * attn_factor  # [end, dim]
    freqs_sin = torch.cat([torch.sin(angles), torch.sin(angles)], dim=-1) * attn_factor
    return freqs_cos, freqs_sin


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] on the last dimension: pairs (i, i + dim/2) turned by 90 degrees."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Rotate queries and keys [B, S, H, D] by their positions' angles; cos/sin are [S, D]."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)  # [S, 1, D] broadcasts over heads
    q_embed = q * cos + rotate_half(q) * sin
    k_embed = k * cos + rotate_half(k) * sin
    return q_embed.to(q.dtype), k_embed.to(k.dtype)
