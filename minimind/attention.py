"""Grouped-query attention with QK-Norm, RoPE, a causal mask and a KV-cache (chapter 4)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .norm import RMSNorm
from .rope import apply_rotary_pos_emb


def repeat_kv(x, n_rep: int):
    """[B, S, n_kv, D] -> [B, S, n_kv * n_rep, D]: each KV head serves n_rep query heads."""
    bsz, seq_len, n_kv, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bsz, seq_len, n_kv, n_rep, head_dim).reshape(bsz, seq_len, n_kv * n_rep, head_dim)


def causal_mask(q_len: int, kv_len: int, attention_mask=None, device=None):
    """Boolean [B or 1, 1, q_len, kv_len], True where a query may look.

    Queries are the last q_len of kv_len positions (the first kv_len - q_len come from the cache).
    `attention_mask` [B, kv_len] marks real tokens with 1 and padding with 0.
    """
    q_pos = torch.arange(kv_len - q_len, kv_len, device=device)
    k_pos = torch.arange(kv_len, device=device)
    allowed = (k_pos[None, :] <= q_pos[:, None])[None, None]  # [1, 1, q_len, kv_len]
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, None, :].bool()
        # A padding query that may see nothing would give NaN; let it see everything (its output is ignored).
        allowed = allowed | ~allowed.any(-1, keepdim=True)
    return allowed


class Attention(nn.Module):
    """Multi-head self-attention where groups of query heads share key/value heads (GQA)."""

    def __init__(self, config):
        super().__init__()
        self.n_local_heads = config.num_attention_heads
        self.n_local_kv_heads = config.num_key_value_heads
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.n_local_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.n_local_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.n_local_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_local_heads * self.head_dim, config.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout
        self.flash = config.flash_attn  # fused scaled_dot_product_attention; False -> explicit softmax(QK^T)V

    def forward(self, x, position_embeddings, past_key_value=None, use_cache=False, attention_mask=None,
                output_attentions=False):
        """x [B, S, hidden] -> (output [B, S, hidden], present (k, v) or None, probs [B, H, S, S_kv] or None)."""
        bsz, seq_len, _ = x.shape
        xq = self.q_proj(x).view(bsz, seq_len, self.n_local_heads, self.head_dim)  # [B, S, H, D]
        xk = self.k_proj(x).view(bsz, seq_len, self.n_local_kv_heads, self.head_dim)  # [B, S, n_kv, D]
        xv = self.v_proj(x).view(bsz, seq_len, self.n_local_kv_heads, self.head_dim)
        xq, xk = self.q_norm(xq), self.k_norm(xk)
        cos, sin = position_embeddings  # [S, D], or [B, S, D] from position_ids
        xq, xk = apply_rotary_pos_emb(xq, xk, cos, sin, unsqueeze_dim=cos.dim() - 1)
        # region cache
        if past_key_value is not None:  # append this step's keys/values to the cached ones
            xk = torch.cat([past_key_value[0], xk], dim=1)  # [B, S_past + S, n_kv, D]
            xv = torch.cat([past_key_value[1], xv], dim=1)
        present = (xk, xv) if use_cache else None
        # endregion
        xq = xq.transpose(1, 2)  # [B, H, S, D]
        if self.flash and not output_attentions:  # the kernel shares KV heads: no copy
            xk, xv = xk.transpose(1, 2), xv.transpose(1, 2)  # [B, n_kv, S_kv, D]
            output, probs = self.fused_attention(xq, xk, xv, attention_mask), None
        else:
            xk = repeat_kv(xk, self.n_rep).transpose(1, 2)  # [B, H, S_kv, D]
            xv = repeat_kv(xv, self.n_rep).transpose(1, 2)
            output, probs = self.explicit_attention(xq, xk, xv, attention_mask)
        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)  # [B, S, H * D]
        return self.resid_dropout(self.o_proj(output)), present, probs

    def fused_attention(self, xq, xk, xv, attention_mask):
        """torch's scaled_dot_product_attention; a mask is built only when is_causal cannot express it.

        K/V may have fewer heads than Q ([B, n_kv, S_kv, D]): with enable_gqa the kernel
        reads each KV head for its group of query heads, where repeat_kv copies it.
        """
        q_len, kv_len = xq.shape[2], xk.shape[2]
        no_padding = attention_mask is None or bool(attention_mask.all())
        plain_causal = no_padding and (q_len == 1 or q_len == kv_len)
        mask = None if plain_causal else causal_mask(q_len, kv_len, attention_mask, xq.device)
        return F.scaled_dot_product_attention(
            xq, xk, xv, attn_mask=mask, is_causal=plain_causal and q_len > 1,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=xk.shape[1] != xq.shape[1])

    def explicit_attention(self, xq, xk, xv, attention_mask):
        """softmax(Q K^T / sqrt(D)) V written out; returns (output [B, H, S, D], probs [B, H, S, S_kv])."""
        scores = xq @ xk.transpose(-2, -1) / math.sqrt(self.head_dim)  # [B, H, S, S_kv]
        mask = causal_mask(xq.shape[2], xk.shape[2], attention_mask, xq.device)
        probs = F.softmax(scores.masked_fill(~mask, float("-inf")).float(), dim=-1).type_as(xq)
        return self.attn_dropout(probs) @ xv, probs
