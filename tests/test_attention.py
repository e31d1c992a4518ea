import pytest
import torch

import minimind.attention
from model_helpers import tiny_model
from minimind.attention import causal_mask, repeat_kv


def test_repeat_kv_shares_each_kv_head_with_a_group():
    x = torch.randn(2, 5, 3, 8)
    y = repeat_kv(x, 4)
    assert y.shape == (2, 5, 12, 8)
    assert torch.equal(y[:, :, 4], x[:, :, 1]) and torch.equal(y[:, :, 7], x[:, :, 1])


def test_causal_mask_with_cache_offset():
    mask = causal_mask(2, 5)[0, 0]  # 3 cached positions, 2 new queries at positions 3 and 4
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert torch.equal(causal_mask(4, 4)[0, 0], torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_mask_with_padding():
    mask = causal_mask(3, 3, torch.tensor([[0, 1, 1]]))[0, 0]
    assert mask.tolist() == [[True, True, True], [False, True, False], [False, True, True]]


@pytest.mark.parametrize("use_moe", [False, True])
@torch.no_grad()
def test_fused_and_explicit_paths_agree(ids, use_moe):
    model = tiny_model(use_moe=use_moe)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding in row 0
    for kwargs in [{}, {"attention_mask": mask}]:
        fused = model(ids, **kwargs).logits
        explicit = model(ids, output_attentions=True, **kwargs)
        # SDPA's kernel against softmax(QK^T)V written out: float32 rounding, logits ~1
        assert (fused - explicit.logits).abs().max() <= 1e-5
        assert explicit.attentions[0].shape == (2, 4, 11, 11)
        # a float32 softmax row sums to 1 up to rounding of its 11 terms
        torch.testing.assert_close(explicit.attentions[1].sum(-1), torch.ones(2, 4, 11),
                                   atol=1e-6, rtol=0)


@torch.no_grad()
def test_cached_decoding_equals_full_forward(ids):
    model = tiny_model()
    full = model(ids).logits
    out = model(ids[:, :4], use_cache=True)
    steps = [out.logits]
    out = model(ids[:, 4:7], past_key_values=out.past_key_values, use_cache=True)  # a 3-token chunk
    steps.append(out.logits)
    for t in range(7, ids.shape[1]):  # then one token at a time
        out = model(ids[:, t:t + 1], past_key_values=out.past_key_values, use_cache=True)
        steps.append(out.logits)
    assert (torch.cat(steps, 1) - full).abs().max() <= 1e-5
    assert out.past_key_values[0][0].shape == (2, 11, 2, 16)  # [B, S, n_kv, head_dim]


@torch.no_grad()
def test_cached_decoding_with_padding_mask(ids):
    model = tiny_model()
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    full = model(ids, attention_mask=mask).logits
    out = model(ids[:, :6], attention_mask=mask[:, :6], use_cache=True)
    last = model(ids[:, 6:], attention_mask=mask, past_key_values=out.past_key_values, use_cache=True)
    real = mask.bool()  # outputs at padding positions are meaningless and differ; compare real tokens
    assert (torch.cat([out.logits, last.logits], 1) - full)[real].abs().max() <= 1e-5
    for layer in model.model.layers:  # the explicit path handles the same case
        layer.self_attn.flash = False
    assert (model(ids, attention_mask=mask).logits - full)[real].abs().max() <= 1e-5


@torch.no_grad()
def test_padding_rows_match_unpadded(ids):
    """A left-padded row of a batch gives its real tokens the attention and logits of the row run alone.

    RoPE counts the 3 pads, but it only sees relative positions, which the pads shift equally for every token.
    """
    model = tiny_model()
    short, full = ids[:1, :8], ids[1:]  # 8 and 11 tokens
    batch = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), full])
    mask = torch.tensor([[0, 0, 0] + [1] * 8, [1] * 11])
    padded = model(batch, attention_mask=mask, output_attentions=True)
    alone_short, alone_full = model(short, output_attentions=True), model(full, output_attentions=True)
    for layer, probs in enumerate(padded.attentions):
        assert probs[0, :, 3:, :3].abs().max() == 0  # exact: masked scores are -inf, exp(-inf) = 0
        # the same rows of a wider softmax (extra -inf terms) and of a 3-token-shorter batch:
        # float32 rounding of probabilities <= 1 and of logits ~10 through two layers
        torch.testing.assert_close(probs[0, :, 3:, 3:], alone_short.attentions[layer][0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(probs[1], alone_full.attentions[layer][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(padded.logits[0, 3:], alone_short.logits[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(padded.logits[1], alone_full.logits[0], atol=1e-4, rtol=1e-4)



def gqa_inputs(q_len, kv_len, seed=0):
    """Queries [2, 8, q_len, 16] and unrepeated keys, values [2, 4, kv_len, 16]."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 8, q_len, 16), (2, 4, kv_len, 16), (2, 4, kv_len, 16)]
    return [torch.randn(shape, generator=g) for shape in shapes]


def repeat_heads(x, n_rep):
    """[B, n_kv, S, D] -> [B, H, S, D] with repeat_kv, as the fused path did before."""
    return repeat_kv(x.transpose(1, 2), n_rep).transpose(1, 2)


@pytest.mark.parametrize("q_len, kv_len, padded", [
    (9, 9, False), (9, 9, True), (1, 9, False), (1, 9, True), (3, 9, False)])
@torch.no_grad()
def test_fused_gqa_equals_the_repeat_kv_path(q_len, kv_len, padded):
    attention = tiny_model().model.layers[0].self_attn
    xq, xk, xv = gqa_inputs(q_len, kv_len)
    mask = None
    if padded:
        mask = torch.ones(2, kv_len, dtype=torch.long)
        mask[0, :3] = 0
    shared = attention.fused_attention(xq, xk, xv, mask)  # 4 KV heads read by 8
    xk_rep, xv_rep = repeat_heads(xk, 2), repeat_heads(xv, 2)  # [2, 8, kv_len, 16]
    copied = attention.fused_attention(xq, xk_rep, xv_rep, mask)
    # the same kernel on the same numbers; only its float32 summation order may differ
    torch.testing.assert_close(shared, copied, atol=1e-6, rtol=1e-6)


@torch.no_grad()
def test_fused_decoding_never_repeats_the_cache(ids, monkeypatch):
    model = tiny_model()
    calls, real = [], minimind.attention.repeat_kv
    def counted(x, n_rep):
        calls.append(x.shape)
        return real(x, n_rep)
    monkeypatch.setattr(minimind.attention, "repeat_kv", counted)
    out = model(ids[:, :8], use_cache=True)
    for t in range(8, 11):
        out = model(ids[:, t:t + 1], past_key_values=out.past_key_values,
                    use_cache=True)
    assert calls == []  # the fused path hands SDPA the 2 KV heads as they are cached
    model(ids, output_attentions=True)  # the explicit path repeats K and V per layer
    assert len(calls) == 2 * model.config.num_hidden_layers


@torch.no_grad()
def test_all_ones_mask_keeps_the_plain_causal_kernel(ids, monkeypatch):
    model = tiny_model()
    plain = model(ids[:, :10], use_cache=True)
    step = model(ids[:, 10:], past_key_values=plain.past_key_values)
    def no_mask(*args):
        raise AssertionError("a mask was built for an all-ones attention_mask")
    monkeypatch.setattr(minimind.attention, "causal_mask", no_mask)
    ones = torch.ones_like(ids)
    masked = model(ids[:, :10], attention_mask=ones[:, :10], use_cache=True)
    cache = masked.past_key_values
    masked_step = model(ids[:, 10:], attention_mask=ones, past_key_values=cache)
    # exact: the very same kernel call as without a mask
    assert torch.equal(masked.logits, plain.logits)
    assert torch.equal(masked_step.logits, step.logits)
