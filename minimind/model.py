"""The full model: embedding, a stack of blocks, final norm, tied LM head and shifted loss (chapters 1 and 9)."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from .block import MiniMindBlock
from .config import MiniMindConfig
from .moe import MOEFeedForward
from .norm import RMSNorm
from .rope import precompute_freqs_cis


class MiniMindModel(nn.Module):
    """Token ids [B, S] -> final hidden states [B, S, hidden], the per-layer KV-cache and the MoE aux loss."""

    def __init__(self, config: MiniMindConfig):
        super().__init__()
        self.config = config
        self.vocab_size, self.num_hidden_layers = config.vocab_size, config.num_hidden_layers
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList([MiniMindBlock(i, config) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # Tables of cos/sin for every position: derived from the config, so not saved with the weights.
        self.register_buffer("freqs_cos", torch.empty(0), persistent=False)
        self.register_buffer("freqs_sin", torch.empty(0), persistent=False)
        self.reset_rope_tables()

    @torch.no_grad()
    def reset_rope_tables(self):
        """(Re)compute the RoPE tables on the current device; needed after meta-device loading too."""
        c = self.config
        with torch.device("cpu"):  # computed for real even while transformers builds the model on "meta"
            cos, sin = precompute_freqs_cis(c.head_dim, c.max_position_embeddings, c.rope_theta, c.yarn)
        device = self.embed_tokens.weight.device
        self.freqs_cos, self.freqs_sin = cos.to(device), sin.to(device)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False,
                output_attentions=False, **kwargs):
        batch_size, seq_length = check_input_ids(input_ids, self.vocab_size)
        if hasattr(past_key_values, "layers"):  # a transformers Cache object: MiniMind keeps its own list of tuples
            past_key_values = None
        past_key_values = past_key_values or [None] * self.num_hidden_layers
        start_pos = past_key_values[0][0].shape[1] if past_key_values[0] is not None else 0
        check_positions(start_pos, seq_length, self.config.max_position_embeddings)
        check_attention_mask(attention_mask, batch_size, start_pos + seq_length)
        hidden_states = self.dropout(self.embed_tokens(input_ids))  # [B, S, hidden]
        position_embeddings = (self.freqs_cos[start_pos:start_pos + seq_length],  # [S, head_dim] each
                               self.freqs_sin[start_pos:start_pos + seq_length])
        presents = []
        for layer, past_key_value in zip(self.layers, past_key_values):
            hidden_states, present = layer(hidden_states, position_embeddings, past_key_value, use_cache,
                                           attention_mask, output_attentions)
            presents.append(present)
        hidden_states = self.norm(hidden_states)
        aux_loss = sum((l.mlp.aux_loss for l in self.layers if isinstance(l.mlp, MOEFeedForward)),
                       hidden_states.new_zeros(()))
        return hidden_states, presents, aux_loss


def check_input_ids(input_ids, vocab_size):
    if not torch.is_tensor(input_ids) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if torch.is_tensor(input_ids) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a 2-D tensor [batch, seq_len] of token ids, got {shape}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab_size):
        bad = input_ids[(input_ids < 0) | (input_ids >= vocab_size)].unique()[:5].tolist()
        raise ValueError(f"token ids {bad} are outside the vocabulary [0, {vocab_size})")
    return input_ids.shape


def check_positions(start_pos, seq_length, max_positions):
    if start_pos + seq_length > max_positions:
        raise ValueError(f"sequence reaches position {start_pos + seq_length} ({start_pos} cached + {seq_length} new) "
                         f"but max_position_embeddings is {max_positions}")


def check_attention_mask(attention_mask, batch_size, total_len):
    if attention_mask is not None and tuple(attention_mask.shape) != (batch_size, total_len):
        raise ValueError(f"attention_mask must be [batch, cached + new tokens] = [{batch_size}, {total_len}], "
                         f"got {list(attention_mask.shape)}")


@dataclass
class MiniMindOutput:
    """What a forward pass returns. `past_key_values` is a list of per-layer (k, v), each [B, S, n_kv, head_dim]."""
    logits: torch.Tensor  # [B, S_kept, vocab]
    loss: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
    past_key_values: list | None = None
    hidden_states: torch.Tensor | None = None  # after the final norm, [B, S, hidden]
    attentions: tuple | None = None  # per layer [B, H, S, S_kv], with output_attentions=True


class MiniMindForCausalLM(PreTrainedModel, GenerationMixin):
    """MiniMindModel plus a language-model head tied to the embedding; computes the next-token loss."""
    config_class = MiniMindConfig
    base_model_prefix = "model"
    _no_split_modules = ["MiniMindBlock"]
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MiniMindConfig = None):
        self.config = config or MiniMindConfig()
        super().__init__(self.config)
        self.model = MiniMindModel(self.config)
        self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False)
        if self.config.tie_word_embeddings:
            self.model.embed_tokens.weight = self.lm_head.weight  # one Parameter for both ends
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, MiniMindModel):
            module.reset_rope_tables()
        else:
            super()._init_weights(module)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False, logits_to_keep=0,
                labels=None, output_attentions=False, **kwargs):
        hidden_states, past_key_values, aux_loss = self.model(
            input_ids, attention_mask, past_key_values, use_cache, output_attentions)
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, slice_indices, :])  # [B, S_kept, vocab]
        loss = None if labels is None else shifted_cross_entropy(logits, labels)
        attentions = tuple(l.self_attn.attention_probs for l in self.model.layers) if output_attentions else None
        return MiniMindOutput(logits=logits, loss=loss, aux_loss=aux_loss, past_key_values=past_key_values,
                              hidden_states=hidden_states, attentions=attentions)

    def generate(self, inputs=None, **kwargs):
        """Sample or greedily extend `inputs` [B, S]; see minimind.generate.generate (chapter 10)."""
        from .generate import generate
        return generate(self, kwargs.pop("input_ids", inputs), **kwargs)  # transformers callers name it input_ids


def shifted_cross_entropy(logits, labels, ignore_index=-100, reduction="mean"):
    """Position t predicts token t+1: compare logits[:, :-1] with labels[:, 1:], skipping ignore_index.

    reduction="none" keeps one loss per predicted token, [B, S - 1].
    """
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels {list(labels.shape)} must match logits' [batch, seq_len] {list(logits.shape[:2])}")
    x, y = logits[..., :-1, :].contiguous(), labels[..., 1:].contiguous()
    loss = F.cross_entropy(x.view(-1, x.size(-1)), y.view(-1), ignore_index=ignore_index, reduction=reduction)
    return loss.view(y.shape) if reduction == "none" else loss


AutoConfig.register("minimind", MiniMindConfig, exist_ok=True)
AutoModelForCausalLM.register(MiniMindConfig, MiniMindForCausalLM, exist_ok=True)
