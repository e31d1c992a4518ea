"""minimind/lab/residual_lab.py: sub-layer writes, gradient profiles through depth, the short recorded training
run, the logit lens and its line-end readings, and the guess-grid figure."""
import pytest
import torch

from minimind.lab import residual_lab
from minimind.lab.probes import record_residual_stream, rms
from minimind.lab.variants import post_norm_model
from model_helpers import random_ids, tiny_config, tiny_model


def recorded(model, ids):
    with torch.no_grad(), record_residual_stream(model) as stream:
        out = model(ids)
    return stream, out


# --- what each sub-layer writes ---------------------------------------------------------------------------------

def test_sublayer_writes_add_up_to_the_block_output(ids):
    model = tiny_model()
    stream, _ = recorded(model, ids)
    writes = residual_lab.sublayer_writes(stream)
    assert len(writes) == 2
    for i, row in enumerate(writes):
        assert all(row[key].shape == ids.shape for key in row)
        assert torch.equal(row["stream"], rms(stream[i]["input"]))  # exact: the same rms of the same tensor
        # independent: the MLP's write recomputed from the block's own modules
        layer = model.model.layers[i]
        with torch.no_grad():
            mlp = layer.mlp(layer.post_attention_layernorm(stream[i]["after_attention"]))
        # the same MLP kernels, but the write is read back as (h + mlp) - h: an ulp of the stream (~2e-7)
        torch.testing.assert_close(row["mlp"], rms(mlp), atol=1e-6, rtol=1e-6)
        # a float32 cosine may overshoot 1 by a few ulps
        assert ((row["attention_cos"].abs() <= 1 + 1e-6) & (row["mlp_cos"].abs() <= 1 + 1e-6)).all()


def test_sublayer_write_cosines_on_a_constructed_stream():
    x = torch.randn(1, 3, 8)
    stream = {0: {"input": x, "after_attention": 3 * x, "output": 3 * x - 6 * x}}  # attention: +2x, MLP: -6x
    row = residual_lab.sublayer_writes(stream)[0]
    # float32 cosines of (rounded) parallel vectors of 8 entries: +-1 within a few ulps (1.2e-7 each)
    torch.testing.assert_close(row["attention_cos"], torch.ones(1, 3), atol=1e-6, rtol=0)
    torch.testing.assert_close(row["mlp_cos"], -torch.ones(1, 3), atol=1e-6, rtol=0)
    # -6x built as (3x - 6x) - 3x, then its RMS over 8 entries: a few float32 ulps of values ~6 (~5e-7)
    torch.testing.assert_close(row["mlp"], 6 * rms(x), atol=1e-5, rtol=1e-6)


# --- gradients through depth ------------------------------------------------------------------------------------

def test_gradient_profile_matches_a_plain_backward_and_clears_the_gradients(ids):
    model = tiny_model(num_hidden_layers=3)
    profile = residual_lab.gradient_profile(model, ids)
    assert all(p.grad is None for p in model.parameters())
    assert profile["params"].shape == profile["stream"].shape == (3,)
    assert profile["sigma"].shape == profile["gain"].shape == (3, 2)
    # independent: the same loss and block gradient norms from a plain backward pass
    loss = model(ids, labels=ids).loss
    loss.backward()
    by_hand = [sum(p.grad.pow(2).sum() for p in layer.parameters()).sqrt().item() for layer in model.model.layers]
    assert profile["loss"] == loss.item()  # exact: the same forward pass (autograd on both times)
    # the same gradients, their squares summed in another order (GPU attention backward may also add
    # atomically): ~1e-7 relative measured
    assert profile["params"].tolist() == pytest.approx(by_hand, rel=1e-5)
    # sigma: what block 0's first norm divides by is the embedding's RMS; the final norm's, the last output's
    stream, _ = recorded(model, ids)
    # exact: the same rms of the same embedding rows (a lookup, no arithmetic before it)
    assert profile["sigma"][0, 0].item() == rms(stream[0]["input"]).mean().item()
    # a forward with autograd vs one without: on a GPU attention may take another fused kernel, ~1e-6 relative
    assert profile["final_sigma"] == pytest.approx(rms(stream[2]["output"]).mean().item(), rel=1e-5)
    assert profile["top_stream"] > 0


def silence_writes(model):
    """Zero every sub-layer's output projection: attention and the MLP then write exactly nothing."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_(), layer.mlp.down_proj.weight.zero_()
    return model


def test_pre_norm_identity_path_passes_the_gradient_unchanged(ids):
    """With writes of zero, a Pre-Norm stack is the identity: every block's backward gain is exactly 1."""
    model = silence_writes(tiny_model(num_hidden_layers=4))
    gain = residual_lab.measured_block_gain(residual_lab.gradient_profile(model, ids))
    # exact: zero output projections send back exact zeros, so every block passes on the same gradient tensor
    assert torch.equal(gain, torch.ones(3))


def test_post_norm_gain_follows_the_jacobian_prediction(ids):
    """Post-Norm with silent sub-layers: each block only renormalises. Block l's output has RMS c_l (its second
    norm's gain), so the next block divides by c_l and multiplies by c_{l+1}: a backward gain of c_{l+1} / c_l."""
    torch.manual_seed(0)
    model = silence_writes(post_norm_model(tiny_config(num_hidden_layers=4)))
    gains = [1.0, 2.0, 0.5, 4.0]
    with torch.no_grad():
        for layer, c in zip(model.model.layers, gains):
            layer.post_attention_layernorm.weight.fill_(c)
    profile = residual_lab.gradient_profile(model, ids)
    assert profile["final_sigma"] != profile["final_sigma"]  # nan: a Post-Norm model has no final norm
    predicted = residual_lab.predicted_post_norm_gain(profile)
    measured = residual_lab.measured_block_gain(profile)
    # RMSNorm's eps (1e-6) against mean squares >= 0.25 lowers each RMS by <= 2e-6 relative (measured 2.3e-6 for
    # the product of two), float32 adds ~1e-7
    assert profile["sigma"][1:, 0].tolist() == pytest.approx(gains[:-1], rel=1e-5)
    assert predicted[1:].tolist() == pytest.approx([2.0, 0.25, 8.0], rel=1e-5)
    # the norm also removes the gradient's component along x (about 1/d of it): within a few percent
    assert measured[1:].tolist() == pytest.approx(predicted[1:-1].tolist(), rel=0.05)


def test_predicted_post_norm_gain_is_the_product_of_gain_over_sigma():
    profile = {"gain": torch.tensor([[1.0, 2.0], [0.5, 1.0]]), "sigma": torch.tensor([[4.0, 2.0], [1.0, 0.25]])}
    # exact: products and quotients of powers of two
    assert residual_lab.predicted_post_norm_gain(profile).tolist() == [0.25, 2.0]


def test_train_recording_lowers_the_loss_and_is_reproducible():
    rows = random_ids(batch=16, seq_len=12, seed=3)
    runs = []
    for _ in range(2):
        model = tiny_model(seed=0)
        runs.append(residual_lab.train_recording(model, rows, steps=12, lr=3e-3, batch_size=4, seed=0))
        assert not model.training and all(p.grad is None for p in model.parameters())
    run = runs[0]
    assert run["loss"].shape == (12,) and run["params"].shape == (12, 2)
    assert run["loss"][-4:].mean() < run["loss"][:4].mean()
    # exact: the same seeded run twice in one process
    assert torch.equal(runs[0]["loss"], runs[1]["loss"]) and torch.equal(runs[0]["params"], runs[1]["params"])


# --- the logit lens ---------------------------------------------------------------------------------------------

def test_logit_lens_last_point_is_the_models_logits(ids):
    model = tiny_model(num_hidden_layers=3)
    stream, out = recorded(model, ids)
    lens = residual_lab.logit_lens(model, stream)
    assert lens.shape == (4, *out.logits.shape)
    # exact: the model's final norm and head on the same last-block output
    assert torch.equal(lens[-1], out.logits)
    # the first point is the embedding itself, read through the final norm and the tied head
    with torch.no_grad():
        by_hand = model.lm_head(model.model.norm(model.model.embed_tokens(ids)))
    assert torch.equal(lens[0], by_hand)  # exact: the same norm and head on the same embedding rows
    assert torch.equal(residual_lab.read_stream(model, stream[1]["output"]), lens[2])  # exact: the same read
    assert residual_lab.lens_labels(3) == ["embedding", "after block 0", "after block 1", "after block 2"]


def test_line_end_readings_match_the_full_lens():
    model = tiny_model(num_hidden_layers=2)
    comma, stop = 7, 9
    line = [[11, 12, 13, comma, 14, 15, 16, stop], [21, 22, 23, stop, 24, 25, 26, comma]]  # lines of 3 characters
    ids = torch.tensor(line * 2)
    ids[2:, 2] = comma  # rows 2-3 end a line early: a mark after only 2 characters
    counts = [[1, 2, 3, 0, 1, 2, 3, 0]] * 2 + [[1, 2, 0, 0, 1, 2, 3, 0]] * 2
    stream, _ = recorded(model, ids)
    readings = residual_lab.line_end_readings(model, stream, ids, counts, [comma, stop], line_length=3)
    # independent: the whole lens, then the positions picked by hand
    lens = residual_lab.logit_lens(model, stream)  # [3, 4, 8, vocab]
    ends = [(0, 2), (0, 6), (1, 2), (1, 6), (2, 6), (3, 6)]  # (row, position): 3 read, next is a mark
    early = [(0, 1), (0, 5), (1, 1), (1, 5), (2, 1), (2, 5), (3, 1), (3, 5)]
    assert readings["positions"] == len(ends) and readings["positions_early"] == len(early)
    for k in range(3):
        right = sum(int(lens[k, r, s].argmax() == ids[r, s + 1]) for r, s in ends) / len(ends)
        p_mark = sum(lens[k, r, s].softmax(-1)[[comma, stop]].sum().item() for r, s in ends) / len(ends)
        wrong = sum(int(lens[k, r, s].argmax().item() in (comma, stop)) for r, s in early) / len(early)
        # shares of 6 positions: float32 vs float64 division, 3e-8 relative
        assert readings["right"][k].item() == pytest.approx(right, rel=1e-6)
        # the head on 6 gathered positions vs on the whole batch (other matmul shapes), then a float32 mean vs a
        # float64 one: ~4e-7 relative measured
        assert readings["p_mark"][k].item() == pytest.approx(p_mark, rel=1e-5)
        assert readings["early"][k].item() == wrong  # exact: a count over 8 positions, / 8 in binary


def test_line_end_readings_count_a_right_guess():
    """A model whose head always says 'comma' is right at every comma and never at a full stop."""
    model = tiny_model(num_hidden_layers=1)
    comma, stop = 7, 9
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied: the embedding too; every logit 0 ...
        model.lm_head.weight[comma] = 1.0  # ... except the comma's, positive whenever the normalised state sums > 0
        model.model.norm.weight.fill_(1.0)
    ids = torch.tensor([[11, 12, 13, comma, 14, 15, 16, stop]])
    stream = {0: {"input": torch.ones(1, 8, 64), "output": torch.ones(1, 8, 64)}}
    readings = residual_lab.line_end_readings(model, stream, ids, [[1, 2, 3, 0, 1, 2, 3, 0]], [comma, stop], 3)
    # exact: argmax picks the one positive logit; shares of 2 and 2 positions
    assert readings["right"].tolist() == [0.5, 0.5] and readings["early"].tolist() == [1.0, 1.0]
    assert readings["p_mark"][0].item() > 0.5


def test_guess_grid_figure_draws_every_guess():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    probs = torch.tensor([[0.1, 0.9], [0.5, 0.2]])
    fig = residual_lab.guess_grid_figure(probs, [["a", "b"], ["c", "dd"]], ["row 0", "row 1"], ["x", "y"], "t",
                                         actual=["b", "z"], highlight=[1])
    ax = fig.axes[0]
    drawn = [t.get_text() for t in ax.texts]
    assert sorted(drawn) == sorted(["a", "b", "c", "dd", "b", "z", "actual next"])  # guesses, then the actual row
    assert ax.images[0].get_clim() == (0, 1)
    plt.close(fig)


# --- direct logit attribution -----------------------------------------------------------------------------------

def test_direct_logit_attribution_adds_up_to_the_next_token_logits(ids):
    """The final norm is linear once its divisor is fixed: the writes' shares sum to the model's logit."""
    model = tiny_model(num_hidden_layers=3)
    stream, out = recorded(model, ids)
    shares = residual_lab.direct_logit_attribution(model, stream, ids)
    assert list(shares) == ["embedding"] + [f"{kind} {i}" for i in range(3) for kind in ("attention", "MLP")]
    assert all(v.shape == (ids.shape[0], ids.shape[1] - 1) for v in shares.values())
    logits = out.logits[:, :-1]
    # [B, S - 1]: the next token's logit against the mean logit
    logit = logits.gather(-1, ids[:, 1:, None])[..., 0] - logits.mean(-1)
    # seven float32 dot products summed vs one matmul of the summed stream: ulps of logits ~1 (~1e-6)
    torch.testing.assert_close(sum(shares.values()), logit, atol=1e-5, rtol=1e-5)


def test_write_logit_of_the_whole_stream_is_the_models_logit(ids):
    """Independent: the whole final stream as one 'write' is read exactly as the model reads it."""
    model = tiny_model(num_hidden_layers=2)
    stream, out = recorded(model, ids)
    final = stream[1]["output"]
    got = residual_lab.write_logit(model, final, final, ids)  # [B, S]: for the input token itself
    expected = out.logits.gather(-1, ids[..., None])[..., 0] - out.logits.mean(-1)
    # an elementwise product and sum vs RMSNorm then the head's matmul: float32 ulps (~1e-6 here)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # linear in the write: twice the write, twice the share (the divisor comes from the final stream only)
    torch.testing.assert_close(residual_lab.write_logit(model, 2 * final, final, ids), 2 * got,
                               atol=1e-5, rtol=1e-5)


def test_random_cosines_are_centred_with_spread_one_over_root_dim():
    cosines = residual_lab.random_cosines(256, pairs=20_000, seed=0)
    assert cosines.shape == (20_000,)
    # the mean of 20,000 cosines of spread 1/16 has a standard error of 4.4e-4: 5 of them allowed
    assert abs(cosines.mean().item()) < 2.2e-3
    # the spread is 1/sqrt(dim) up to O(1/dim) corrections and a sampling error of ~0.5%: 3% allowed
    assert cosines.std().item() == pytest.approx(1 / 16, rel=0.03)
    assert torch.equal(cosines, residual_lab.random_cosines(256, pairs=20_000, seed=0))  # exact: seeded


def test_block_diagram_draws_the_configs_sizes():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import minimind
    fig = residual_lab.block_diagram(minimind.MiniMindConfig())
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("8 query / 4 KV heads of 96" in t for t in texts)
    assert any("768 → 2432 → 768" in t for t in texts)
    assert all(t.get_fontsize() >= 9 for t in fig.axes[0].texts)
    assert fig.get_size_inches()[0] == 7
    plt.close(fig)


# --- Exercise 1's diagnosis of the usual wrong forwards ---------------------------------

@pytest.mark.parametrize("use_moe", [False, True])
def test_each_block_mistake_is_diagnosed_as_itself_and_the_right_forward_as_none(use_moe):
    model = tiny_model(use_moe=use_moe)
    block = model.model.layers[0]
    x = torch.randn(2, 5, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    pe = (model.model.freqs_cos[:5], model.model.freqs_sin[:5])
    with torch.no_grad():
        right = block(x, pe)[0]
        mistakes = residual_lab.block_forward_mistakes(block, x, pe)
        assert residual_lab.diagnose_block_forward(right, block, x, pe) is None
        for key, wrong in mistakes.items():
            # every mistake is far from the right output (not within the diagnosis tolerance)
            assert not torch.allclose(wrong, right, atol=1e-2), key
            assert residual_lab.diagnose_block_forward(wrong, block, x, pe) == \
                residual_lab.BLOCK_MISTAKES[key], key


def test_each_write_logit_mistake_is_diagnosed_as_itself(ids):
    model = tiny_model()
    stream, _ = recorded(model, ids)
    final, targets = stream[1]["output"], ids
    write = residual_lab.stream_writes(stream)["attention 0"]
    with torch.no_grad():
        right = residual_lab.write_logit(model, write, final, targets)
        assert residual_lab.diagnose_write_logit(right, model, write, final, targets) is None
        for key, wrong in residual_lab.write_logit_mistakes(model, write, final, targets).items():
            assert not torch.allclose(wrong, right, atol=1e-2), key
            assert residual_lab.diagnose_write_logit(wrong, model, write, final, targets) == \
                residual_lab.WRITE_LOGIT_MISTAKES[key], key


# --- chapter 7's additions of 2026-12-02: baselines and the gap in the Jacobian prediction ----------------------

def test_shuffled_write_cosines_pair_each_write_with_another_tokens_stream():
    """Streams that all point one way (a shared direction e) with writes along e: a write's cosine with any
    token's stream is the same, so the shuffled cosine equals the own-token one; no token keeps its own."""
    e = torch.zeros(8)
    e[0] = 1.0
    scale = torch.arange(1.0, 7.0).reshape(1, 6, 1)  # [1, 6, 1]: every token a multiple of e
    x = scale * e
    stream = {0: {"input": x, "after_attention": 3 * x, "output": 5 * x}}
    row = residual_lab.shuffled_write_cosines(stream)[0]
    assert row["attention_cos"].shape == row["mlp_cos"].shape == (6,)
    # float32 cosines of parallel vectors: 1 within a few ulps
    torch.testing.assert_close(row["mlp_cos"], torch.ones(6), atol=1e-6, rtol=0)
    # orthogonal writes (along e1) against streams along e0: 0 whatever the pairing
    stream[0]["after_attention"] = x + scale * torch.eye(8)[1]
    torch.testing.assert_close(residual_lab.shuffled_write_cosines(stream)[0]["attention_cos"],
                               torch.zeros(6), atol=1e-6, rtol=0)


def test_per_token_prediction_is_at_least_the_mean_sigma_one_and_norm_gain_is_measured(ids):
    torch.manual_seed(0)
    model = post_norm_model(tiny_config(num_hidden_layers=3))
    profile = residual_lab.gradient_profile(model, ids)
    assert profile["inv_sigma"].shape == (3, 2, ids.numel())
    assert profile["norm_gain"].shape == (3, 2)
    # exact identity: 1 / (mean of RMS) <= mean of 1 / RMS (Jensen), for each norm; float32 sums ~1e-6
    assert (profile["inv_sigma"].mean(-1) >= 1 / profile["sigma"] - 1e-5).all()
    # independent: a norm's backward gain by autograd on its own, from the same input
    norm = model.model.layers[1].input_layernorm
    x = (torch.randn(*ids.shape, model.config.hidden_size) * 3).requires_grad_()
    grad_out = torch.randn_like(x)
    norm(x).backward(grad_out)
    by_hand = (rms(x.grad).mean() / rms(grad_out).mean()).item()
    # an RMSNorm of gain 1 scales an orthogonal gradient by 1 / RMS(x) ~ 1/3: the same order
    assert 0.2 < by_hand < 0.5
    assert (profile["norm_gain"] > 0).all()


def test_mlp_through_input_norm_is_a_mistake_only_when_the_two_norms_differ(ids):
    model = tiny_model()
    block = model.model.layers[0]
    x = torch.randn(2, 5, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    pe = (model.model.freqs_cos[:5], model.model.freqs_sin[:5])
    with torch.no_grad():
        block.post_attention_layernorm.weight.copy_(block.input_layernorm.weight)  # as a fresh block
        assert "mlp_uses_input_norm" not in residual_lab.block_forward_mistakes(block, x, pe)
        block.post_attention_layernorm.weight.mul_(2.0)
        h = x + block.self_attn(block.input_layernorm(x), pe)[0]
        wrong = h + block.mlp(block.input_layernorm(h))
        assert residual_lab.diagnose_block_forward(wrong, block, x, pe) == \
            residual_lab.BLOCK_MISTAKES["mlp_uses_input_norm"]


def test_long_guesses_are_drawn_short_and_spelled_out():
    assert residual_lab._fitted("<think>") == ("‹t›", 9)
    assert residual_lab._fitted("，") == ("，", 10)
    assert residual_lab._fitted("EOS") == ("EOS", 9)
    import matplotlib.pyplot as plt
    fig = residual_lab.guess_grid_figure(torch.ones(1, 2) / 2, [["<think>", "a"]], ["row"], ["x", "y"], "t")
    assert "‹t› = <think>" in [t.get_text() for t in fig.texts]
    plt.close(fig)


class _Tokenizer:
    bos_token_id, eos_token_id = 1, 2
    pieces = {3: " ", 4: "\ufffd", 5: "月", 6: "\x07"}

    def decode(self, ids):
        return self.pieces[ids[0]]


def test_token_text_names_the_wrappers_and_marks_what_cannot_be_drawn():
    tok = _Tokenizer()
    drawn = [residual_lab.token_text(tok, i) for i in range(1, 7)]
    assert drawn == ["BOS", "EOS", "␣", "?", "月", "?"]


def test_lens_top_drops_the_begin_token_and_sorts_the_guesses():
    lens = torch.randn(3, 5, 10)  # [points, S, vocab]
    probs, ids = residual_lab.lens_top(lens)
    assert probs.shape == ids.shape == (3, 4, 3)
    assert torch.equal(ids[..., 0], lens[:, 1:].argmax(-1))
    assert (probs[..., :-1] >= probs[..., 1:]).all()


def test_lens_figure_titles_by_the_line_and_draws_one_point_or_every_point():
    import matplotlib.pyplot as plt
    probs = torch.tensor([[[0.5, 0.3, 0.1], [0.9, 0.05, 0.01]]] * 2)  # [2 points, 2, 3]
    guesses = [[["a", "b", "c"], ["d", "e", "f"]]] * 2
    points = ["embedding", "after block 0"]
    every = residual_lab.lens_figure("「月」", probs, guesses, points, ["x", "y"])
    title = every.axes[0].get_title()
    assert title == "「月」: the logit lens's top guess after each block"
    assert [t.get_text() for t in every.axes[0].texts] == ["a", "d", "a", "d"]
    one = residual_lab.lens_figure("「月」", probs, guesses, points, ["x", "y"], point=1)
    title = one.axes[0].get_title()
    assert title == "「月」, read after block 0: the three likeliest next tokens"
    assert sorted(t.get_text() for t in one.axes[0].texts) == list("abcdef")
    plt.close("all")
