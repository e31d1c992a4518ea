"""One transformer layer: Pre-Norm attention and feed-forward, each added to the residual stream (chapter 7)."""
from torch import nn

from .attention import Attention
from .feed_forward import FeedForward
from .moe import MOEFeedForward
from .norm import RMSNorm


class MiniMindBlock(nn.Module):
    """h = x + attn(norm(x)); out = h + mlp(norm(h)). Shape [B, S, hidden] in and out."""

    def __init__(self, layer_id: int, config):
        super().__init__()
        self.layer_id = layer_id
        self.self_attn = Attention(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = MOEFeedForward(config) if config.use_moe else FeedForward(config)

    def forward(self, hidden_states, position_embeddings, past_key_value=None, use_cache=False,
                attention_mask=None, output_attentions=False):
        """-> (hidden_states, present (k, v) or None, attention probs or None, router logits or None)."""
        residual = hidden_states
        hidden_states, present_key_value, attention_probs = self.self_attn(
            self.input_layernorm(hidden_states), position_embeddings, past_key_value, use_cache, attention_mask,
            output_attentions)
        hidden_states = hidden_states + residual
        mlp_output = self.mlp(self.post_attention_layernorm(hidden_states))
        mlp_output, router_logits = mlp_output if isinstance(mlp_output, tuple) else (mlp_output, None)
        hidden_states = hidden_states + mlp_output
        return hidden_states, present_key_value, attention_probs, router_logits
