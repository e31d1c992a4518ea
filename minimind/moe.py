"""Mixture of experts: a router sends each token to its top-k SwiGLU experts (chapter 6)."""
import torch
import torch.nn.functional as F
from torch import nn

from .feed_forward import FeedForward


class MOEFeedForward(nn.Module):
    """Drop-in replacement for FeedForward with `num_experts` experts and a linear router `gate`."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(
            [FeedForward(config, intermediate_size=config.moe_intermediate_size) for _ in range(config.num_experts)])

    def forward(self, x):
        """x [B, S, hidden] -> (y [B, S, hidden], router_logits [B * S, E])."""
        batch_size, seq_len, hidden_dim = x.shape
        x_flat = x.view(-1, hidden_dim)  # [N, hidden], N = B * S
        router_logits = self.gate(x_flat)  # [N, E]
        topk_weight, topk_idx = self.route(router_logits)  # [N, k] each
        y = torch.zeros_like(x_flat)
        for i, expert in enumerate(self.experts):
            mask = topk_idx == i  # [N, k]
            if mask.any():
                token_idx = mask.any(dim=-1).nonzero().flatten()
                weight = topk_weight[mask].view(-1, 1)
                y.index_add_(0, token_idx, (expert(x_flat[token_idx]) * weight).to(y.dtype))
            elif self.training:  # keep an unused expert in the graph so DDP sees a gradient for it
                y[0, 0] += 0 * sum(p.sum() for p in expert.parameters())
        return y.view(batch_size, seq_len, hidden_dim), router_logits

    def route(self, router_logits):
        """Router logits [N, E] -> (weights [N, k], expert ids [N, k]), as in Qwen3-MoE.

        Softmax, top-k and renormalising in float32 even in bf16, then cast back.
        """
        scores = router_probabilities(router_logits)  # [N, E]
        k = self.config.num_experts_per_tok
        topk_weight, topk_idx = torch.topk(scores, k=k, dim=-1)  # [N, k]
        if self.config.norm_topk_prob:  # the sum is at least 1 / E: no epsilon needed
            topk_weight = topk_weight / topk_weight.sum(dim=-1, keepdim=True)
        return topk_weight.to(router_logits.dtype), topk_idx


def router_probabilities(router_logits):
    """Softmax over the experts [N, E], in float32 at least (float64 stays float64), as in
    Qwen3-MoE: in bf16, nearly tied experts would be chosen by rounding."""
    dtype = torch.promote_types(router_logits.dtype, torch.float32)
    return F.softmax(router_logits, dim=-1, dtype=dtype)


def load_balancing_loss(router_logits, num_experts: int, top_k: int):
    """E * sum_i(load_i * mean_prob_i) for one layer's router logits [N, E]: k when tokens spread evenly (top-k)."""
    scores = router_probabilities(router_logits)  # [N, E]
    topk_idx = torch.topk(scores, k=top_k, dim=-1, sorted=False).indices  # [N, k]
    load = F.one_hot(topk_idx, num_experts).float().mean(0)  # [k, E] share of tokens per expert and slot
    return (load * scores.mean(0)).sum() * num_experts
