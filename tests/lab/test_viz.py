"""minimind/viz.py: the pure functions behind the book's pictures, and the frame-player widget."""
import math

import torch

from model_helpers import tiny_model
from minimind.lab.probes import record_residual_stream, rms
from minimind.rope import precompute_freqs_cis, rope_frequencies
from minimind.loss import token_losses
from minimind.lab.viz import (bucket_means, changed_fraction, norm_readings, rope_score, rope_scores,
                              rotation_figure, unit_pairs, windowed_token_losses)


def test_frame_player_links_slider_and_stack():
    from minimind.lab.viz import frame_player
    box = frame_player([b"a", b"b", b"c"], [100, 200, 400], description="position", caption="watch q·k",
                       start=1)
    slider, stack, caption = box.children
    assert [label for label, _ in slider.options] == ["100", "200", "400"]
    assert slider.label == "200" and slider.index == 1
    assert len(stack.children) == 3 and stack.selected_index == 1 and "watch q·k" in caption.value
    assert box.link.source == (slider, "index") and box.link.target == (stack, "selected_index")
    try:
        frame_player([b"a", b"b"], [1], description="x")
    except ValueError as error:
        assert "2 frames but 1 labels" in str(error)
    else:
        raise AssertionError("a label per frame is required")


def test_a_player_drawn_per_edition_links_both_stacks():
    """zh_frames: a second Stack, classed for the Chinese pages, moved by the same slider."""
    from minimind.lab.viz import READOUT_CSS, frame_player
    box = frame_player([b"a", b"b"], ["1", "2"], caption="c", zh_frames=[b"x", b"y"], start=1)
    slider, english, chinese, caption = box.children
    assert english._dom_classes == ("mm-en",) and chinese._dom_classes == ("mm-zh",)
    assert [c.value for c in chinese.children] == [b"x", b"y"] and chinese.selected_index == 1
    assert box.zh_link.source == (slider, "index")
    assert box.zh_link.target == (chinese, "selected_index")
    assert "html[lang^=zh] .mm-en{display:none!important}" in READOUT_CSS
    try:
        frame_player([b"a", b"b"], ["1", "2"], zh_frames=[b"x"])
    except ValueError as error:
        assert "2 frames but 1 Chinese frames" in str(error)
    else:
        raise AssertionError("a Chinese frame per frame is required")


def test_a_figure_drawn_per_edition():
    from minimind.lab.viz import edition_figure
    box = edition_figure(b"en", b"zh")
    english, chinese, style = box.children
    assert (english.value, english._dom_classes) == (b"en", ("mm-en",))
    assert (chinese.value, chinese._dom_classes) == (b"zh", ("mm-zh",))
    bundle = box._repr_mimebundle_()
    assert bundle["text/plain"] == "[a figure, drawn for each edition]"
    assert bundle["image/png"] == "ZW4="  # the English picture where widgets cannot show


def test_forward_stages_and_rope_angles():
    from minimind.lab.viz import forward_stages, rope_pair_angles
    model = tiny_model()
    stages = forward_stages(model, torch.randint(0, 320, (1, 4)))
    assert [s[0] for s in stages][:2] == ["input_ids", "embed_tokens"] and len(stages) == 2 + 2 + 2
    assert stages[-1][1].shape == (1, 4, 320)
    angles = rope_pair_angles(3, torch.tensor([1.0, 0.5, 0.25]), [0, 2])
    assert torch.equal(angles, torch.tensor([3.0, 0.75]))  # exact: 3 * 1 and 3 * 0.25 in binary


def test_norm_readings_follow_the_stream_and_normalise_to_unit_rms(ids):
    model = tiny_model()
    with record_residual_stream(model) as stream, torch.no_grad():
        out = model(ids)
    readings = norm_readings(model, stream)
    assert [r["label"] for r in readings] == ["embedding", "0 +attn", "0 +ffn", "1 +attn", "1 +ffn"]
    assert torch.equal(readings[0]["stream"], rms(stream[0]["input"]))  # exact: the same rms of the same tensor
    # exact: layer 0's output is layer 1's input, the same tensor
    assert torch.equal(readings[2]["stream"], rms(stream[1]["input"]))
    for r in readings:
        assert r["stream"].shape == ids.shape
        # not rounding: eps = 1e-6 against the embedding's mean square (~0.016, less for some rows) lowers the
        # RMS by up to 5e-5 here (fixed seeds); float32 adds ~1e-7
        torch.testing.assert_close(r["unit"], torch.ones_like(r["unit"]), atol=1e-4, rtol=0)
    # the last point is read by the final norm; exact: the same norm on the same tensor as in the forward pass
    assert torch.equal(readings[-1]["normed"], rms(out.hidden_states))
    assert readings[-1]["gain"] == rms(model.model.norm.weight).item()  # exact: the same rms of the same weight


def test_unit_pairs_uses_the_rotate_half_layout():
    v = unit_pairs(torch.tensor([0.0, math.pi / 2]))
    # pair i = (v[i], v[i + 2]); pi / 2 rounded to float32 leaves cos(pi / 2) = -4.4e-8
    torch.testing.assert_close(v, torch.tensor([1.0, 0.0, 0.0, 1.0]), atol=1e-7, rtol=0)


def test_rope_score_is_the_dot_product_of_rotated_vectors_and_depends_on_distance_only():
    cos, sin = precompute_freqs_cis(8, 64, 1e4)
    q, k = unit_pairs(torch.tensor([0.3, 1.0, 2.0, 0.5])), unit_pairs(torch.tensor([1.3, 0.2, 0.7, 2.5]))
    freqs = rope_frequencies(8, 1e4)
    # pair i contributes cos(angle_q - angle_k + (m - n) theta_i) for unit pairs
    expected = torch.cos(torch.tensor([0.3, 1.0, 2.0, 0.5]) - torch.tensor([1.3, 0.2, 0.7, 2.5]) + 5 * freqs).sum()
    # rotating then dotting vs the cosine of summed angles: float32 on 4 terms of size <= 1, ~1e-6
    assert abs(rope_score(q, k, cos, sin, 7, 2) - expected.item()) < 1e-5
    # the tables round angles 40 theta and 35 theta (up to 40 rad, ulp 3.8e-6) to float32: <= ~5e-6 here
    assert abs(rope_score(q, k, cos, sin, 40, 35) - rope_score(q, k, cos, sin, 7, 2)) < 1e-5
    assert abs(rope_score(q, k, cos, sin, 7, 3) - rope_score(q, k, cos, sin, 7, 2)) > 1e-3


def test_token_losses_average_to_the_model_loss():
    model = tiny_model()
    ids = torch.randint(0, 320, (2, 9), generator=torch.Generator().manual_seed(0))
    losses = token_losses(model, ids)
    assert losses.shape == (2, 8)
    # the same per-token float32 losses, averaged by another reduction: a 16-term mean of values ~6, ~1e-7 relative
    torch.testing.assert_close(losses.mean(), model(ids, labels=ids).loss, rtol=2e-6, atol=0)


def test_windowed_token_losses_match_separate_windows():
    model = tiny_model()
    ids = torch.randint(0, 320, (2, 12), generator=torch.Generator().manual_seed(0))
    losses = windowed_token_losses(model, ids, window=4)
    assert losses.shape == (2, 11)
    assert torch.isnan(losses[:, [3, 7]]).all() and not torch.isnan(losses[:, [0, 1, 2, 4, 8, 10]]).any()
    # a batch of 6 windows vs 2 rows: other matmul shapes, 2 layers of float32 on losses ~7 (~2e-6 measured)
    torch.testing.assert_close(losses[:, 4:7], token_losses(model, ids[:, 4:8]), atol=1e-5, rtol=0)
    # first window: same context, likewise
    torch.testing.assert_close(losses[:, :3], token_losses(model, ids)[:, :3], atol=1e-5, rtol=0)


def test_bucket_means_average_batch_and_blocks_skipping_nan():
    values = torch.arange(10.0).repeat(2, 1)  # [2, 10]
    assert torch.equal(bucket_means(values, 4), torch.tensor([1.5, 5.5, 8.5]))  # exact: means of small integers
    values[:, 0] = float("nan")
    assert torch.equal(bucket_means(values, 4), torch.tensor([2.0, 5.5, 8.5]))


def test_rotation_figure_panels_legend_and_readable_text():
    import matplotlib
    import matplotlib.pyplot as plt
    matplotlib.use("Agg")
    freqs = rope_frequencies(96, 1e6)
    fig = rotation_figure(5, 2, freqs, [0, 3], score=1.0)
    # printed to 2 digits: theta_3 = 1e6^(-6/96) = 0.4217, far from a rounding edge
    assert len(fig.axes) == 1 and [t.get_text() for t in fig.axes[0].texts] == ["pair 0\nθ = 1", "pair 3\nθ = 0.42"]
    plt.close(fig)
    for pairs in ([0, 8, 16, 24], [0, 3]):
        fig = rotation_figure(100, 97, freqs, pairs, score=1.0, q_start=torch.ones(48),
                              curve=([0, 1, 3, 1000], [2, 1, 0, 0]))
        arrows, curve = fig.axes
        assert len(arrows.texts) == len(pairs) and "distance 3" in fig._suptitle.get_text()
        blue, orange = arrows.collections  # one quiver per vector, one arrow per pair
        assert blue.N == orange.N == len(pairs)
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend == ["query q at position 100", "key k at position 97"]
        assert [line.get_color() for line in fig.legends[0].get_lines()] == ["tab:blue", "tab:orange"]
        assert [t.get_text() for t in curve.get_xticklabels()] == ["0", "1", "10", "100", "1000"]
        assert fig.get_size_inches()[0] <= 7.5  # the book's ~700 px column at 80-100 dpi
        texts = [fig._suptitle, *fig.legends[0].get_texts()]
        for ax in fig.axes:
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *ax.get_xticklabels(),
                      *ax.get_yticklabels()]
        small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_text() and t.get_fontsize() < 9]
        assert not small, f"text under 9 pt: {small}"
        plt.close(fig)


def test_rope_scores_is_rope_score_for_many_position_pairs():
    cos, sin = precompute_freqs_cis(16, 300, 1e4)
    q, k = torch.randn(16, generator=torch.Generator().manual_seed(0)), torch.randn(16)
    query_positions, key_positions = [7, 40, 299, 3], [2, 35, 0, 10]
    scores = rope_scores(q, k, cos, sin, query_positions, key_positions)
    assert scores.shape == (4,)
    expected = [rope_score(q, k, cos, sin, m, n) for m, n in zip(query_positions, key_positions)]
    # batched sum over the last dim vs one full sum per pair: 16 float32 products in another order, ~1e-6
    torch.testing.assert_close(scores, torch.tensor(expected), atol=1e-5, rtol=1e-5)
    # same distance, same score, up to the float32 angles 40 theta, 35 theta (ulp 3.8e-6 rad): ~6e-7 here, up
    # to ~2e-5 for other draws of the unseeded k
    assert abs(scores[0] - scores[1]) < 1e-4


def test_changed_fraction_sees_fp32_steps_a_bfloat16_vector_cannot():
    steps = torch.tensor([0.0, 1e-9, 1e-6, 1e-4, 1e-2])
    fp32, bf16 = changed_fraction(steps, torch.float32), changed_fraction(steps, torch.bfloat16)
    assert fp32[0] == 0 and bf16[0] == 0  # no turn, no change (shares of 4096 pairs: exact in binary)
    assert fp32[1] < 0.1 and fp32[2] == 1  # fp32 resolves a micro-radian turn in every pair
    assert bf16[2] < 0.01 and bf16[3] < 0.5 and bf16[4] == 1  # bfloat16 needs about 1e-2 rad
    assert torch.equal(changed_fraction(steps, torch.float32), fp32)  # exact: seeded, the same ops again


def test_palette_png_keeps_the_size_and_shrinks_the_file():
    import io

    import matplotlib
    import matplotlib.pyplot as plt
    from PIL import Image

    from minimind.lab.viz import figure_png, palette_png
    matplotlib.use("Agg")
    fig = rotation_figure(5, 2, rope_frequencies(8, 1e4), [0, 1, 2, 3], score=1.0)
    png = figure_png(fig)
    small = palette_png(png, colors=16)
    assert Image.open(io.BytesIO(small)).size == Image.open(io.BytesIO(png)).size
    assert len(small) < len(png) and len(Image.open(io.BytesIO(small)).getcolors()) <= 16
    plt.close("all")


# --- chapters 1 and 2 (issue 9): architecture diagram, stage frames, top tokens, eps ---------------------------

def _texts(fig):
    texts = []
    for ax in fig.axes:
        legend = ax.get_legend().get_texts() if ax.get_legend() else []
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *ax.get_xticklabels(), *ax.get_yticklabels(),
                  *legend]
    return [t for t in texts if t.get_text()]


def _readable(fig, min_points=9, max_width=7.5):
    assert fig.get_size_inches()[0] <= max_width
    small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < min_points]
    assert not small, f"text under {min_points} pt: {small[:3]}"


def test_architecture_figure_is_drawn_from_the_config():
    import matplotlib
    import matplotlib.pyplot as plt

    from minimind import MiniMindConfig
    from minimind.lab.viz import architecture_figure
    matplotlib.use("Agg")
    for config in [MiniMindConfig(), MiniMindConfig(hidden_size=512, num_hidden_layers=4, use_moe=True)]:
        fig = architecture_figure(config)
        text = "\n".join(t.get_text() for t in _texts(fig))
        d, dff = config.hidden_size, config.intermediate_size
        assert f"× {config.num_hidden_layers}" in text and f"{config.vocab_size} × {d}" in text
        assert f"k_proj, v_proj {d} → {config.num_key_value_heads * config.head_dim}" in text
        assert f"[B, S, {config.num_attention_heads}, {config.head_dim}]" in text
        assert f"{d} → {dff}" in text and f"logits [B, S, {config.vocab_size}]" in text
        assert ("experts" in text) == config.use_moe
        _readable(fig)
        plt.close(fig)


def test_stage_figure_shares_one_symmetric_scale_and_labels_rows_with_tokens():
    import matplotlib
    import matplotlib.pyplot as plt

    from minimind.lab.viz import stage_figure
    matplotlib.use("Agg")
    rows = ["<s>", "床 (bed)", "前 (before)"]
    fig = stage_figure("layers.0 output", torch.randn(1, 3, 16) * 5, rows, vmax=30.0)
    heat, bars = fig.axes[0], fig.axes[1]
    norm = heat.images[0].norm
    assert (norm.vmin, norm.vmax) == (-30.0, 30.0)
    assert [t.get_text() for t in heat.get_yticklabels()] == rows
    assert len(fig.axes) == 3 and "[1, 3, 16]" in heat.get_title()  # heat map, RMS bars, colourbar
    assert bars.get_xlim() == (0.01, 1000) and len(bars.patches) == 3
    _readable(fig)
    plt.close(fig)


def test_top_tokens_and_their_figure_show_text():
    import matplotlib
    import matplotlib.pyplot as plt

    from minimind.lab.viz import top_tokens, top_tokens_figure
    matplotlib.use("Agg")
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0], [3.0, 0.5, 0.0, -2.0]])
    probs, ids = top_tokens(logits, k=2)
    assert ids.tolist() == [[1, 2], [0, 1]]
    assert torch.equal(probs, logits.softmax(-1).gather(1, ids))  # exact: topk and gather read the same softmax
    texts = [["乙", "丙"], ["甲", "乙"]]
    fig = top_tokens_figure(probs, texts, ["a", "b"], "next tokens")
    cells = [t.get_text() for t in fig.axes[0].texts]
    assert cells[0] == f"乙  {probs[0, 0]:.2f}" and len(cells) == 4  # exact: the same float, the same format
    assert fig.axes[0].images[0].norm.vmax == 1
    _readable(fig)
    plt.close(fig)


def test_token_labels_and_characters_since_break():
    from minimind.lab.viz import characters_since_break, token_labels

    class Tokenizer:
        def decode(self, ids):
            return {1: "<s>", 7: "明月", 8: "光", 9: "，"}[ids[0]]

    assert token_labels(Tokenizer(), [1, 7, 8], {"明月": "bright moon"}) == ["<s>", "明月 (bright moon)", "光"]
    assert characters_since_break(["", "床", "前", "明月", "光", "，", "疑是", "\n"]) == [0, 1, 2, 4, 5, 0, 2, 0]


def test_norm_inputs_and_output_records_what_every_norm_reads(ids):
    from minimind.lab.norm_lab import norm_inputs_and_output
    from minimind.norm import RMSNorm
    model = tiny_model()
    seen, _ = norm_inputs_and_output(model, ids)
    assert set(seen) == {n for n, m in model.named_modules() if isinstance(m, RMSNorm)}
    with record_residual_stream(model) as stream, torch.no_grad():
        model(ids)
    # exact: the same forward pass run twice without autograd, the same rms of the same tensors
    assert torch.equal(seen["model.layers.0.input_layernorm"], rms(stream[0]["input"]).flatten())
    assert torch.equal(seen["model.norm"], rms(stream[1]["output"]).flatten())
    heads = model.config.num_attention_heads
    assert seen["model.layers.1.self_attn.q_norm"].shape == (ids.numel() * heads,)
    assert all(not m._forward_hooks for m in model.modules())  # hooks removed


def test_eps_response_is_r_over_root_of_r_squared_plus_eps():
    from minimind.lab.viz import eps_response
    r = torch.tensor([0.0, 1e-4, 1e-3, 1.0], dtype=torch.float64)
    # RMSNorm computes in float32 whatever the input dtype: ~1e-7 relative against the float64 formula
    torch.testing.assert_close(eps_response(r, 1e-6), r / (r ** 2 + 1e-6).sqrt(), rtol=1e-6, atol=1e-12)
    # r = 1e-3 is not exact in float32 (r^2 = eps only to ~1e-7): ~1e-7 from 2^-0.5
    assert abs(eps_response(torch.tensor([1e-3]), 1e-6).item() - 2 ** -0.5) < 1e-6


def test_eps_figure_marks_the_chosen_eps():
    import matplotlib
    import matplotlib.pyplot as plt

    from minimind.lab.viz import eps_figure
    matplotlib.use("Agg")
    groups = {"embedding": torch.rand(50) * 0.1, "stream": 1 + 10 * torch.rand(50)}
    losses = {1e-6: 5.17, 1e-2: 5.22, 1.0: 8.56}
    fig = eps_figure(1e-2, groups, losses, uniform_loss=8.76)
    curve, loss_ax = fig.axes[0], fig.axes[1]
    assert "loss 5.220" in loss_ax.get_title()
    assert loss_ax.lines[1].get_xdata()[0] == 1e-2  # exact: the eps passed in, drawn as given
    assert [t.get_text() for t in curve.get_legend().get_texts()][-2:] == ["embedding", "stream"]
    _readable(fig)
    plt.close(fig)


def test_use_cjk_font_puts_the_family_first_when_installed():
    import matplotlib.pyplot as plt

    from minimind.lab.viz import use_cjk_font
    before = list(plt.rcParams["font.family"])
    try:
        family = use_cjk_font()
        if family is not None:
            assert plt.rcParams["font.family"][0] == family
        assert use_cjk_font("No Such Font Family XY") is None
    finally:
        plt.rcParams["font.family"] = before


def test_the_diagram_helpers_draw_readable_pieces():
    import matplotlib.pyplot as plt
    import numpy as np

    from minimind.lab import diagram
    fig, ax = diagram.canvas(7, 3.5, title="a test diagram")
    assert ax.get_ylim() == (0, 50)  # one unit is as long both ways
    diagram.box(ax, 2, 30, 20, 8, "q_proj 768 → 768", "attn")
    diagram.arrow(ax, (12, 30), (12, 20), text="split")
    diagram.node(ax, 40, 10)
    diagram.shape(ax, 50, 45, "[B, S, 768]")
    centres = diagram.segments(ax, 30, 30, 64, 5, [96] * 8, labels=[f"h{i}" for i in range(8)])
    assert len(centres) == 8 and np.allclose(np.diff(centres), 8)  # equal heads, equal widths
    mask = np.triu(np.full((4, 4), -np.inf), 1)
    diagram.grid(ax, 60, 2, 20, 20, mask, row_labels=list("abcd"), col_labels=list("abcd"),
                 numbers=True, title="causal mask")
    _readable(fig)
    plt.close(fig)
