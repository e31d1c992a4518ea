"""Mixture of experts: a router sends each token to its top-k SwiGLU experts (chapter 7)."""
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
        self.aux_loss = None

    def forward(self, x):
        batch_size, seq_len, hidden_dim = x.shape
        x_flat = x.view(-1, hidden_dim)  # [N, hidden], N = B * S
        scores = F.softmax(self.gate(x_flat), dim=-1)  # [N, E] router probabilities
        topk_weight, topk_idx = torch.topk(scores, k=self.config.num_experts_per_tok, dim=-1, sorted=False)  # [N, k]
        if self.config.norm_topk_prob:
            topk_weight = topk_weight / (topk_weight.sum(dim=-1, keepdim=True) + 1e-20)
        y = torch.zeros_like(x_flat)
        for i, expert in enumerate(self.experts):
            mask = topk_idx == i  # [N, k]
            if mask.any():
                token_idx = mask.any(dim=-1).nonzero().flatten()
                weight = topk_weight[mask].view(-1, 1)
                y.index_add_(0, token_idx, (expert(x_flat[token_idx]) * weight).to(y.dtype))
            elif self.training:  # keep an unused expert in the graph so DDP sees a gradient for it
                y[0, 0] += 0 * sum(p.sum() for p in expert.parameters())
        self.aux_loss = self.load_balancing_loss(scores, topk_idx)
        return y.view(batch_size, seq_len, hidden_dim)

    def load_balancing_loss(self, scores, topk_idx):
        """E * sum_i(load_i * mean_prob_i) * coef: smallest when tokens spread evenly (training only)."""
        if not (self.training and self.config.router_aux_loss_coef > 0):
            return scores.new_zeros(())
        load = F.one_hot(topk_idx, self.config.num_experts).float().mean(0)  # [k, E] share of tokens per expert
        return (load * scores.mean(0)).sum() * self.config.num_experts * self.config.router_aux_loss_coef
