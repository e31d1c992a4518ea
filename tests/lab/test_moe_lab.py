"""minimind/lab/moe_lab.py: router gradients, routing statistics, the bench-table reader and the routing frame."""
import pytest
import torch

from minimind.lab import moe_lab
from minimind.lab.probes import router_choices, router_load
from figure_helpers import english_words as latin_words, figure_texts
from model_helpers import random_ids, tiny_model


# --- where the router learns from ---------------------------------------------------------------------------

def test_moe_settings_switches_every_layer_and_restores():
    model = tiny_model(use_moe=True)
    with moe_lab.moe_settings(model, num_experts_per_tok=2, norm_topk_prob=False):
        assert all(layer.mlp.config.num_experts_per_tok == 2 for layer in model.model.layers)
        assert not model.model.layers[1].mlp.config.norm_topk_prob
    assert model.config.num_experts_per_tok == 1 and model.config.norm_topk_prob


def test_lm_loss_reaches_the_router_only_without_top1_renormalisation():
    model = tiny_model(use_moe=True)
    ids = random_ids(2, 16)
    default = moe_lab.gate_gradient_norms(model, ids)
    with moe_lab.moe_settings(model, norm_topk_prob=False):
        plain = moe_lab.gate_gradient_norms(model, ids)
    with moe_lab.moe_settings(model, num_experts_per_tok=2):
        top2 = moe_lab.gate_gradient_norms(model, ids)
    for norms in (default, plain, top2):
        assert len(norms["lm"]) == len(norms["aux"]) == 2 and all(a > 0 for a in norms["aux"])
    # top-1 with renormalisation: the weight is p / p = 1, so the LM gradient is float rounding, not signal:
    # about 1e-7 of the real one (measured 8.2e-8, 1.0e-7 on the default kernels), a real one would be ~1
    assert max(default["lm"]) < 1e-5 * min(plain["lm"])
    assert min(plain["lm"]) > 1e-3 and min(top2["lm"]) > 1e-3  # real gradients: measured 0.21 at least
    # the model is back in eval mode and no .grad was left behind
    assert not model.training and all(p.grad is None for p in model.parameters())


def test_no_aux_gradient_when_the_coefficient_is_zero():
    model = tiny_model(use_moe=True, router_aux_loss_coef=0.0)
    norms = moe_lab.gate_gradient_norms(model, random_ids(1, 8))
    assert norms["aux"] == [0.0, 0.0]  # exact: no gradient arrives at all, reported as 0.0


def test_router_inputs_are_what_the_router_reads():
    model = tiny_model(use_moe=True)
    ids = random_ids(2, 9)
    out, inputs = moe_lab.router_inputs(model, ids)
    assert len(inputs) == 2 and inputs[0].shape == (18, 64)
    for layer, x, logits in zip(model.model.layers, inputs, out.router_logits):
        assert torch.equal(layer.mlp.gate(x), logits)  # exact: the gate on the very tensor it read, same shape
    assert all(not m._forward_pre_hooks for m in model.modules())


# --- who goes where -----------------------------------------------------------------------------------------

def test_token_expert_counts_counts_every_slot():
    tokens = torch.tensor([5, 5, 7])
    choices = torch.tensor([[0, 1], [0, 2], [3, 0]])  # top-2
    counts = moe_lab.token_expert_counts(tokens, choices, num_experts=4, vocab_size=10)
    assert counts.shape == (10, 4) and counts.sum() == 6
    assert counts[5].tolist() == [2, 1, 1, 0] and counts[7].tolist() == [1, 0, 0, 1]


def test_entropies():
    # shares 1/4 and 1/2 are exact; rel 1e-6 (8 float32 ulp) for a vectorised log2 that may round (measured 0)
    assert moe_lab.entropy_bits(torch.tensor([1.0, 1, 1, 1])).item() == pytest.approx(2.0, rel=1e-6)
    assert moe_lab.entropy_bits(torch.tensor([0.0, 5, 0, 0])).item() == pytest.approx(0.0, abs=1e-6)
    # token 0 always to expert 0 (0 bits); token 1 half and half (1 bit), each half of the tokens -> 0.5 bits
    counts = torch.tensor([[4, 0], [2, 2]])
    assert moe_lab.conditional_entropy(counts) == pytest.approx(0.5, rel=1e-6)


def test_identity_accuracy_uses_the_majority_and_a_fallback():
    fit = torch.zeros(6, 3, dtype=torch.long)
    fit[1] = torch.tensor([0, 5, 1])  # token 1 -> expert 1
    fit[2] = torch.tensor([7, 0, 0])  # token 2 -> expert 0, and expert 0 is the most frequent overall
    test_tokens = torch.tensor([1, 2, 4, 1])  # token 4 never seen: guessed as expert 0
    assert moe_lab.identity_accuracy(fit, test_tokens, torch.tensor([1, 0, 0, 2])) == 0.75  # exact: 3 / 4


def test_dropped_tokens():
    even = torch.arange(40).remainder(4).view(-1, 1)
    assert moe_lab.dropped_tokens(even, 4, 1.0) == 0
    collapsed = torch.zeros(40, 1, dtype=torch.long)
    assert moe_lab.dropped_tokens(collapsed, 4, 1.0) == 30  # capacity 10, 40 arrive
    assert moe_lab.dropped_tokens(collapsed, 4, 1.25) == 27  # capacity ceil(12.5) = 13
    top2 = torch.tensor([[0, 1]] * 10)  # 20 pairs, capacity 5 per expert, 10 each to experts 0 and 1
    assert moe_lab.dropped_tokens(top2, 4, 1.0) == 10


def test_routing_statistics_on_a_model():
    model = tiny_model(use_moe=True)
    ids = random_ids(4, 32)
    out, _ = moe_lab.router_inputs(model, ids)
    _, choices = router_choices(out.router_logits[0], 1)
    counts = moe_lab.token_expert_counts(ids, choices, 4, 320)
    assert counts.sum() == ids.numel()
    h, h_cond = moe_lab.entropy_bits(counts.sum(0)).item(), moe_lab.conditional_entropy(counts)
    # at most 2 bits over 4 experts, + 1e-6 for float32 rounding (ulp 2.4e-7); measured h 1.71, h_cond 0.20
    assert 0 <= h_cond <= h <= 2 + 1e-6
    # in-sample accuracy >= 2^-h_cond >= 1 - h_cond: measured 0.906 against 0.801, far from rounding
    assert moe_lab.identity_accuracy(counts, ids.flatten(), choices[:, 0]) >= 1 - h_cond


# --- the bench table ----------------------------------------------------------------------------------------

def test_shares_over_steps_reads_the_long_table():
    header = ["variant", "step", "train_loss", "share_l0_e0", "share_l0_e1", "share_l1_e0", "share_l1_e1"]
    assert moe_lab.share_columns(header) == {(0, 0): "share_l0_e0", (0, 1): "share_l0_e1", (1, 0): "share_l1_e0",
                                             (1, 1): "share_l1_e1"}
    rows = [dict(zip(header, values)) for values in [
        ("a", "1", "5.0", "0.5", "0.5", "0.9", "0.1"),
        ("b", "1", "5.0", "1.0", "0.0", "1.0", "0.0"),
        ("a", "2", "4.0", "0.6", "0.4", "0.8", "0.2"),
        ("a", "3", "4.0", "", "", "", ""),  # a row without shares is skipped
    ]]
    steps, shares = moe_lab.shares_over_steps(rows, "a")
    assert steps.tolist() == [1, 2] and shares.shape == (2, 2, 2)
    assert shares[1, 1].tolist() == pytest.approx([0.8, 0.2], rel=1e-6)  # stored in float32: rel error <= 6e-8


# --- drawing ------------------------------------------------------------------------------------------------

def test_token_layout_breaks_lines_and_widens_words():
    texts = ["<|im_start|>", "终南", "秀", "，", "积雪", "。", "林", "。", "<|im_end|>"]
    cells = moe_lab.token_layout(texts)
    assert cells[0] == (0, 0, 2) and cells[1] == (0, 2, 2) and cells[2] == (0, 4, 1)
    assert cells[5] == (0, 8, 1) and cells[6] == (1, 0, 1) and cells[8] == (2, 0, 2)


@pytest.mark.filterwarnings("ignore:Glyph")
def test_routing_figure_draws_one_box_per_token():
    import matplotlib
    matplotlib.use("Agg")
    texts, experts = ["<|im_start|>", "明月", "光", "。", "<|im_end|>"], [3, 0, 1, 2, 2]
    fig = moe_lab.routing_figure(2, torch.tensor([0.1, 0.2, 0.3, 0.4]), texts, experts)
    bars, poem = fig.axes
    assert len(poem.patches) == len(texts) and len(bars.patches) == 4
    assert bars.get_title().startswith("layer 2")
    assert [t.get_text() for t in poem.get_legend().get_texts()] == [f"expert {e}" for e in range(4)]
    assert bars.get_ylim()[1] == 0.5  # exact: the ymax passed, stored as given
    assert len(poem.texts) == len(texts)  # no probabilities asked for


@pytest.mark.filterwarnings("ignore:Glyph")
def test_routing_figure_writes_the_probabilities_and_keeps_a_short_line_wide():
    import matplotlib
    matplotlib.use("Agg")
    texts, experts = ["<|im_start|>", "明月", "光"], [3, 0, 1]
    fig = moe_lab.routing_figure(0, torch.tensor([0.3, 0.3, 0.0, 0.3]), texts, experts,
                                 probs=[0.29, 0.3, 0.512], max_columns=14,
                                 title_left="layer 0: the line's 3 tokens")
    bars, poem = fig.axes
    drawn = [t.get_text() for t in poem.texts]
    assert drawn == ["start", "0.29", "明月", "0.30", "光", "0.51"]
    assert poem.get_xlim() == (0, 14)  # a short line keeps the 14-box grid
    assert bars.get_title() == "layer 0: the line's 3 tokens"


def test_token_layout_wraps_a_line_without_full_stops():
    cells = moe_lab.token_layout(["<|im_start|>"] + ["月"] * 20, max_columns=14)
    # 2 + 12 columns, then a new row
    assert cells[12] == (0, 13, 1) and cells[13] == (1, 0, 1)
    assert moe_lab.token_layout(["明月"] * 8)[-1] == (0, 14, 2)  # no limit: one row


def test_line_routing_is_the_routers_choice_per_layer():
    model = tiny_model(use_moe=True)
    ids = random_ids(1, 7)
    experts, probs = moe_lab.line_routing(model, ids)
    with torch.no_grad():
        logits = model(ids, output_router_logits=True).router_logits
    assert probs.shape == (2, 7, 4) and len(experts) == 2
    for layer, r in enumerate(logits):
        p, chosen = router_choices(r, 1)
        assert experts[layer] == chosen[:, 0].tolist() and torch.equal(probs[layer], p)


def test_moving_average():
    x = torch.tensor([1.0, 3, 5, 7])
    assert moe_lab.moving_average(x, 2).tolist() == [1.0, 2.0, 4.0, 6.0]  # exact: small integers and halves
    grid = torch.arange(12.0).view(4, 3)  # [T, ...]: averaged along steps only
    # exact: sums of small integers and a division by 4 are exact in float32, either way round
    assert torch.equal(moe_lab.moving_average(grid, 4)[-1], grid.mean(0))


def test_share_history_figure_has_a_panel_per_layer():
    import matplotlib
    matplotlib.use("Agg")
    steps = torch.arange(1, 21)
    shares = torch.full((20, 4, 4), 0.25)
    fig = moe_lab.share_history_figure("a", steps, shares, {"a": ([10, 20], [6.0, 5.5]), "b": ([10, 20], [6.1, 5.6])})
    assert len(fig.axes) == 5 and fig.axes[1].get_title() == "layer 0" and fig.axes[1].get_ylim() == (0, 1)  # as set
    # read like text: layers 0 and 1 on top
    top = [ax for ax in fig.axes[1:] if ax.get_position().y0 > 0.5]
    assert sorted(ax.get_title() for ax in top) == ["layer 0", "layer 1"]


def test_share_history_figure_keeps_every_loss_point_and_draws_the_reference_band():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps, shares = torch.arange(1, 21), torch.full((20, 2, 4), 0.25)
    curves = {"a": ([10, 20], [7.0, 5.5]), "b": ([10, 20], [6.1, 5.6])}
    fig = moe_lab.share_history_figure("a", steps, shares, curves, reference=(5.4, 5.45, "dense"))
    loss = fig.axes[0]
    low, high = loss.get_ylim()
    assert low < 5.4 and high > 7.0  # the early point and the band are both inside (0.05 of room each side)
    legend = [t.get_text() for t in loss.get_legend().get_texts()]
    assert legend == ["this run", "other runs"]
    assert "dense" in [t.get_text() for t in loss.texts]  # the band's label, inside it
    plt.close(fig)


# --- the mechanism diagram, the balancing gradient, the short run (chapter 6) --------------------------------

def test_moe_diagram_draws_every_expert_and_the_config_sizes():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import minimind
    for k, norm in ((1, True), (2, True), (1, False)):
        config = minimind.MiniMindConfig(use_moe=True, num_experts_per_tok=k, norm_topk_prob=norm)
        fig = moe_lab.moe_diagram(config)
        texts = " ".join(t.get_text() for t in fig.axes[0].texts)
        assert all(f"expert {e}" in texts for e in range(config.num_experts))
        assert f"Linear {config.hidden_size} → {config.num_experts}" in texts
        assert f"{config.hidden_size} → {config.moe_intermediate_size} → {config.hidden_size}" in texts
        assert f"top-{k}" in fig.axes[0].get_title()
        assert ("p / p = 1" in texts) == (k == 1 and norm)
        plt.close(fig)


@pytest.mark.parametrize("top_k", [1, 2])
def test_balance_logit_gradient_matches_autograd(top_k):
    from minimind.moe import load_balancing_loss
    torch.manual_seed(0)
    z = (torch.randn(300, 4) * 2).requires_grad_()
    load_balancing_loss(z, 4, top_k).backward()
    closed = moe_lab.balance_logit_gradient(z.detach(), 4, top_k)
    # float32 sums over 300 tokens: rounding at ~1e-7 of the largest entry; 1e-5 leaves room
    assert torch.allclose(z.grad, closed, atol=1e-5 * closed.abs().max().item(), rtol=0)
    assert closed.sum(-1).abs().max() < 1e-7  # exact in real numbers: a softmax gradient sums to 0


def test_short_run_records_the_loads_before_each_step_and_is_deterministic():
    def make():
        torch.manual_seed(0)
        return tiny_model(use_moe=True)
    batches = torch.stack([random_ids(2, 8, seed=s) for s in range(3)])  # [T, B, S]
    loads = moe_lab.short_run(make, batches, lr=1e-2)
    assert loads.shape == (3, 2, 4)
    assert torch.allclose(loads.sum(-1), torch.ones(3, 2))  # shares: each layer's sum is 1
    model = make().train()  # the first row is the untrained model's routing
    out = model(batches[0], labels=batches[0], output_router_logits=True)
    first = torch.stack([router_load(router_choices(r, 1)[1], 4) for r in out.router_logits])
    assert torch.equal(loads[0], first)  # exact: the same model on the same batch
    assert torch.equal(moe_lab.short_run(make, batches, lr=1e-2), loads)  # exact: seeded, CPU


def test_bf16_softmax_flips_counts_ties_and_changed_choices():
    # token 0: two logits equal in bfloat16 but not in float32 -> a tie, and topk of the
    # tie takes the lower index; token 1: far apart, no tie, no change
    logits = torch.tensor([[0.0, 1.0, 1.0 + 2 ** -9, -5.0], [4.0, 0.0, 0.0, 0.0]])
    tied, changed = moe_lab.bf16_softmax_flips(logits)
    assert tied == 0.5
    assert changed == 0.0  # rounded to bf16 first, both softmaxes see the same tie
    even = torch.tensor([[0.0, 0.1, 0.2, 3.0]] * 4)
    assert moe_lab.bf16_softmax_flips(even) == (0.0, 0.0)


def test_forced_routing_sends_every_token_where_told_and_restores_route():
    import minimind
    from minimind.moe import MOEFeedForward
    torch.manual_seed(0)
    config = minimind.MiniMindConfig(hidden_size=32, num_attention_heads=4,
                                     num_key_value_heads=2, use_moe=True,
                                     moe_intermediate_size=48)
    moe = MOEFeedForward(config).eval()
    x = torch.randn(1, 6, 32)
    with torch.no_grad(), moe_lab.forced_routing(moe, torch.full((6, 1), 2)):
        y, _ = moe(x)
    # the same expert on the same rows: float32 rounding only
    assert torch.allclose(y[0], moe.experts[2](x[0]), atol=1e-6)
    assert "route" not in moe.__dict__  # the class's route is back
    ratio = moe_lab.collapse_time_ratio(moe, x, repeats=1)
    assert ratio > 0


def english_words(texts) -> set[str]:
    return latin_words(texts, kept=("poetry", "moe", "token"))


def test_every_chinese_template_has_the_english_fields():
    from string import Formatter
    fields = lambda text: sorted(f for _, f, _, _ in Formatter().parse(text) if f)
    assert all(fields(en) == fields(zh) for en, zh in moe_lab.ZH.items())


@pytest.mark.filterwarnings("ignore:Glyph")
def test_routing_figure_for_the_chinese_edition_has_no_english():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    texts, experts = ["<|im_start|>", "终南", "，", "。", "<|im_end|>"], [3, 0, 1, 2, 2]
    shares = torch.tensor([0.2, 0.2, 0.4, 0.2])
    english = moe_lab.routing_figure(1, shares, texts, experts, name="终南望余雪")
    chinese = moe_lab.routing_figure(1, shares, texts, experts, name="终南望余雪", zh=True)
    assert english.axes[1].get_title() == "终南望余雪, layer 1"
    assert {"start", "end", "expert", "layer", "even"} <= english_words(figure_texts(english))
    assert english_words(figure_texts(chinese)) == set()
    assert chinese.axes[1].get_title() == "终南望余雪，第 1 层"
    assert [t.get_text() for t in chinese.axes[1].texts] == ["开始", "终南", "，", "。", "结束"]
    plt.close("all")


def test_token_label_glosses_only_the_english_edition():
    assert [moe_lab.token_label(t) for t in ["人", "，", "<|im_end|>", "雪"]] == [
        "人 (person)", "，(comma)", "end", "雪"]
    assert [moe_lab.token_label(t, zh=True) for t in ["人", "，", "<|im_end|>"]] == [
        "人", "，", "结束"]


@pytest.mark.filterwarnings("ignore:Glyph")
def test_token_share_figure_rows_and_the_chinese_edition():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    counts = [torch.tensor([[3, 1, 0, 0], [0, 0, 2, 2], [0, 5, 0, 0]])] * 2  # [V=3, E=4]
    tokens = {"人": 0, "花": 1, "<|im_start|>": 2}
    english = moe_lab.token_share_figure(counts, tokens)
    rows = [t.get_text() for t in english.axes[0].get_yticklabels()]
    assert rows == ["人 (person) ×4", "花 (flower) ×4", "start ×5"]
    shares = english.axes[0].images[0].get_array()
    assert shares[0].tolist() == [0.75, 0.25, 0.0, 0.0]  # exact: 3/4 and 1/4 in binary
    chinese = moe_lab.token_share_figure(counts, tokens, zh=True)
    assert [t.get_text() for t in chinese.axes[0].get_yticklabels()] == [
        "人 ×4", "花 ×4", "开始 ×5"]
    assert english_words(figure_texts(chinese)) == set()
    assert len(chinese.axes) == 3 and chinese.axes[1].get_title() == "第 1 层"  # + colour bar
    plt.close("all")
