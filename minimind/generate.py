"""Autoregressive generation with a KV-cache, built from the sampling functions (chapter 10)."""
import torch

from .sampling import (apply_repetition_penalty, apply_temperature, check_settings, sample_next_token, top_k_filter,
                       top_p_filter)


@torch.inference_mode()
def generate(model, input_ids, attention_mask=None, max_new_tokens=8192, temperature=0.85, top_p=0.85, top_k=50,
             eos_token_id=2, streamer=None, use_cache=True, num_return_sequences=1, do_sample=True,
             repetition_penalty=1.0, generator=None, **kwargs):
    """Extend `input_ids` [B, S] by up to `max_new_tokens`; returns [B * num_return_sequences, S + new].

    Rows that produced `eos_token_id` keep emitting it until every row is done, as in MiniMind.
    Other transformers `generate` arguments (pad_token_id, ...) are accepted and ignored.
    """
    input_ids = input_ids.repeat(num_return_sequences, 1)
    if attention_mask is not None:
        attention_mask = attention_mask.repeat(num_return_sequences, 1)
    if do_sample:  # check the knobs once, before any work
        check_settings(temperature, top_k, top_p, repetition_penalty)
    else:
        check_settings(repetition_penalty=repetition_penalty)
    past_key_values = None
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    if streamer:
        streamer.put(input_ids.cpu())
    for _ in range(max_new_tokens):
        past_len = past_key_values[0][0].shape[1] if past_key_values else 0
        outputs = model(input_ids[:, past_len:], attention_mask, past_key_values, use_cache=use_cache,
                        logits_to_keep=1)
        logits = apply_repetition_penalty(outputs.logits[:, -1, :].float(), input_ids, repetition_penalty)
        if do_sample:
            logits = top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)
        next_token = sample_next_token(logits, do_sample, generator)  # [B, 1]
        if eos_token_id is not None:
            next_token = torch.where(finished[:, None], torch.full_like(next_token, eos_token_id), next_token)
        input_ids = torch.cat([input_ids, next_token], dim=-1)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.shape[0], 1)], -1)
        past_key_values = outputs.past_key_values if use_cache else None
        if streamer:
            streamer.put(next_token.cpu())
        if eos_token_id is not None:
            finished |= next_token.squeeze(-1).eq(eos_token_id)
            if finished.all():
                break
    if streamer:
        streamer.end()
    return input_ids
