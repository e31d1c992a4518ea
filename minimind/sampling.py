"""Small pure functions that turn next-token logits [B, vocab] into a choice (chapter 10).

Each equals the matching transformers logits processor; `generate` applies them in this order:
banned tokens, repetition penalty, temperature, top-k, top-p, then sample (or argmax).
"""
import torch


def check_settings(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0):
    """Raise a ValueError naming the first sampling setting outside its range."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}; use do_sample=False for greedy")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")


def apply_repetition_penalty(logits, input_ids, penalty: float):
    """Push down tokens already in `input_ids`: positive logits / penalty, negative logits * penalty."""
    check_settings(repetition_penalty=penalty)
    if penalty == 1.0:
        return logits
    seen = torch.gather(logits, 1, input_ids)  # [B, S] logits of the tokens seen so far
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(1, input_ids, seen)


def apply_temperature(logits, temperature: float):
    """Divide by T: T < 1 sharpens the distribution, T > 1 flattens it."""
    check_settings(temperature=temperature)
    return logits / temperature


def top_k_filter(logits, top_k: int):
    """Keep the k largest logits per row (ties with the k-th are kept), set the rest to -inf; k = 0 keeps all."""
    check_settings(top_k=top_k)
    if top_k == 0 or top_k >= logits.shape[-1]:
        return logits
    kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1, None]  # [B, 1]
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits, top_p: float):
    """Keep the smallest set of best tokens whose probability reaches top_p; the best token is always kept.

    TopPLogitsWarper's own steps, so ties fall the same way: sort ascending, then drop
    the tokens whose cumulative probability, from the worst up, is at most 1 - top_p.
    """
    check_settings(top_p=top_p)
    if top_p == 1.0:
        return logits
    sorted_logits, sorted_idx = torch.sort(logits, descending=False)  # worst first
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)  # [B, vocab]
    remove = cumulative <= 1 - top_p  # the worst tokens, at most 1 - top_p together
    remove[..., -1:] = False  # the best token stays
    return logits.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))


def ban_tokens(logits, token_ids):
    """Set the logits of `token_ids` to -inf so they cannot be picked (EOS before min_new_tokens); [] keeps all."""
    if not token_ids:
        return logits
    return logits.index_fill(-1, torch.tensor(token_ids, device=logits.device), float("-inf"))


def sample_next_token(logits, do_sample=True, generator=None):
    """[B, vocab] -> [B, 1]: draw from softmax(logits), or take the argmax when do_sample is False."""
    if not do_sample:
        return logits.argmax(dim=-1, keepdim=True)
    return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1, generator=generator)


def next_token_distribution(logits, input_ids=None, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0):
    """The full pipeline as probabilities [B, vocab] (what the sampling chapter plots)."""
    if input_ids is not None:
        logits = apply_repetition_penalty(logits, input_ids, repetition_penalty)
    logits = top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)
    return torch.softmax(logits, dim=-1)
