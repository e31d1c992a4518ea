"""minimind.lab.rope_lab: the long-context scalings of chapter 3 and its pairing diagram."""
import math

import pytest
import torch

import minimind
from minimind.lab import rope_lab
from minimind.rope import precompute_freqs_cis, rope_frequencies


def test_ntk_base_slows_the_slowest_pair_by_the_factor():
    dim, base, factor = 64, 1e6, 4
    plain, ntk = rope_frequencies(dim, base), rope_frequencies(dim, rope_lab.ntk_base(base, factor, dim))
    assert ntk[0] == plain[0] == 1.0  # pair 0 untouched
    # float32 frequencies: a relative tolerance of 1e-5 covers their rounding
    assert ntk[-1].item() == pytest.approx(plain[-1].item() / factor, rel=1e-5)


def test_tables_from_frequencies_match_the_package():
    freqs = rope_frequencies(96, 1e6)
    cos, sin = rope_lab.tables_from_frequencies(freqs, 50)
    ref_cos, ref_sin = precompute_freqs_cis(96, 50, 1e6)
    assert torch.equal(cos, ref_cos) and torch.equal(sin, ref_sin)


def test_scaled_tables():
    args = (64, 1024, 1e6, 4, 256)
    plain = rope_lab.scaled_rope_tables("plain", *args)
    assert torch.equal(plain[0], precompute_freqs_cis(64, 1024, 1e6)[0])
    pi_cos, _ = rope_lab.scaled_rope_tables("PI", *args)
    assert torch.allclose(pi_cos[4], plain[0][1], atol=1e-6)  # PI: position 4 looks like position 1
    yarn = rope_lab.scaled_rope_tables("YaRN", *args)
    scaling = {"original_max_position_embeddings": 256, "factor": 4, "beta_fast": 32,
               "beta_slow": 1, "attention_factor": 1.0}
    assert torch.equal(yarn[0], precompute_freqs_cis(64, 1024, 1e6, scaling)[0])
    boosted, _ = rope_lab.scaled_rope_tables("YaRN", *args, attention_factor=1.5)
    assert torch.allclose(boosted, yarn[0] * 1.5)
    with pytest.raises(ValueError):
        rope_lab.scaled_rope_tables("dynamic", *args)


def test_speed_scales():
    scales = rope_lab.speed_scales(64, 1e6, 4, 256)
    assert torch.allclose(scales["PI"], torch.full((32,), 0.25))
    assert scales["NTK-aware"][0] == 1 and scales["NTK-aware"][-1].item() == pytest.approx(0.25, rel=1e-5)
    assert scales["YaRN"][0] == 1 and scales["YaRN"][-1].item() == pytest.approx(0.25, rel=1e-5)


def test_band_means_skip_nan():
    losses = torch.tensor([[1.0, 2.0, float("nan"), 4.0], [3.0, 2.0, 6.0, 4.0]])
    means = rope_lab.band_means(losses, {"a": (0, 2), "b": (2, 4)})
    assert means == {"a": 2.0, "b": pytest.approx(14 / 3)}


def test_losses_with_tables_restores_the_model():
    config = minimind.MiniMindConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=1, vocab_size=50,
                                     max_position_embeddings=32)
    torch.manual_seed(0)
    model = minimind.MiniMindForCausalLM(config).eval()
    ids = torch.randint(0, 50, (2, 8))
    own = model.model.freqs_cos
    from minimind.loss import token_losses
    same = rope_lab.losses_with_tables(model, ids, model.model.freqs_cos, model.model.freqs_sin)
    assert torch.equal(same, token_losses(model, ids))
    D = config.head_dim
    other = rope_lab.losses_with_tables(model, ids, torch.ones(32, D), torch.zeros(32, D))
    assert not torch.allclose(other, same) and model.model.freqs_cos is own


def test_pairing_diagram_is_drawn_from_the_config():
    import matplotlib
    matplotlib.use("Agg")
    fig = rope_lab.pairing_diagram(minimind.MiniMindConfig())
    texts = " ".join(t.get_text() for t in fig.axes[0].texts) + fig.axes[0].get_title()
    assert "head_dim 96 = 48 pairs" in texts and "(i, i + 48)" in texts
    assert "[B, S, 8, 96]" in texts and "[B, S, 4, 96]" in texts and "not turned" in texts
    assert all(t.get_fontsize() >= 9 for t in fig.axes[0].texts)
    assert fig.get_figwidth() == 7
    assert f"{1e6 ** (-94 / 96):.2g}" in texts and math.isclose(fig.get_figheight(), 5.4)
