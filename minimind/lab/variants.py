"""The model variants the chapters compare with MiniMind, each the real model with the smallest change.

- `gelu_mlp_model`: every SwiGLU feed-forward (and every MoE expert) replaced by a plain two-matrix MLP
  up -> GELU -> down, widened to the same parameter count (chapter 5);
- `post_norm_model`: every block in the original Transformer's Post-Norm order, x = norm(x + sublayer(x))
  (chapter 7);
- `untied_model`: a separate lm_head matrix instead of the one shared with the embedding (chapter 8).

The MoE variants of chapter 6 need no code: `router_aux_loss_coef`, `num_experts_per_tok` and `norm_topk_prob`
are config options of `MiniMindConfig`.

Every builder starts from `MiniMindForCausalLM(config)`, so with the same `torch.manual_seed` the weights the
variant shares with MiniMind start identical.
"""
import copy

from torch import nn
from transformers.activations import ACT2FN

from ..block import MiniMindBlock
from ..model import MiniMindForCausalLM


class GELUFeedForward(nn.Module):
    """The classic Transformer MLP: down(gelu(up(x))), two matrices of hidden x intermediate_size."""

    def __init__(self, config, intermediate_size):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        self.act_fn = ACT2FN["gelu"]

    def forward(self, x):
        return self.dropout(self.down_proj(self.act_fn(self.up_proj(x))))


def gelu_width(swiglu_intermediate_size: int, multiple_of: int = 64) -> int:
    """Width of a GELU MLP with as many parameters as a SwiGLU one: 3·d·i = 2·d·i' gives i' = 1.5·i,
    rounded to the nearest multiple of `multiple_of`; exact when 1.5·i is a multiple (2432 -> 3648, 384 -> 576)."""
    return max(multiple_of, round(1.5 * swiglu_intermediate_size / multiple_of) * multiple_of)


def gelu_mlp_model(config, multiple_of: int = 64) -> MiniMindForCausalLM:
    """MiniMind with every SwiGLU feed-forward (or MoE expert) swapped for a GELU MLP of equal parameter count.

    768 hidden: SwiGLU 3·768·2432 = 5,603,328 parameters per block, GELU 2·768·3648 = 5,603,328 (exact).
    The new matrices are initialised like the rest of the model (transformers' normal, std 0.02).
    """
    model = MiniMindForCausalLM(config)
    for block in model.model.layers:
        if config.use_moe:
            experts = block.mlp.experts
            for j in range(len(experts)):
                experts[j] = GELUFeedForward(config, gelu_width(config.moe_intermediate_size, multiple_of))
        else:
            block.mlp = GELUFeedForward(config, gelu_width(config.intermediate_size, multiple_of))
    for module in model.modules():
        if isinstance(module, GELUFeedForward):
            model._init_weights(module.up_proj), model._init_weights(module.down_proj)
    return model


class PostNormBlock(MiniMindBlock):
    """Post-Norm order (Vaswani et al. 2017): h = norm1(x + attn(x)); out = norm2(h + mlp(h)).

    Same modules and parameter names as MiniMindBlock: `input_layernorm` is applied after the attention's
    residual sum, `post_attention_layernorm` after the MLP's. Every layer's output is normalised, so the
    residual stream no longer carries an un-normalised sum from layer to layer.
    """

    def forward(self, hidden_states, position_embeddings, past_key_value=None, use_cache=False,
                attention_mask=None, output_attentions=False):
        attn_output, present_key_value, attention_probs = self.self_attn(
            hidden_states, position_embeddings, past_key_value, use_cache, attention_mask, output_attentions)
        hidden_states = self.input_layernorm(hidden_states + attn_output)
        mlp_output = self.mlp(hidden_states)
        mlp_output, router_logits = mlp_output if isinstance(mlp_output, tuple) else (mlp_output, None)
        hidden_states = self.post_attention_layernorm(hidden_states + mlp_output)
        return hidden_states, present_key_value, attention_probs, router_logits


def post_norm_model(config) -> MiniMindForCausalLM:
    """MiniMind with every block in Post-Norm order, starting from the same weights as MiniMind's Pre-Norm.

    The final norm is removed (`model.model.norm` becomes an Identity), as in the original Transformer: the last
    block already ends in a norm, and a second RMSNorm right after it would only rescale by a second gain.
    So the variant has `hidden_size` fewer parameters and no `model.norm.weight`; all other names are unchanged.
    """
    model = MiniMindForCausalLM(config)
    layers = model.model.layers
    for i, block in enumerate(layers):
        post = PostNormBlock(i, config).to(block.input_layernorm.weight.device)
        post.load_state_dict(block.state_dict())
        layers[i] = post
    model.model.norm = nn.Identity()
    return model


def untied_model(config) -> MiniMindForCausalLM:
    """MiniMind with `tie_word_embeddings=False`: lm_head.weight is its own Parameter, vocab·hidden more weights."""
    config = copy.deepcopy(config)
    config.tie_word_embeddings = False
    return MiniMindForCausalLM(config)


def ffn_parameters(model) -> int:
    """Parameters in the feed-forward networks of all blocks (experts included, routers excluded)."""
    return sum(p.numel() for name, p in model.named_parameters()
               if ".mlp." in name and not name.endswith("mlp.gate.weight"))
