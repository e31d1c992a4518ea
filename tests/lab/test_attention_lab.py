"""minimind/lab/attention_lab.py: the pure functions behind chapter 4's pictures, checked against the model."""
import math

import pytest
import torch

from model_helpers import tiny_model
from minimind.attention import causal_mask, repeat_kv
from minimind.lab import attention_lab as lab

PNG = b"\x89PNG\r\n\x1a\n"


def test_allowed_keys_is_the_package_mask():
    assert torch.equal(lab.allowed_keys(3, 5)[0], causal_mask(3, 5)[0, 0])
    padded = lab.allowed_keys(4, 4, torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
    assert padded.shape == (2, 4, 4) and not padded[0, 1:, 0].any() and padded[0, 0].all()


def test_entropy_and_slope_of_known_distributions():
    uniform = torch.full((1, 4), 0.25)
    one_hot = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    # float32 log and a 4-term sum against the float64 math.log: ~1e-7 relative
    assert lab.attention_entropy(uniform).item() == pytest.approx(math.log(4), rel=1e-6)
    assert lab.attention_entropy(one_hot).item() == 0  # exact: 1 * log 1 = 0 and 0 * log(1e-30) = 0
    rows = torch.stack([torch.tensor([1.0, 0, 0, 0]), torch.full((4,), 0.25)])  # query 0 is skipped
    assert lab.softmax_slope(rows) == 0.75  # exact: 4 * 0.25 * 0.75 is exact in binary, in any order
    assert lab.softmax_slope(torch.stack([torch.tensor([1.0, 0]), torch.tensor([0.0, 1])])) == 0  # exact: p(1-p) = 0


def test_scaled_probs_reproduce_the_model_and_entropy_falls_with_scale():
    model = tiny_model()
    ids = torch.randint(0, 320, (2, 9), generator=torch.Generator().manual_seed(1))
    parts = lab.attention_parts(model, ids)
    out = model(ids, output_attentions=True)
    n_rep = model.config.num_attention_heads // model.config.num_key_value_heads
    for part, probs in zip(parts, out.attentions):
        assert part["q"].shape == (2, 4, 9, 16) and part["k"].shape == (2, 2, 9, 16)
        assert part["q_proj"].shape == (2, 9, 4, 16)
        k = repeat_kv(part["k"].transpose(1, 2), n_rep).transpose(1, 2)
        # the model's explicit attention vs scaled_probs' own q k^T / sqrt(D) and softmax: probabilities <= 1
        # agree to a few float32 ulps (~5e-7 measured)
        torch.testing.assert_close(lab.scaled_probs(part["q"], k), probs.detach(), atol=1e-5, rtol=1e-5)
    entropies = lab.entropy_against_scale(parts[0]["q"], k := repeat_kv(parts[0]["k"].transpose(1, 2), n_rep)
                                          .transpose(1, 2), [0.0, 1.0, 4.0, 16.0])
    # multiplier 0: a float32 mean of float32 entropies against the float64 formula, ~1e-7 relative
    assert entropies[0].item() == pytest.approx(lab.uniform_entropy(9), rel=1e-5)
    assert (entropies[1:] < entropies[:-1]).all()


def test_scaled_queries_scales_scores_and_restores_the_model():
    model = tiny_model()
    ids = torch.randint(0, 320, (1, 7), generator=torch.Generator().manual_seed(2))
    before = [p.detach().clone() for p in model.parameters()]
    part = lab.attention_parts(model, ids)[0]
    k = repeat_kv(part["k"].transpose(1, 2), 2).transpose(1, 2)
    with torch.no_grad(), lab.scaled_queries(model, 3.0):
        inside = model(ids, output_attentions=True).attentions[0]
    # a 3x q_norm gain inside the model vs 3 * (q k^T) outside: other rounding, probabilities ~5e-7 apart
    torch.testing.assert_close(inside, lab.scaled_probs(part["q"], k, 3.0), atol=1e-5, rtol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # exact: restored from copies


def test_score_stages():
    torch.manual_seed(0)
    q, k = torch.randn(5, 4), torch.randn(5, 4)
    (_, raw), (_, scaled), (_, masked), (_, probs) = lab.score_stages(q, k)
    assert torch.equal(scaled, raw / 2)  # exact: / sqrt(4) is / 2.0, exact in binary
    # exact: masked_fill leaves the allowed scores untouched
    assert torch.isinf(masked).sum() == 10 and torch.equal(masked[2, :3], scaled[2, :3])
    # rows of at most 5 float32 probabilities sum to 1 within a few ulps; query 0 sees one key: exp(0) / 1 = 1
    torch.testing.assert_close(probs.sum(-1), torch.ones(5), atol=1e-6, rtol=0)
    assert probs[0, 0] == 1


def test_head_targets_scores_and_chance():
    ids = torch.tensor([[1, 10, 11, 7, 12, 13]])  # <s> a b ， c d   (7 = punctuation)
    targets = lab.head_targets(ids, punctuation_ids=[7])
    assert targets["previous token"][0, 3].nonzero().flatten().tolist() == [2]
    assert targets["same token"][0, 4].nonzero().flatten().tolist() == [4]
    assert targets["start"][0, 5].nonzero().flatten().tolist() == [0]
    opener = targets["line opener"][0]
    assert [row.nonzero().flatten().tolist() for row in opener] == [[], [0], [0], [0], [3], [3]]
    previous = targets["previous token"].float()[:, None]  # a perfect previous-token head
    # exact: a mass of 1.0 on each query's one target key, averaged
    assert lab.head_scores(previous, targets["previous token"]).item() == 1.0
    expected_chance = sum(1 / (i + 1) for i in range(1, 6)) / 5  # query i spreads over i + 1 keys
    # float32 shares 1 / (i + 1) and their mean against float64: ~1e-7 relative
    assert lab.chance_score(targets["previous token"]) == pytest.approx(expected_chance, rel=1e-6)


def test_sizes_match_real_tensors():
    model = tiny_model()
    ids = torch.randint(0, 320, (3, 10), generator=torch.Generator().manual_seed(3))
    out = model(ids, use_cache=True, output_attentions=True)
    cached = sum(k.nbytes + v.nbytes for k, v in out.past_key_values)
    assert cached == lab.kv_cache_bytes(model.config, 10, batch=3, bytes_per_value=4)
    assert out.attentions[0].nbytes == lab.scores_bytes(3, 4, 10, 10, bytes_per_value=4)


def test_concatenating_and_preallocated_caches_agree():
    reserved, grown = lab.PreallocatedCache(2, 6, 3, 4), None
    for n in (2, 1, 3):
        piece = torch.randn(2, n, 3, 4)
        grown, view = lab.concat_append(grown, piece), reserved.append(piece)
        assert torch.equal(grown, view)  # exact: both copy the same pieces
    with pytest.raises(ValueError, match="cache full"):
        reserved.append(torch.randn(2, 1, 3, 4))


def test_best_time_is_positive():
    assert 0 <= lab.best_time(lambda: sum(range(100)), repeats=2) < 1


def test_best_time_counts_work_not_waiting():
    import time
    # sleeping is waiting, not work: the CPU clock (used without CUDA) does not count it
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        assert lab.best_time(lambda: time.sleep(0.05), repeats=1, warmup=0) < 0.02
    work = lab.best_time(lambda: sum(range(200_000)), repeats=3)
    assert 0 < work < 1


def test_generation_times_one_per_new_token():
    model = tiny_model()
    ids = torch.randint(3, 320, (1, 4), generator=torch.Generator().manual_seed(3))
    for use_cache in (True, False):
        times = lab.generation_times(model, ids, 5, use_cache=use_cache)
        assert times.shape == (5,) and (times >= 0).all() and (times[1:] >= times[:-1]).all()


def test_figures_and_frames():
    import matplotlib
    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    lab.use_cjk_font()  # a family name, or None where no CJK font is installed
    tokens = ["<s>", "a", "，", "b"]
    probs = torch.softmax(torch.randn(3, 4, 4), -1)
    frames = lab.heatmap_frames(list(probs), tokens, ["one", "two", "three"])
    assert len(frames) == 3 and all(f.startswith(PNG) for f in frames)
    assert len(lab.cache_frames(torch.randn(4, 8), tokens, prompt_len=2, dims=8)) == 3  # prefill + 2 steps
    for fig in [lab.mask_figure(causal_mask(2, 4)[0, 0], tokens, "cache", padding=torch.tensor([1, 0, 0, 0]) == 1),
                lab.attention_grid_figure([probs[:2], probs[1:]], tokens, [0, 2], "grid"),
                lab.gqa_figure(8, 4, "gqa")]:
        assert fig.axes
        plt.close(fig)


def test_attention_diagram_draws_the_config():
    import matplotlib
    matplotlib.use("Agg")
    from minimind import MiniMindConfig
    fig = lab.attention_diagram(MiniMindConfig())
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "q7·k3" in texts and "o_proj 768 → 768" in texts and "8×96 = 768" in texts


def test_five_token_example_is_the_package_attention():
    tokens, x, weights = lab.five_token_example()
    module = lab.toy_attention(weights)
    no_rotation = (torch.ones(5, 2), torch.zeros(5, 2))
    with torch.no_grad():
        out, _, probs = module(x[None], no_rotation, output_attentions=True)
    q, k, v = (x @ weights[n].T for n in ("q_proj", "k_proj", "v_proj"))  # [5, 4] each
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    heads = []
    for h in range(2):  # head h owns columns 2h, 2h+1
        s = q[:, 2 * h:2 * h + 2] @ k[:, 2 * h:2 * h + 2].T / math.sqrt(2)
        heads.append(torch.softmax(s.masked_fill(future, float("-inf")), -1) @ v[:, 2 * h:2 * h + 2])
    by_hand = torch.cat(heads, -1) @ weights["o_proj"].T
    # float32, a 5-key softmax and 4-term products: a few ulps
    torch.testing.assert_close(out[0], by_hand, atol=1e-6, rtol=1e-6)
    assert probs[0, 0, 4, [0, 4]].sum() > 0.8 and probs[0, 1, 4, 2] > 0.6  # 月 finds 月; ， for head 1


def test_explicit_path_and_blockwise_attention_match_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 37, 8, generator=g) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    # both are float32 softmax(QK^T/sqrt d)V in a different order of summation: ~1e-6
    for block in (1, 5, 16, 64):
        torch.testing.assert_close(lab.blockwise_attention(q, k, v, block), sdpa, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lab.explicit_path(q, k, v), sdpa, atol=1e-5, rtol=1e-5)
    k2, v2 = k[:, :2], v[:, :2]  # GQA: 4 query heads, 2 KV heads
    gqa = torch.nn.functional.scaled_dot_product_attention(q, k2, v2, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(lab.explicit_path(q, k2, v2), gqa, atol=1e-5, rtol=1e-5)
    # queries the last 3 of 37 keys (a cache): blockwise uses the bottom rows of the triangle
    full = lab.blockwise_attention(q, k, v, 8)
    torch.testing.assert_close(lab.blockwise_attention(q[:, :, -3:], k, v, 8), full[:, :, -3:],
                               atol=1e-5, rtol=1e-5)


def test_decode_step_traffic_counts():
    flops_mha, bytes_mha = lab.decode_step_traffic(8, 8, 96, 4096)
    flops_gqa, bytes_gqa = lab.decode_step_traffic(8, 4, 96, 4096)
    assert flops_mha == flops_gqa == 4 * 4096 * 8 * 96 and bytes_gqa * 2 == bytes_mha
    _, copied = lab.decode_step_traffic(8, 4, 96, 4096, copy=True)
    assert copied == bytes_gqa * 5  # read the cache, write twice its size, read that again


def test_head_verdict_says_near_chance():
    chances = {"same token": 0.10, "previous token": 0.08}
    assert lab.head_verdict({"same token": 0.12, "previous token": 0.09}, chances).startswith("near chance")
    assert lab.head_verdict({"same token": 0.75, "previous token": 0.03}, chances).startswith("same token")


def test_ablated_heads_zero_a_head_and_restore():
    model = tiny_model()
    ids = torch.randint(0, 320, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = model(ids).logits
        with lab.ablated_heads(model, {0: [1]}):
            ablated = model(ids).logits
        after = model(ids).logits
    assert not torch.allclose(before, ablated) and torch.equal(before, after)


def test_explain_attention_miss_names_the_cause():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 5, 8, generator=g)
    k, v = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g)
    expected = lab.explicit_path(q, k, v)
    assert lab.explain_attention_miss(expected.clone(), expected) is None
    k_rep, v_rep = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    unmasked = torch.softmax(q @ k_rep.transpose(-2, -1) / math.sqrt(8), -1) @ v_rep  # no mask
    assert "earlier queries" in lab.explain_attention_miss(unmasked, expected)[0]
    explained = lab.explain_attention_miss(unmasked, expected, q, k, v)
    assert "without a mask" in explained[0]
    swapped = torch.cat([expected[:, :1], lab.explicit_path(q, k.flip(1), v.flip(1))[:, 1:]], 1)
    assert "which key/value head" in lab.explain_attention_miss(swapped, expected)[0]


def test_explain_attention_miss_finds_the_top_left_mask_with_a_cache():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 2, 8, generator=g)  # 2 new queries after 3 cached keys
    k, v = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g)
    reference, explain = lab.attention_feedback()
    expected = reference(q, k, v)
    top_left = lab._attention_variant(q, k, v, mask="top-left").float()
    message, hint = explain(top_left, expected)
    assert "top-left" in message and "position 3" in hint
    over_queries = lab._attention_variant(q, k, v, dim=-2).float()
    assert "over the queries" in explain(over_queries, expected)[0]
    tiled = lab._attention_variant(q, k, v, heads="tile").float()
    assert "kv0, kv1, …, kv0" in explain(tiled, expected)[0]


def test_explain_mask_miss():
    expected = torch.ones(1, 5, dtype=torch.bool)
    assert "float32" in lab.explain_mask_miss(expected.float(), expected)[0]
    top_left = torch.ones(1, 5, dtype=torch.bool).tril()
    message, hint = lab.explain_mask_miss(top_left, expected)
    assert "you allow 1 key, the package 5" in message and "position 4" in hint


def test_explain_repeat_kv_miss_names_the_kv_heads_from_1():
    x = torch.arange(4.0).view(1, 1, 4, 1).expand(1, 2, 4, 3)  # KV head j filled with j
    expected = x.repeat_interleave(2, dim=2)
    message, _ = lab.explain_repeat_kv_miss(x.repeat(1, 1, 2, 1), expected)
    assert message.startswith("query head 2 got KV head 2; the package gives KV head 1")
    assert lab.explain_repeat_kv_miss(expected.clone(), expected) is None


def test_previous_line_opener():
    ids = torch.tensor([[1, 10, 7, 11, 7, 12]])  # <s> a ， b ， c
    previous = lab.head_targets(ids, punctuation_ids=[7])["previous line's opener"][0]
    rows = [row.nonzero().flatten().tolist() for row in previous]
    assert rows == [[], [], [], [0], [0], [2]]
