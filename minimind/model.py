"""The full model: embedding, a stack of blocks, final norm and the tied LM head (chapters 1, 7 and 8)."""
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, Cache, GenerationMixin, PreTrainedModel
from transformers.utils import ModelOutput

from .block import MiniMindBlock
from .checkpoint_checks import check_loading_info, checkpoint_folder, verify_manifest
from .config import MiniMindConfig
from .loss import shifted_cross_entropy
from .moe import load_balancing_loss
from .norm import RMSNorm
from .rope import precompute_freqs_cis


class MiniMindModel(nn.Module):
    """Token ids [B, S] -> final hidden states [B, S, hidden], the per-layer KV-cache, the MoE aux loss."""

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
                output_attentions=False, position_ids=None, output_hidden_states=False,
                **kwargs) -> "MiniMindModelOutput":
        check_known_arguments(kwargs)
        batch_size, seq_length = check_input_ids(input_ids, self.vocab_size)
        hf_cache = past_key_values if isinstance(past_key_values, Cache) else None
        past_key_values = cache_as_tuples(past_key_values, self.num_hidden_layers)
        start_pos = past_key_values[0][0].shape[1] if past_key_values[0] is not None else 0
        max_positions = self.config.max_position_embeddings
        if position_ids is None:
            check_positions(start_pos, seq_length, max_positions)
        else:
            check_position_ids(position_ids, batch_size, seq_length, max_positions)
        check_attention_mask(attention_mask, batch_size, start_pos + seq_length)
        hidden_states = self.dropout(self.embed_tokens(input_ids))  # [B, S, hidden]
        # region positions
        position_embeddings = (self.freqs_cos[start_pos:start_pos + seq_length],  # [S, head_dim] each
                               self.freqs_sin[start_pos:start_pos + seq_length])
        # endregion
        if position_ids is not None:  # each row's own positions, as in transformers
            cos, sin = self.freqs_cos[position_ids], self.freqs_sin[position_ids]
            position_embeddings = (cos, sin)  # [B, S, head_dim] each
        presents, attentions, router_logits = [], [], []
        all_hidden_states = [hidden_states]  # the embeddings, then each block's output
        for layer, past_key_value in zip(self.layers, past_key_values):
            hidden_states, present, probs, layer_router_logits = layer(
                hidden_states, position_embeddings, past_key_value, use_cache or hf_cache is not None,
                attention_mask, output_attentions)
            presents.append(present), attentions.append(probs), router_logits.append(layer_router_logits)
            all_hidden_states.append(hidden_states)
        hidden_states = self.norm(hidden_states)
        all_hidden_states[-1] = hidden_states  # the last one normed, as in transformers
        if hf_cache is not None:  # a transformers cache is updated in place with this step's keys and values
            presents = update_hf_cache(hf_cache, presents, seq_length)
        router_logits = tuple(r for r in router_logits if r is not None)
        aux_loss = self.aux_loss(router_logits, hidden_states)
        if output_hidden_states:  # transformers' tuple instead of the final tensor
            hidden_states = tuple(all_hidden_states)
        return MiniMindModelOutput(
            hidden_states=hidden_states, aux_loss=aux_loss,
            past_key_values=presents if use_cache else None,
            attentions=tuple(attentions) if output_attentions else None,
            router_logits=router_logits or None)

    def aux_loss(self, router_logits, like):
        """The MoE load-balancing loss, summed over layers and scaled by router_aux_loss_coef (training only)."""
        c = self.config
        if not (router_logits and self.training and c.router_aux_loss_coef > 0):
            return like.new_zeros(())
        return c.router_aux_loss_coef * sum(
            load_balancing_loss(r, c.num_experts, c.num_experts_per_tok) for r in router_logits)


def cache_as_tuples(past_key_values, num_layers):
    """MiniMind's per-layer list of (k, v) [B, S, n_kv, D], from that list, None or a transformers Cache."""
    if past_key_values is None:
        return [None] * num_layers
    if isinstance(past_key_values, Cache):
        if past_key_values.get_seq_length() == 0:
            return [None] * num_layers
        # transformers keeps [B, n_kv, S, D] per layer; MiniMind keeps [B, S, n_kv, D]
        return [(layer.keys.transpose(1, 2), layer.values.transpose(1, 2)) for layer in past_key_values.layers]
    if isinstance(past_key_values, (list, tuple)) and len(past_key_values) == num_layers and all(
            p is None or (isinstance(p, (list, tuple)) and len(p) == 2) for p in past_key_values):
        return list(past_key_values)
    raise TypeError(f"past_key_values must be None, a list of {num_layers} (key, value) pairs or a transformers "
                    f"Cache, got {type(past_key_values).__name__}"
                    + (f" of length {len(past_key_values)}" if isinstance(past_key_values, (list, tuple)) else ""))


def update_hf_cache(cache, presents, seq_length):
    """Append each layer's newest seq_length positions to a transformers Cache; returns the cache."""
    for i, (k, v) in enumerate(presents):
        cache.update(k[:, -seq_length:].transpose(1, 2), v[:, -seq_length:].transpose(1, 2), i)
    return cache


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


def check_position_ids(position_ids, batch_size, seq_length, max_positions):
    """Integer positions [B or 1, seq_length], each inside the RoPE tables."""
    if not torch.is_tensor(position_ids) or position_ids.is_floating_point() or (
            position_ids.dim() != 2 or position_ids.shape[0] not in (1, batch_size)
            or position_ids.shape[1] != seq_length):
        tensor = torch.is_tensor(position_ids)
        got = list(position_ids.shape) if tensor else type(position_ids).__name__
        raise ValueError(f"position_ids must be ints [{batch_size} or 1, {seq_length}],"
                         f" got {got}")
    if not position_ids.numel():
        return
    low, high = position_ids.min().item(), position_ids.max().item()
    if low < 0 or high >= max_positions:
        raise ValueError(f"position_ids span {low}..{high} but max_position_embeddings "
                         f"is {max_positions}")


def check_known_arguments(kwargs):
    """Raise a TypeError naming arguments MiniMind does not implement."""
    unknown = sorted(k for k, v in kwargs.items()
                     if not (k == "return_dict" and v in (None, True)))
    if unknown:
        raise TypeError(f"MiniMind's forward does not implement {', '.join(unknown)}")


def check_attention_mask(attention_mask, batch_size, total_len):
    if attention_mask is not None and tuple(attention_mask.shape) != (batch_size, total_len):
        raise ValueError(f"attention_mask must be [batch, cached + new tokens] = [{batch_size}, {total_len}], "
                         f"got {list(attention_mask.shape)}")


class KeepCacheName(ModelOutput):
    """A ModelOutput that keeps MiniMind's `past_key_values` (transformers 5 renames that field to `cache`)."""

    def _replace_old_cache_name(self, key: str) -> str:
        return key


def keep_cache_name(cls):
    """Undo transformers' kwarg rename on the dataclass __init__ (type.__setattr__ skips its metaclass hook)."""
    type.__setattr__(cls, "__init__", getattr(cls.__init__, "__wrapped__", cls.__init__))
    return cls


@keep_cache_name
@dataclass
class MiniMindModelOutput(KeepCacheName):
    """What MiniMindModel returns; `past_key_values` is a list of per-layer (k, v), each [B, S, n_kv, head_dim]."""
    # after the final norm, [B, S, hidden]; output_hidden_states=True gives
    # transformers' tuple of num_hidden_layers + 1: the embeddings, each block's output,
    # the last one after the final norm
    hidden_states: torch.Tensor | tuple | None = None
    past_key_values: list | None = None
    aux_loss: torch.Tensor | None = None
    attentions: tuple | None = None  # per layer [B, H, S, S_kv], with output_attentions=True
    router_logits: tuple | None = None  # per MoE layer [B * S, num_experts]


@keep_cache_name
@dataclass
class MiniMindOutput(KeepCacheName):
    """What MiniMindForCausalLM returns: indexable and dict-like like any transformers output, MiniMind's names."""
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # [B, S_kept, vocab]
    aux_loss: torch.Tensor | None = None
    past_key_values: list | None = None
    hidden_states: torch.Tensor | tuple | None = None  # as in MiniMindModelOutput
    attentions: tuple | None = None
    router_logits: tuple | None = None
    lm_loss: torch.Tensor | None = None  # the next-token part of loss (loss - aux_loss)


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
                labels=None, output_attentions=False, output_router_logits=False,
                position_ids=None, output_hidden_states=False, num_items_in_batch=None,
                **kwargs) -> MiniMindOutput:
        """With labels, loss = lm_loss (next token) + aux_loss (MoE, in training only):
        what transformers' Trainer or a plain loss.backward() optimises (chapter 9)."""
        out = self.model(input_ids, attention_mask, past_key_values, use_cache,
                         output_attentions, position_ids=position_ids,
                         output_hidden_states=output_hidden_states, **kwargs)
        final = out.hidden_states[-1] if output_hidden_states else out.hidden_states
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(final[:, slice_indices, :])  # [B, S_kept, vocab]
        lm_loss = loss = None
        if labels is not None:
            lm_loss = shifted_cross_entropy(logits, labels,
                                            num_items_in_batch=num_items_in_batch)
            loss = lm_loss + out.aux_loss
        router_logits = out.router_logits if output_router_logits else None
        return MiniMindOutput(loss=loss, logits=logits, aux_loss=out.aux_loss,
                              past_key_values=out.past_key_values,
                              hidden_states=out.hidden_states, attentions=out.attentions,
                              router_logits=router_logits, lm_loss=lm_loss)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, output_loading_info=False, **kwargs):
        """transformers' loader, made local and strict: a shipped name or a folder, every weight present and
        shaped as the config says (a tied lm_head may be absent); anything else is a CheckpointError."""
        folder = checkpoint_folder(pretrained_model_name_or_path)
        verify_manifest(folder)
        kwargs.update(output_loading_info=True, ignore_mismatched_sizes=True, local_files_only=True)
        model, info = super().from_pretrained(folder, *args, **kwargs)
        check_loading_info(info)
        return (model, info) if output_loading_info else model

    def generate(self, inputs=None, **kwargs):
        """Sample or greedily extend `inputs` [B, S]; see minimind.generate.generate (chapter 10)."""
        from .generate import generate
        return generate(self, kwargs.pop("input_ids", inputs), **kwargs)  # transformers callers name it input_ids


AutoConfig.register("minimind", MiniMindConfig, exist_ok=True)
AutoModelForCausalLM.register(MiniMindConfig, MiniMindForCausalLM, exist_ok=True)
