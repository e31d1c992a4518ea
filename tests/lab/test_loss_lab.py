"""minimind/lab/loss_lab.py: yardsticks, padding and prompt labels, means, line slots, the log reader, figures."""
import math

import pytest
import torch
import torch.nn.functional as F

from minimind.lab import loss_lab
from minimind.loss import shifted_cross_entropy
from model_helpers import random_ids, tiny_model


# --- yardsticks ---------------------------------------------------------------------------------------------

def test_perplexity_and_bits_per_character():
    # float64 exp(log(6400)): the last bit of log, times 6400 (~2e-15 relative)
    assert loss_lab.perplexity(math.log(6400)) == pytest.approx(6400, rel=1e-12)
    assert loss_lab.perplexity(0.0) == 1.0  # exact: exp(0) = 1
    # one bit per token, two characters per token: half a bit per character
    assert loss_lab.bits_per_character(math.log(2), 2.0) == 0.5  # exact: ln 2 / ln 2 = 1, then / 2


def test_unigram_loss_is_the_entropy_of_the_token_frequencies():
    assert loss_lab.unigram_loss(torch.tensor([3, 3, 3, 3]), 10) == 0  # exact: p = 4 / 4 = 1 and log 1 = 0
    # float64: torch's log(0.25) vs math.log(4), summed over 4 terms: a few ulps
    assert loss_lab.unigram_loss(torch.tensor([[0, 1], [2, 3]]), 10) == pytest.approx(math.log(4), rel=1e-12)
    ids = torch.tensor([0, 0, 1, 2])
    p = torch.tensor([0.5, 0.25, 0.25])
    # the expected value is computed in float32 (~1e-7 relative), the function in float64
    assert loss_lab.unigram_loss(ids, 5) == pytest.approx(-(p * p.log()).sum().item(), rel=1e-6)


def test_prediction_entropy_uniform_and_certain():
    # float32 log_softmax and exp over 8 equal logits against float64 log 8: ~1e-7 relative
    torch.testing.assert_close(loss_lab.prediction_entropy(torch.zeros(2, 3, 8)),
                               torch.full((2, 3), math.log(8)), rtol=1e-6, atol=0)
    certain = torch.tensor([[100.0, 0.0, 0.0]])
    # the true entropy is 2 * 100 * e^-100 ~ 7e-42 (log_softmax subtracts the max, so the top log-prob is 0)
    assert loss_lab.prediction_entropy(certain).item() == pytest.approx(0.0, abs=1e-12)


# --- which tokens count -------------------------------------------------------------------------------------

def test_pad_batch_pads_right_with_ignored_labels():
    ids, labels = loss_lab.pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert labels.tolist() == [[5, 6, 7], [8, -100, -100]]
    ids, labels = loss_lab.pad_batch([[5, 6, 7], [8]], pad_id=0, label_pad=0)  # the mistake: pad is a target
    assert torch.equal(ids, labels)  # integer ids


def test_padding_with_ignore_index_leaves_the_loss_unchanged_and_pad_labels_change_it():
    model = tiny_model()
    seqs = [random_ids(1, 9, seed=1)[0].tolist(), random_ids(1, 4, seed=2)[0].tolist()]
    with torch.no_grad():
        alone = [model(torch.tensor([s]), labels=torch.tensor([s])).loss.item() * (len(s) - 1) for s in seqs]
        expected = sum(alone) / sum(len(s) - 1 for s in seqs)
        ids, labels = loss_lab.pad_batch(seqs, pad_id=0)
        # one padded batch vs each sequence alone: other matmul shapes and another order of the mean over
        # 11 losses, ~1e-7 relative (measured 6e-8)
        assert model(ids, labels=labels).loss.item() == pytest.approx(expected, rel=1e-6)
        assert loss_lab.counted_targets(labels) == 8 + 3
        ids, bad = loss_lab.pad_batch(seqs, pad_id=0, label_pad=0)
        assert model(ids, labels=bad).loss.item() != pytest.approx(expected, rel=1e-3)  # it moves by ~7%
        assert loss_lab.counted_targets(bad) == 2 * 8


def test_prompt_masked_labels_keep_the_first_answer_token():
    ids = torch.arange(10, 16).view(1, 6)
    labels = loss_lab.prompt_masked_labels(ids, 2)
    assert labels.tolist() == [[-100, -100, 12, 13, 14, 15]]
    assert ids.tolist() == [[10, 11, 12, 13, 14, 15]]  # not changed in place
    assert loss_lab.counted_targets(labels) == 4  # tokens 12..15, predicted from positions 1..4
    logits = torch.randn(1, 6, 20, requires_grad=True)
    shifted_cross_entropy(logits, labels).backward()
    assert (logits.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist() == [1, 2, 3, 4]


# --- how the mean is taken ----------------------------------------------------------------------------------

def test_sequence_means_skip_ignored_targets():
    losses = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0]])
    labels = torch.tensor([[0, 1, 1, 1], [0, 1, -100, -100]])
    assert loss_lab.sequence_means(losses, labels).tolist() == [2.0, 4.0]  # exact: (1 + 2 + 3) / 3 and 4 / 1


def test_sequence_means_of_real_losses_match_per_row_cross_entropy():
    model = tiny_model()
    ids, labels = loss_lab.pad_batch([random_ids(1, 7, seed=3)[0].tolist(), random_ids(1, 3, seed=4)[0].tolist()], 0)
    with torch.no_grad():
        logits = model(ids).logits
    per_token = shifted_cross_entropy(logits, labels, reduction="none")
    means = loss_lab.sequence_means(per_token, labels)
    for row in range(2):
        # the same per-token float32 losses, averaged as sum / count vs cross_entropy's mean: ~1e-7 relative
        assert means[row].item() == pytest.approx(shifted_cross_entropy(logits[row:row + 1], labels[row:row + 1]).item(),
                                                  rel=1e-6)


def test_segment_index_counts_documents_over_packed_rows():
    rows = torch.tensor([[1, 5, 6, 1], [7, 8, 1, 9]])
    assert loss_lab.segment_index(rows, 1).tolist() == [[0, 0, 0, 1], [1, 1, 2, 2]]
    assert loss_lab.segment_index(torch.tensor([[4, 1, 5]]), 1).tolist() == [[0, 1, 1]]  # a fragment before the first start


def test_group_means_skip_nan():
    values = torch.tensor([1.0, 3.0, float("nan"), 10.0])
    assert loss_lab.group_means(values, torch.tensor([0, 0, 1, 1])).tolist() == [2.0, 10.0]  # exact: small integers


def test_batch_means_mean_weighs_a_short_last_batch_like_a_full_one():
    losses = torch.cat([torch.zeros(2, 4), torch.ones(1, 4)])  # batches of 2 rows: [0, 0] and [1]
    assert loss_lab.batch_means_mean(losses, 2) == 0.5  # exact: (0 + 1) / 2
    assert losses.mean().item() == pytest.approx(1 / 3, rel=1e-6)  # float32 4 / 12 vs float64 1 / 3: 3e-8


# --- where in a line ----------------------------------------------------------------------------------------

def _pieces(texts):
    return [t if t.startswith("<|") else t.encode() for t in texts]


def test_line_slots_first_character_positions():
    pieces = _pieces(["<|im_start|>", "床前", "明", "月", "光", "，", "疑", "是"])
    first, chars, lengths = loss_lab.line_slots(pieces)
    assert first.tolist() == [0, 1, 3, 4, 5, 0, 1, 2]
    assert chars.tolist() == [0, 2, 1, 1, 1, 0, 1, 1]
    assert lengths.tolist()[:6] == [0, 5, 5, 5, 5, 5]


def test_mean_by_slot_single_character_tokens_only():
    pieces = _pieces(["床前", "明", "月", "光", "，", "疑", "是", "地", "上", "霜", "。"])
    first, chars, lengths = loss_lab.line_slots(pieces)
    values = torch.arange(11, dtype=torch.float)
    means, counts = loss_lab.mean_by_slot(values, first, chars, lengths, 5)
    assert counts.tolist() == [1, 1, 2, 2, 2]  # 床前 (position 1, two characters) is left out
    assert means[0].item() == 5.0 and means[2].item() == (1 + 7) / 2  # exact: means of small integers
    means, counts = loss_lab.mean_by_slot(values, first, chars, lengths, 5, single_only=False)
    assert counts.tolist() == [2, 1, 2, 2, 2]
    assert loss_lab.mean_by_slot(values, first, chars, lengths, 7)[0].isnan().all()


# --- the training log ---------------------------------------------------------------------------------------

def test_read_train_log(tmp_path):
    path = tmp_path / "train_log.csv"
    path.write_text("step,lr,train_loss,aux_loss,val_loss,tokens_per_s\n1,3e-05,8.8,0.002,,1000\n2,6e-05,8.7,0.0,8.75,1100\n")
    log = loss_lab.read_train_log(path)
    assert log["step"] == [1, 2] and log["train_loss"] == [8.8, 8.7]
    assert math.isnan(log["val_loss"][0]) and log["val_loss"][1] == 8.75  # exact: float() of the same text


def test_shipped_logs_read():
    from minimind.checkpoint import SHIPPED
    log = loss_lab.read_train_log(SHIPPED / "poetry-moe" / "train_log.csv")
    assert len(log["step"]) == 3000 and sum(not math.isnan(v) for v in log["val_loss"]) == 12


def test_moving_average_is_trailing():
    assert loss_lab.moving_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]  # exact: float64 sums of small integers
    assert loss_lab.moving_average([5.0], 10) == [5.0]


# --- figures ------------------------------------------------------------------------------------------------

def test_poem_layout_breaks_after_punctuation():
    assert loss_lab.poem_layout(["明月", "光", "，", "疑", "。", "<|im_end|>"]) == [
        (0, 0, 2), (0, 2, 1), (0, 3, 1), (1, 0, 1), (1, 1, 1), (2, 0, 1)]


def test_loss_grid_figure_draws_one_panel_per_model():
    import matplotlib
    matplotlib.use("Agg")
    texts = ["明月", "光", "，", "<|im_end|>"]
    fig = loss_lab.loss_grid_figure(texts, {"a": [5.0, 2.0, 0.1, float("nan")], "b": [6.0, 1.0, 0.2, 0.3]}, vmax=12,
                                    title="t", glosses=["moon", "light", ",", "end"])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["a", "b"]
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_shifted_loss_figure_draws_the_row_and_the_pipeline():
    import matplotlib.pyplot as plt
    tokens = ["<|im_start|>", "a", "b", "<|endoftext|>"]
    fig = loss_lab.shifted_loss_figure(6400, tokens, ["start", "a", "b", "pad"])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "−100" in texts and "masked" in texts and "logits\n[B, S, 6400]" in texts
    assert any("/ 2" in t for t in texts)  # two kept targets: a, b
    plt.close(fig)


def _mistake_case(dtype=torch.float32):
    torch.manual_seed(0)
    logits = (torch.randn(2, 6, 300) * 4).to(dtype)
    labels = torch.randint(0, 300, (2, 6))
    labels[1, 3:] = loss_lab.IGNORE_INDEX
    return logits, labels


def test_loss_mistakes_differ_from_the_right_loss():
    logits, labels = _mistake_case()
    right = shifted_cross_entropy(logits, labels)
    for name, value in loss_lab.loss_mistakes(logits, labels).items():
        if name != "low precision":  # float32 logits: the same as the right loss
            assert abs(value - right) > 1e-3, name


def test_reference_explains_each_mistake_by_name():
    logits, labels = _mistake_case()
    ref = loss_lab.ShiftedLossReference()
    expected = ref(logits, labels)
    mistakes = loss_lab.loss_mistakes(logits, labels)
    assert "shift by one" in ref.explain(mistakes["no shift"], expected)
    assert "kept ones only" in ref.explain(mistakes["ignored averaged in"], expected)
    # an unknown mistake: None, and the checker's generic message
    assert ref.explain(expected + 0.5, expected) is None


def test_reference_names_ignored_labels_clamped_to_token_0():
    """-100 clamped to id 0 for the gather, then .mean() over every pair: the ignored
    pairs are scored on token 0 and counted, the same trap as averaging them in."""
    logits, labels = _mistake_case()
    ref = loss_lab.ShiftedLossReference()
    expected = ref(logits, labels)
    z, y = logits[:, :-1], labels[:, 1:]
    clamped = (torch.logsumexp(z, -1)
               - z.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)).mean()
    assert abs(clamped - expected) > 1e-3  # a real miss, not rounding
    assert "kept ones only" in ref.explain(clamped, expected)


def test_shifted_loss_figure_writes_the_measured_losses():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tokens = ["<|im_start|>", "a", "b", "<|endoftext|>"]
    fig = loss_lab.shifted_loss_figure(6400, tokens, ["start", "a", "b", "pad"],
                                       losses=[3.0, 5.0])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "ℓ0\n3.0" in texts and "ℓ1\n5.0" in texts
    assert any("/ 2 = 4.00" in t for t in texts)  # the mean of the two kept losses
    plt.close(fig)


def test_loss_grid_figure_stacks_panels():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    texts = ["a", "b", "，"]
    losses = {"m1": [1.0, 2.0, 0.1], "m2": [2.0, 1.0, 0.2]}
    fig = loss_lab.loss_grid_figure(texts, losses, vmax=12, title="t",
                                    glosses=["x", "y", ","], stacked=True)
    panels = [ax for ax in fig.axes if ax.get_title() in losses]
    assert len(panels) == 2
    assert panels[0].get_position().y0 > panels[1].get_position().y0  # one above
    plt.close(fig)


def test_reference_explains_a_low_precision_loss():
    logits, labels = _mistake_case(torch.bfloat16)
    ref = loss_lab.ShiftedLossReference()
    expected = ref(logits, labels)
    low = loss_lab.loss_mistakes(logits, labels)["low precision"]
    # the bf16 computation is off by more than check's tolerance (atol 1e-5 + rtol 1e-4)
    assert abs(low - expected) > 1e-5 + 1e-4 * abs(expected)
    assert "float32" in ref.explain(low, expected)
    assert "bfloat16" in ref.explain(low.bfloat16(), expected)


def test_label_smoothing_floor_matches_the_closed_form():
    v, eps = 6400, 0.1
    q = 1 - eps + eps / v
    closed = -(q * math.log(q) + (v - 1) * eps / v * math.log(eps / v))  # entropy
    assert abs(loss_lab.label_smoothing_floor(v, eps) - closed) < 1e-9  # all float64
    assert abs(loss_lab.label_smoothing_floor(v, 0.0)) < 1e-12


def test_z_loss_is_the_mean_squared_log_partition():
    logits = torch.zeros(2, 3, 8)  # log Z = log 8 everywhere
    assert abs(loss_lab.z_loss(logits, coef=1.0).item() - math.log(8) ** 2) < 1e-5


def test_packing_summary_counts_the_dropped_tail():
    s = loss_lab.packing_summary([[1] * 5, [2] * 4, [3] * 4], 4)  # 13 tokens, 3 rows
    assert s == {"tokens": 13, "kept": 12, "dropped": 1, "rows": 3, "whole": 2,
                 "begun": 3}


def test_explain_sft_labels_names_in_place_changes_and_mask_counts():
    ids = torch.arange(12).view(2, 6)
    right = (loss_lab.prompt_masked_labels(ids, 2), ids)
    changed = ids.clone()
    changed[:, :2] = -100
    assert "in place" in loss_lab.explain_sft_labels((changed, changed), right)
    one_more = (loss_lab.prompt_masked_labels(ids, 3), ids)
    assert loss_lab.explain_sft_labels(one_more, right) == \
        "row 1: you mask 3 positions, the package masks 2"
    assert loss_lab.explain_sft_labels(right, right) is None


def test_reference_explains_overflow_and_rounding():
    logits, labels = _mistake_case(torch.bfloat16)
    ref = loss_lab.ShiftedLossReference()
    expected = ref(logits, labels)
    assert "logsumexp" in ref.explain(torch.tensor(float("inf")), expected)
    rounded = expected.bfloat16().float()  # the bf16 result, handed back as float32
    if rounded != expected:
        assert "rounding" in ref.explain(rounded, expected)


def test_explain_smoothing_floor_names_nan():
    assert "0 · ln 0" in loss_lab.explain_smoothing_floor(float("nan"), 0.0)
    assert loss_lab.explain_smoothing_floor(0.5, 0.4) is None


# --- the Chinese edition's figures (issue #23) ------------------------------------------

def _figure_words(fig) -> tuple[str, set]:
    """All the text a figure draws (titles, labels, notes, colour bar), and its Latin words."""
    import re

    from matplotlib.text import Text
    text = "\n".join(t.get_text() for t in fig.findobj(Text))
    return text, set(re.findall(r"[A-Za-z][A-Za-z_]+", text))


CODE_WORDS = {"input_ids", "labels", "log", "logits", "float", "log_softmax", "gather",
              "shifted_cross_entropy", "im_start", "im_", "start", "endof", "text", "loss",
              "nats", "token"}  # code, special tokens, "token" and the unit (terms.tsv)


def test_shifted_loss_figure_in_chinese_has_no_glosses_and_no_english():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tokens = ["<|im_start|>", "嫁", "得", "<|endoftext|>"]
    glosses = ["opening", "marry", "obtain", "padding"]
    english, _ = _figure_words(loss_lab.shifted_loss_figure(6400, tokens, glosses,
                                                            losses=[8.5, 5.0]))
    assert "1: marry" in english and "masked" in english  # the English keeps its glosses
    text, words = _figure_words(loss_lab.shifted_loss_figure(6400, tokens, glosses,
                                                             losses=[8.5, 5.0], zh=True))
    assert not any(g in text for g in glosses)
    assert words <= CODE_WORDS, words - CODE_WORDS
    assert "已屏蔽" in text and "移位损失" in text and "/ 2 = 6.75" in text  # same numbers
    plt.close("all")


def test_loss_grid_figure_in_chinese_has_no_glosses_and_no_english():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    texts, glosses = ["明月", "光", "，", "<|im_end|>"], ["moon", "light", ",", "ends"]
    losses = {"m1": [5.0, 2.0, 0.1, 0.3], "m2": [6.0, 1.0, 0.2, 0.3]}
    english, _ = _figure_words(loss_lab.loss_grid_figure(texts, losses, 12, "t",
                                                         glosses=glosses))
    assert "moon" in english and "end" in english
    title = loss_lab.say("江南曲 (Li Yi): the loss of each token, read alone after "
                         "<|im_start|>", zh=True)
    fig = loss_lab.loss_grid_figure(texts, losses, 12, title, glosses=glosses, zh=True)
    text, words = _figure_words(fig)
    assert not any(g in text for g in ["moon", "light", "ends"])
    assert words <= CODE_WORDS | {"m1", "m2"}, words - CODE_WORDS
    assert "结束" in text and "李益" in text and "明月" in text
    plt.close("all")


def test_every_widget_title_has_a_chinese_one():
    for title, glosses in loss_lab.POEM_GLOSSES.values():
        chinese = loss_lab.say(title, zh=True)
        assert title.startswith(chinese) or "李益" in chinese
        assert not any(ch.isascii() and ch.isalpha() for ch in chinese)
