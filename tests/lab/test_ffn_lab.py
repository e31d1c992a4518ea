"""minimind/lab/ffn_lab.py: the numbers behind chapter 5's figures (activations, widths, FLOPs, the gate)."""
import math

import torch
import torch.nn.functional as F

from model_helpers import random_ids, tiny_config, tiny_model
from minimind import MiniMindConfig, load_tokenizer
from minimind.feed_forward import FeedForward
from minimind.lab.ffn_lab import (
    activation_curves, ffn_ablation_losses, ffn_kinds, ffn_removed,
    flops_per_token_by_part, hidden_kept, keep_largest, line_positions, llama_width,
    matmul_flops_per_token, mean_by_line_position, near_zero_share, record_ffn,
    sign_consistency, swiglu_figure, token_pieces, top_activations, top_token_purity,
    width_rule)


def test_activation_curves_match_closed_forms():
    x = torch.linspace(-4, 4, 81)
    curves = activation_curves(x)
    relu, drelu = curves["relu"]
    # exact: max(x, 0) and a 0/1 derivative involve no rounding
    assert torch.equal(relu, x.clamp(min=0)) and torch.equal(drelu, (x > 0).float())
    silu, dsilu = curves["silu"]
    sig = torch.sigmoid(x)
    # silu's kernel and its backward vs the closed forms written out: a few float32 ulps on values <= 4.1
    torch.testing.assert_close(silu, x * sig, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(dsilu, sig * (1 + x * (1 - sig)), atol=1e-6, rtol=1e-6)
    gelu, dgelu = curves["gelu"]  # exact GELU: x * Phi(x), derivative Phi(x) + x * phi(x)
    phi = torch.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    # erf-based kernels vs x * Phi(x) by hand: 1 + erf cancels near x = -4, so absolute: ulps of 1 times |x| <= 4
    torch.testing.assert_close(gelu, x * cdf, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(dgelu, cdf + x * phi, atol=2e-6, rtol=1e-5)
    fine = torch.linspace(-3, 0, 30001)
    low = activation_curves(fine, names=("silu",))["silu"][0]
    # the minimum is -0.278465 at x = -1.278465: 1e-4 covers the 4-digit literal (3.5e-5 off); float32 silu is
    # flat to an ulp (3e-8) over +-5e-4 around it, so another kernel may put the argmin anywhere there: 1e-3
    assert abs(low.min().item() + 0.2785) < 1e-4 and abs(fine[low.argmin()].item() + 1.2785) < 1e-3


def test_widths_parameters_and_flops_of_the_four_kinds():
    assert llama_width(768) == 2048 and llama_width(4096, multiple_of=256) == 11008  # LLaMA-7B's 11008
    assert MiniMindConfig().intermediate_size == 2432 == 64 * math.ceil(768 * math.pi / 64)
    kinds = ffn_kinds(MiniMindConfig())
    params = {name: sum(p.numel() for p in m.parameters()) for name, m in kinds.items()}
    assert list(params.values()) == [3 * 768 * 2432, 3 * 768 * 2048, 2 * 768 * 3072, 2 * 768 * 3648]
    assert params["SwiGLU, 8/3 rule (2048)"] == params["GELU MLP, 4x (3072)"]  # what the 8/3 rule is for
    for name, module in kinds.items():
        assert matmul_flops_per_token(module, 768) == 2 * params[name]


def test_flops_by_part_count_every_matrix_product():
    config = tiny_config()  # hidden 64, 2 layers, 4 q / 2 kv heads of 16, vocab 320
    model = tiny_model()
    S, L, d, i, V = 32, 2, 64, config.intermediate_size, 320
    parts = flops_per_token_by_part(model, S)
    assert parts["feed-forward"] == 2 * L * 3 * d * i
    assert parts["attention projections"] == 2 * L * (d * 64 + d * 32 * 2 + 64 * d)
    assert parts["attention scores"] == L * 2 * (2 * S * 16 * 4)  # QK^T and PV over the full S x S
    assert parts["LM head"] == 2 * d * V


def test_record_ffn_reads_both_branches_and_cleans_up():
    model = tiny_model()
    ids = torch.randint(0, 320, (2, 7))
    outputs = {}
    handle = model.model.layers[1].mlp.register_forward_hook(lambda m, a, out: outputs.update(out=out, x=a[0]))
    with record_ffn(model) as ffn, torch.no_grad():
        model(ids)
    handle.remove()
    mlp = model.model.layers[1].mlp
    gate, up = ffn[1]["gate"], ffn[1]["up"]
    assert gate.shape == up.shape == (2, 7, mlp.gate_proj.out_features)
    # exact: the same Linear and silu kernels on the same tensors as in the forward pass (dropout is off)
    assert torch.equal(gate, mlp.gate_proj(outputs["x"]))
    assert torch.equal(mlp.down_proj(F.silu(gate) * up), outputs["out"])
    assert all(not layer.mlp.gate_proj._forward_hooks and not layer.mlp.up_proj._forward_hooks
               for layer in model.model.layers)


def test_near_zero_share_and_top_activations():
    values = torch.tensor([0.0, 0.05, -0.05, 1.0, -1.0, 2.0])  # rms = sqrt(6.005 / 6) ~ 1.0004
    # exact: 3 of 6 and 1 of 4 entries, none close to the threshold (0.1 x the RMS)
    assert near_zero_share(values, 0.1) == 0.5
    assert near_zero_share(values * 100, 0.1) == 0.5  # scale-free
    assert near_zero_share(F.silu(torch.tensor([-1.28, -20.0, 3.0, 3.0])), 0.1) == 0.25  # silu(-1.28) is not 0
    acts = torch.tensor([[0.0, 5.0], [3.0, 1.0], [1.0, 4.0]])
    values, positions = top_activations(acts, 1, k=2)
    assert values.tolist() == [5.0, 4.0] and positions.tolist() == [0, 2]  # exact: topk returns stored values
    ids = torch.tensor([7, 8, 7])
    assert top_token_purity(acts, ids, k=2).tolist() == [0.5, 1.0]


def test_line_positions_count_characters_not_tokens():
    tokenizer = load_tokenizer("poetry-dense")
    text = "阊阖雄里闬，城阙。"  # 闬 is split over two byte-level tokens
    ids = [1] + tokenizer.encode(text, add_special_tokens=False) + [2]
    pieces = token_pieces(tokenizer, ids)
    assert pieces[0] == "<|im_start|>" and pieces[-1] == "<|im_end|>"
    assert b"".join(p for p in pieces if isinstance(p, bytes)).decode() == text
    positions, lengths = line_positions(pieces)
    texts = [tokenizer.decode([i]) for i in ids]
    assert texts[1:4] == ["阊阖", "雄", "里"] and positions[1:4] == [2, 3, 4]
    assert positions[4:7] == [5, 5, 0] and lengths[4:7] == [5, 5, 5]  # 闬's 2nd piece adds no character
    assert positions[7:] == [2, 0, 0] and lengths[7:] == [2, 2, 0]
    assert positions[0] == lengths[0] == 0


def test_mean_by_line_position():
    values = torch.tensor([1.0, 2.0, 3.0, 9.0, 5.0])
    positions, lengths = [1, 2, 1, 0, 2], [2, 2, 2, 2, 3]
    means = mean_by_line_position(values, positions, lengths, 2)
    assert means.tolist() == [2.0, 2.0]  # exact: means of small integers
    assert torch.isnan(mean_by_line_position(values, positions, lengths, 3)[0])


def test_width_rule_and_the_diagram_use_the_config():
    steps = width_rule(768)
    assert steps["rounded up"] == 38 and steps["width"] == 2432
    # float: d·π and d·π/64 as the config computes them, to a few ulps
    assert math.isclose(steps["d·π"], 768 * math.pi) and math.isclose(steps["blocks of 64"], 12 * math.pi)
    assert width_rule(512)["width"] == 1664  # 25.13 blocks, rounded up (nearest would give 1600)
    import matplotlib
    matplotlib.use("Agg")
    fig = swiglu_figure(MiniMindConfig())
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("gate_proj\n768 → 2432" == t for t in texts) and any("2432 → 768" in t for t in texts)
    assert any("5,603,328" in t for t in texts)  # 3 x 768 x 2432
    assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 9  # readable at the content width
    custom = swiglu_figure(MiniMindConfig(hidden_size=256, head_dim=64, intermediate_size=1024))
    assert any("1024: set in the config" in t.get_text() for t in custom.axes[0].texts)
    matplotlib.pyplot.close("all")


def test_keep_largest_keeps_by_magnitude():
    h = torch.tensor([[0.5, -3.0, 2.0, 0.1], [1.0, 2.0, 3.0, 4.0]])
    # exact: entries are copied or zeroed, no arithmetic
    assert keep_largest(h, 2).tolist() == [[0.0, -3.0, 2.0, 0.0], [0.0, 0.0, 3.0, 4.0]]
    assert torch.equal(keep_largest(h, 4), h)


def test_hidden_kept_hooks_every_down_proj_and_cleans_up():
    model = tiny_model()
    ids = torch.randint(0, 320, (2, 7))
    width = model.model.layers[0].mlp.down_proj.in_features
    with torch.no_grad():
        intact = model(ids).logits
        with hidden_kept(model, width):  # keeping every unit changes nothing: exact, same kernels
            assert torch.equal(model(ids).logits, intact)
        with hidden_kept(model, 1):
            assert not torch.allclose(model(ids).logits, intact)
    assert all(not layer.mlp.down_proj._forward_pre_hooks for layer in model.model.layers)


def test_ffn_ablation_losses_match_the_hooked_model():
    model = tiny_model()  # the independent path: the full forward, ffn_removed's hooks
    ids = random_ids(batch=3, seq_len=9)
    subsets = [[], [0], [1], [0, 1]]
    losses = ffn_ablation_losses(model, ids, subsets)
    assert list(losses) == [(), (0,), (1,), (0, 1)]
    for layers in subsets:
        with ffn_removed(model, layers), torch.no_grad():
            full = model(ids, labels=ids).loss.item()
        # the same kernels in the same order: equal to float32 rounding of the loss
        assert abs(losses[tuple(layers)] - full) < 1e-6


def test_sign_consistency_per_unit():
    silu_gate = torch.tensor([[2.0, 2.0, 0.0], [3.0, 2.0, 0.0], [1.5, 2.0, 0.0],
                              [0.5, 2.0, 0.0]])  # [N=4 tokens, I=3 units]
    up = torch.tensor([[1.0, 1.0, 1.0], [-1.0, 1.0, 1.0], [1.0, 1.0, 1.0],
                       [-5.0, -1.0, 1.0]])
    share = sign_consistency(silu_gate, up, open_above=1.0, min_open=2)
    # unit 0: open 3 times (0.5 is shut), 2 positive -> 2/3; unit 1: 3 of 4 positive;
    # unit 2: never open
    # float32 division: 2/3 to an ulp
    assert torch.allclose(share[:2], torch.tensor([2 / 3, 0.75])) and share[2].isnan()
    assert sign_consistency(silu_gate, up, min_open=4)[0].isnan()  # 0: open 3 times


def test_gate_figure_chinese_edition_has_no_glosses():
    """Issue #23: chapter 5's gate frames for the Chinese edition: no 床 (bed), Chinese
    titles; the English frame keeps its strings."""
    import re

    import matplotlib.pyplot as plt

    from minimind.lab.ffn_lab import gate_figure
    tokenizer = load_tokenizer("poetry-dense")
    ids = [1] + tokenizer.encode("床前", add_special_tokens=False)
    silu = torch.randn(len(ids), 12, generator=torch.Generator().manual_seed(0))
    units = torch.tensor([5, 0, 9])
    en, zh = (gate_figure(silu, units, tokenizer, ids, 2, {"床": "bed"}, zh=z)
              for z in (False, True))
    ax, zh_ax = en.axes[0], zh.axes[0]
    assert ax.get_title() == "poetry-dense, layer 2: SiLU(gate) per token and unit"
    assert [t.get_text() for t in ax.get_yticklabels()][1] == "床 (bed)"
    rows = [t.get_text() for t in zh_ax.get_yticklabels()]
    assert rows[1:] == ["床", "前"]  # the token texts alone
    texts = [zh_ax.get_title(), zh_ax.get_xlabel(), zh.axes[1].get_ylabel(), *rows]
    words = set(re.findall(r"[A-Za-z_]+", " ".join(texts)))
    assert words <= {"poetry", "dense", "SiLU", "gate", "token", "im_start"}, texts
    assert "3" in zh_ax.get_xlabel() and "6" in zh.axes[1].get_ylabel()  # 3 units, vmax
    assert [t.get_text() for t in zh_ax.get_xticklabels()] == ["5", "0", "9"]
    plt.close("all")
