"""Autoregressive generation with a KV-cache, built from the sampling functions (chapter 10).

`model.generate` takes transformers' arguments and settles them as transformers does: the caller's arguments,
then the model's `generation_config`, then transformers' global defaults (greedy, max_length 20, top_k 50).
It implements greedy search and sampling; any other setting (num_beams > 1, stop_strings, ...) is an error.
"""
import copy

import torch
from transformers import Cache, GenerationConfig

from .sampling import (apply_repetition_penalty, apply_temperature, ban_tokens, check_settings, sample_next_token,
                       top_k_filter, top_p_filter)

IMPLEMENTED = {"max_length", "max_new_tokens", "min_length", "min_new_tokens", "do_sample", "temperature", "top_k",
               "top_p", "repetition_penalty", "num_return_sequences", "use_cache", "bos_token_id", "eos_token_id",
               "pad_token_id"}
HARMLESS = {"tokenizer"}  # transformers needs it only for stop_strings, which are not implemented


@torch.inference_mode()
def generate(model, input_ids=None, attention_mask=None, generation_config=None, streamer=None, generator=None,
             past_key_values=None, **kwargs):
    """Extend `input_ids` [B, S] (left-padded if rows differ); returns [B * num_return_sequences, S + new].

    A row that produced an EOS id is filled with `pad_token_id` (EOS when there is none) until all rows are done.
    `past_key_values` may hold a prefix of `input_ids` already (MiniMind's list of (k, v) or a transformers Cache).
    """
    settings = generation_settings(model, generation_config, **kwargs)
    if past_key_values is not None and settings.num_return_sequences > 1:
        raise NotImplementedError("num_return_sequences > 1 with a filled past_key_values")
    input_ids, attention_mask = first_batch(input_ids, attention_mask, settings, model.device)
    max_new, min_new = new_token_limits(settings, input_ids.shape[1])
    eos, pad = token_list(settings.eos_token_id), token_list(settings.pad_token_id)
    pad = (pad or eos or [None])[0]
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    if streamer:
        streamer.put(input_ids.cpu())
    for step in range(max_new):
        logits, past_key_values = next_token_logits(model, input_ids, attention_mask, past_key_values,
                                                    settings.use_cache)
        next_token = choose_next_token(logits, input_ids, settings, eos if step < min_new else [], generator)
        if eos:  # finished rows get padding; a row finishes when it emits any of the EOS ids
            next_token = torch.where(finished[:, None], torch.full_like(next_token, pad), next_token)
            finished |= torch.isin(next_token.squeeze(-1), torch.tensor(eos, device=next_token.device))
        input_ids = torch.cat([input_ids, next_token], dim=-1)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.shape[0], 1)], -1)
        if streamer:
            streamer.put(next_token.cpu())
        if eos and finished.all():
            break
    if streamer:
        streamer.end()
    return input_ids


def generation_settings(model, generation_config=None, **kwargs) -> GenerationConfig:
    """The caller's arguments over `generation_config` over the model's over the global defaults, checked."""
    settings = copy.deepcopy(generation_config) if generation_config is not None else GenerationConfig()
    settings.update(**model.generation_config.to_dict(), defaults_only=True)
    settings.update(**GenerationConfig._get_default_generation_params(), defaults_only=True)
    unused = settings.update(**kwargs)
    check_implemented(settings, {k: v for k, v in unused.items() if k not in HARMLESS})
    if settings.do_sample:  # check the knobs once, before any work
        check_settings(settings.temperature, settings.top_k, settings.top_p, settings.repetition_penalty)
    else:
        check_settings(repetition_penalty=settings.repetition_penalty)
    return settings


def check_implemented(settings: GenerationConfig, unused: dict):
    """Raise NotImplementedError naming every setting that asks for more than greedy search or sampling."""
    defaults = GenerationConfig._get_default_generation_params()
    asked = {k: v for k, v in settings.to_dict().items()
             if k not in IMPLEMENTED and not k.startswith("_") and k != "transformers_version"
             and not is_unset(v) and v != defaults.get(k)}
    asked.update({k: v for k, v in unused.items() if not is_unset(v)})
    if asked:
        named = ", ".join(f"{k}={v!r}" for k, v in sorted(asked.items()))
        raise NotImplementedError(f"minimind's generate does greedy search and sampling only; it does not "
                                  f"implement {named}. Implemented: {', '.join(sorted(IMPLEMENTED))}")


def is_unset(value) -> bool:
    return value is None or value is False or (isinstance(value, (list, tuple, dict)) and len(value) == 0)


def token_list(token_ids) -> list:
    """None, an int or a list of ints -> a list of ints."""
    if token_ids is None:
        return []
    return [int(t) for t in token_ids] if isinstance(token_ids, (list, tuple)) else [int(token_ids)]


def first_batch(input_ids, attention_mask, settings, device):
    """Repeat each row num_return_sequences times (row 0, row 0, ..., row 1, ...); no prompt -> [[bos]]."""
    if input_ids is None:
        if settings.bos_token_id is None:
            raise ValueError("generate needs input_ids, or a bos_token_id to start from")
        input_ids = torch.full((1, 1), token_list(settings.bos_token_id)[0], dtype=torch.long, device=device)
    n = settings.num_return_sequences
    if attention_mask is not None:
        attention_mask = attention_mask.repeat_interleave(n, dim=0)
    return input_ids.repeat_interleave(n, dim=0), attention_mask


def new_token_limits(settings, prompt_len: int):
    """(most, fewest) new tokens: max_new_tokens wins over max_length, as in transformers; min_* likewise."""
    if settings.max_new_tokens is not None:
        max_new = settings.max_new_tokens
    elif settings.max_length is not None:
        max_new = settings.max_length - prompt_len
        if max_new <= 0:
            raise ValueError(f"max_length={settings.max_length} leaves no room after a prompt of {prompt_len} "
                             "tokens; raise it or set max_new_tokens")
    else:
        raise ValueError("set max_new_tokens or max_length")
    min_new = max(settings.min_new_tokens or 0, (settings.min_length or 0) - prompt_len)
    return max_new, min_new


def next_token_logits(model, input_ids, attention_mask, past_key_values, use_cache):
    """One forward over the tokens the cache has not seen; -> (logits [B, vocab] in fp32, the new cache)."""
    past_len = cache_length(past_key_values)
    if past_len >= input_ids.shape[1]:
        raise ValueError(f"past_key_values already holds {past_len} positions but input_ids has only "
                         f"{input_ids.shape[1]}; pass a cache of a shorter prefix")
    outputs = model(input_ids[:, past_len:], attention_mask, past_key_values, use_cache=use_cache, logits_to_keep=1)
    return outputs.logits[:, -1, :].float(), outputs.past_key_values if use_cache else None


def cache_length(past_key_values) -> int:
    """Positions held by None, MiniMind's list of (k, v) [B, S, n_kv, D], or a transformers Cache."""
    if past_key_values is None:
        return 0
    if isinstance(past_key_values, Cache):
        return past_key_values.get_seq_length()
    return past_key_values[0][0].shape[1]


def choose_next_token(logits, input_ids, settings, banned, generator):
    """The chapter's pipeline: ban (EOS before min_new_tokens), repetition penalty, T, top-k, top-p, pick."""
    logits = apply_repetition_penalty(ban_tokens(logits, banned), input_ids, settings.repetition_penalty)
    if settings.do_sample:
        logits = top_p_filter(top_k_filter(apply_temperature(logits, settings.temperature), settings.top_k),
                              settings.top_p)
    return sample_next_token(logits, settings.do_sample, generator)  # [B, 1]
