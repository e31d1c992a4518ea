"""SwiGLU feed-forward network: down(silu(gate(x)) * up(x)) (chapter 5)."""
from torch import nn
from transformers.activations import ACT2FN


class FeedForward(nn.Module):
    """Position-wise MLP with a gated activation; hidden -> intermediate -> hidden."""

    def __init__(self, config, intermediate_size=None):
        super().__init__()
        intermediate_size = intermediate_size or config.intermediate_size
        self.gate_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x):
        return self.dropout(self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)))
