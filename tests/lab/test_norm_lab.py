"""minimind/lab/norm_lab.py: chapter 2's sphere coordinates, mean/RMS baseline, centring and figures."""
import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from minimind import MiniMindConfig, MiniMindForCausalLM  # noqa: E402
from minimind.lab import norm_lab  # noqa: E402


def test_plane_coordinates_put_rmsnorm_on_the_circle_and_layernorm_on_the_axis():
    torch.manual_seed(0)
    x = torch.randn(50, 64) + 0.7  # a real mean, so the two norms differ
    rms_out, ln_out = norm_lab.rms_and_layer_norm(x)
    rms_xy, ln_xy = norm_lab.plane_coordinates(rms_out), norm_lab.plane_coordinates(ln_out)
    # float32 norms, eps 1e-6 next to mean squares near 1: agreement to ~1e-5 relative
    assert torch.allclose(rms_xy.norm(dim=-1), torch.full((50,), 8.0, dtype=torch.float64), rtol=1e-4)
    assert ln_xy[:, 0].abs().max() < 1e-4
    assert torch.allclose(ln_xy[:, 1], torch.full((50,), 8.0, dtype=torch.float64), rtol=1e-4)


def test_mean_over_rms_is_the_sine_of_the_angle_to_the_hyperplane():
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [3.0, 1.0, 1.0, 1.0]])
    ratio = norm_lab.mean_over_rms(x)
    along, rest = norm_lab.plane_coordinates(x).T
    assert ratio.tolist()[:2] == [1.0, 0.0]
    assert torch.allclose(ratio, along.abs() / torch.hypot(along, rest))


def test_noise_baseline_matches_random_vectors():
    torch.manual_seed(0)
    measured = norm_lab.mean_over_rms(torch.randn(20000, 256)).mean().item()
    # 20000 samples of a half-normal of mean ~0.05, std ~0.03: the sample mean is within ~2e-4;
    # the RMS fluctuates by ~4% per vector, which moves the ratio's mean by well under 1%
    assert measured == pytest.approx(norm_lab.noise_mean_over_rms(256), rel=0.02)
    assert norm_lab.noise_mean_over_rms(256) == pytest.approx(math.sqrt(2 / (math.pi * 256)))


def _tiny_model():
    config = MiniMindConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=100)
    torch.manual_seed(0)
    return MiniMindForCausalLM(config).eval()


def test_centring_is_undone_after_the_experiment_and_changes_the_loss_of_a_shifted_model():
    model = _tiny_model()
    ids = torch.randint(0, 100, (2, 16))
    with torch.no_grad():
        before = model(ids, labels=ids).loss.item()
        model.model.embed_tokens.weight.add_(0.5)  # a shared offset: now centring matters
        shifted = model(ids, labels=ids).loss.item()
    centred = norm_lab.loss_with_centring(model, ids, which=("block", "qk", "final"))
    with torch.no_grad():
        after = model(ids, labels=ids).loss.item()
    assert after == shifted and shifted != before  # the patch is gone, the model is as it was
    assert centred != pytest.approx(shifted, abs=1e-4)


def test_centred_norm_subtracts_the_mean_first():
    norm = norm_lab.RMSNorm(8, eps=1e-6)
    x = torch.randn(3, 8) + 2.0
    with torch.no_grad():
        got = norm_lab.centred(norm)(x)
    assert torch.allclose(got, norm.norm(x - x.mean(-1, keepdim=True)))


def _texts(fig):
    return [t for ax in fig.axes for t in ax.texts] + [ax.title for ax in fig.axes]


def test_norm_diagram_is_drawn_from_the_config():
    import matplotlib.pyplot as plt
    fig = norm_lab.norm_diagram(MiniMindConfig())
    words = " ".join(t.get_text() for t in _texts(fig))
    assert "768" in words and "96" in words and "33 norms" in words and "1e-06" in words
    assert "residual stream" in words and "+" in words  # the skip path the norms read from
    assert min(t.get_fontsize() for t in _texts(fig) if t.get_text()) >= 9
    assert fig.get_size_inches()[0] == 7
    plt.close(fig)


def test_sphere_figure_draws_both_panels():
    import matplotlib.pyplot as plt
    torch.manual_seed(0)
    fig = norm_lab.sphere_figure(torch.randn(10, 3), torch.randn(20, 32))
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] == 7
    plt.close(fig)


def test_norm_inputs_and_output_is_one_scored_pass_with_every_norm_seen():
    model = _tiny_model()
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 8))
    seen, out = norm_lab.norm_inputs_and_output(model, ids)
    with torch.no_grad():
        again = model(ids, labels=ids)
    assert out.loss.item() == again.loss.item()  # same weights, same input, same kernels: exact
    assert len(seen) == 4 * 2 + 1  # two block norms and two QK-Norms per block, one final norm
    heads = model.config.num_attention_heads
    assert seen["model.layers.0.input_layernorm"].shape == (16,)  # one RMS per token
    assert seen["model.layers.0.self_attn.q_norm"].shape == (16 * heads,)  # per token and head
    assert not any(m._forward_hooks for m in model.modules())  # the hooks are gone


def test_prediction_sureness_of_uniform_and_certain_predictions():
    uniform = torch.zeros(3, 50)
    entropy, top = norm_lab.prediction_sureness(uniform)
    assert abs(entropy - math.log(50)) < 1e-12 and abs(top - 1 / 50) < 1e-12  # float64 inside
    certain = torch.full((3, 50), -1e4)
    certain[:, 7] = 0
    entropy, top = norm_lab.prediction_sureness(certain)
    assert entropy < 1e-12 and abs(top - 1) < 1e-12  # e^-1e4 underflows to 0 in float64
