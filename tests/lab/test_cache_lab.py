"""minimind/lab/cache_lab.py: chapter 4b's counts, chunk masks and exercise references, checked
against the model itself (a tiny random MiniMind) and against torch's own causal_lower_right."""
from unittest import mock

import matplotlib
import pytest
import torch
from torch.nn.attention.bias import causal_lower_right

from model_helpers import LOGIT_TOL, random_ids, tiny_model
from minimind.attention import Attention, causal_mask
from minimind.config import MiniMindConfig
from minimind.lab import attention_lab, cache_lab

matplotlib.use("Agg")


def test_sizes_follow_the_config():
    config = MiniMindConfig()  # 8 layers, 8 query / 4 KV heads of 96
    assert cache_lab.bytes_per_token_per_layer(config) == 2 * 4 * 96 * 2 == 1536
    per_token = cache_lab.bytes_per_token_per_layer(config) * config.num_hidden_layers
    assert per_token * 32768 == attention_lab.kv_cache_bytes(config, 32768)
    assert cache_lab.repeat_kv_copy_bytes(config, 100) == 2 * 100 * 8 * 96 * 2


def test_counted_rows_match_the_pictured_rows_and_the_formula():
    model, ids = tiny_model(), random_ids(1, 5)
    for new in (1, 4):
        cached = cache_lab.count_kv_rows(model, ids, new, use_cache=True)
        uncached = cache_lab.count_kv_rows(model, ids, new, use_cache=False)
        assert cached == 5 + new - 1
        assert uncached == sum(5 + t for t in range(new))
        for use_cache, count in [(True, cached), (False, uncached)]:
            rows = cache_lab.recomputed_rows(5, new - 1, use_cache)
            assert int((rows == 1).sum()) == count


def test_the_fused_path_never_repeats_kv_and_the_explicit_path_does():
    model, ids = tiny_model(), random_ids(1, 6)
    with torch.no_grad(), cache_lab.counting_repeat_kv() as calls:
        model(ids)
    assert calls[0] == 0
    with torch.no_grad(), cache_lab.counting_repeat_kv() as calls:
        model(ids, output_attentions=True)
    assert calls[0] == 2 * model.config.num_hidden_layers  # keys and values, every layer


def test_lower_right_is_the_package_mask_and_is_causal_is_not():
    assert torch.equal(causal_lower_right(3, 8)._materialize(), causal_mask(3, 8)[0, 0])
    assert cache_lab.keys_seen(causal_mask(3, 8)[0, 0]) == [6, 7, 8]


def test_chunks_match_the_full_forward_except_under_the_bug():
    model, ids = tiny_model(), random_ids(1, 12)
    with torch.no_grad():
        full = model(ids).logits
    for chunk in (1, 5, 12):
        # chunked vs one pass: other matrix shapes, float32 rounding (LOGIT_TOL, measured ~5e-6)
        torch.testing.assert_close(cache_lab.chunked_logits(model, ids, chunk), full,
                                   atol=LOGIT_TOL, rtol=0)
    with torch.no_grad(), mock.patch.object(Attention, "fused_attention",
                                            cache_lab.lower_right_fused_attention):
        torch.testing.assert_close(cache_lab.chunked_logits(model, ids, 5), full, atol=LOGIT_TOL,
                                   rtol=0)
    assert cache_lab.spared_chunk_sizes(model, ids, [1, 2, 5, 12]) == [1, 12]


def test_decode_step_is_the_last_row_of_full_attention():
    model, ids = tiny_model(), random_ids(1, 7)
    part = attention_lab.attention_parts(model, ids)[1]  # q [1, H, 7, D], k, v [1, n_kv, 7, D]
    k, v = part["k"].transpose(1, 2), part["v"].transpose(1, 2)  # cache layout [1, 7, n_kv, D]
    out, k_all, v_all = cache_lab.decode_step(part["q"][:, :, -1:], k[:, -1:], v[:, -1:],
                                              k[:, :-1], v[:, :-1])
    assert torch.equal(k_all, k) and torch.equal(v_all, v)
    n_rep = model.config.num_attention_heads // model.config.num_key_value_heads
    keys = part["k"].repeat_interleave(n_rep, 1)
    probs = attention_lab.scaled_probs(part["q"], keys)  # [1, H, 7, 7], causal
    last_row = probs[:, :, -1:] @ part["v"].repeat_interleave(n_rep, 1)
    # fused kernel vs an explicit softmax: float32 rounding of a 7-term average, ~1e-7 measured
    torch.testing.assert_close(out, last_row, atol=1e-5, rtol=1e-5)
    expected = (out, k_all, v_all)
    wrong = out.clone()
    wrong[:, 2] += 1  # one head wrong: the head mapping
    message, hint = cache_lab.explain_decode_step((wrong, k_all, v_all), expected)
    assert "head 3" in message and "KV head" in message and "repeat_interleave" in hint
    message, hint = cache_lab.explain_decode_step((2 * out, k_all, v_all), expected)
    assert "not the head mapping" in message and "1/√D" in hint  # all heads: scores
    flipped = (out, k_all, v_all.transpose(1, 2))
    message, hint = cache_lab.explain_decode_step(flipped, expected)
    assert "shape" in message and "dim 1" in hint
    flipped = (out.transpose(1, 2), k_all, v_all)
    message, hint = cache_lab.explain_decode_step(flipped, expected)
    assert "output has shape" in message and "transpose" in hint


def test_attention_with_cache_matches_the_model_step():
    model, ids = tiny_model(), random_ids(1, 9)
    attn = model.model.layers[0].self_attn
    cos, sin = model.model.freqs_cos, model.model.freqs_sin
    x = torch.randn(1, 9, model.config.hidden_size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, _ = cache_lab.attention_with_cache(attn, x, cos, sin)
        first, past = cache_lab.attention_with_cache(attn, x[:, :6], cos, sin)
        rest, present = cache_lab.attention_with_cache(attn, x[:, 6:], cos, sin, past)
    assert present[0].shape[1] == 9
    # chunk after a cache vs one pass: float32 rounding, ~1e-7 measured
    torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-5, rtol=1e-5)
    shifted = rest.clone()
    shifted[:, 1] += 1
    explain = cache_lab.explain_attention_with_cache
    message, hint = explain((shifted, present), (rest, present))
    assert "position 7" in message and "is_causal" in hint  # a chunk of 3 after 6
    one, one_present = rest[:, :1], tuple(t[:, :7] for t in present)
    _, hint = explain((one + 1, one_present), (one, one_present))
    assert "position 6" in hint  # a single decode step: where RoPE rotates it
    _, hint = explain((first + 1, past), (first, past))
    assert "no cache" in hint  # the prefill


def test_step_shares_are_parts_of_the_step():
    model, ids = tiny_model(), random_ids(1, 9)
    with torch.no_grad():
        cache = model(ids[:, :8], use_cache=True).past_key_values
    shares = cache_lab.step_shares(model, ids[:, 8:], cache, repeats=2)
    assert set(shares) == {"attention over the cache", "output layer"}
    assert all(0 < share < 1 for share in shares.values())
    assert sum(shares.values()) < 1


def test_the_fused_step_dispatches_no_head_copy():
    model, ids = tiny_model(), random_ids(1, 6)
    with torch.no_grad():
        cache = model(ids[:, :5], use_cache=True).past_key_values
        fused = cache_lab.aten_ops(lambda: model(ids[:, 5:], past_key_values=cache))
        explicit = cache_lab.aten_ops(lambda: model(ids[:, 5:], past_key_values=cache,
                                                    output_attentions=True))
    copies = {"repeat_interleave", "repeat", "expand", "clone"}
    assert "mm" in fused and not copies & set(fused)
    assert {"expand", "clone"} <= set(explicit)  # repeat_kv: expand, then a copy


def test_cache_frames_follow_the_steps():
    tokens = ["<s>", "a", "b", "c", "d"]
    frames = cache_lab.cache_frames(torch.randn(5, 8), tokens, 3, dims=8, dpi=30)
    labels = cache_lab.cache_frame_labels(tokens, 3)
    assert len(frames) == len(labels) == 3 and all(f[:4] == b"\x89PNG" for f in frames)
    assert labels == ["prefill · positions 0–2", "step 1 · position 3 (c)",
                      "step 2 · position 4 (d)"]


def test_figures_draw():
    tokens = ["<s>", "a", "b", "c"]
    for fig in (cache_lab.cache_diagram(MiniMindConfig(), tokens),
                cache_lab.recompute_figure(tokens, 2)):
        assert fig.axes[0].get_title()
        matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("chunk", [0])
def test_chunk_of_zero_is_refused(chunk):
    with pytest.raises(ValueError):
        cache_lab.chunked_logits(tiny_model(), random_ids(1, 3), chunk)
