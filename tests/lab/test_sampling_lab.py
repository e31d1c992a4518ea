"""minimind/lab/sampling_lab.py: stages, entropy, the chi-square test, diversity measures and figures (chapter 10)."""
import math

import pytest
import torch

from minimind.lab.sampling_lab import (chi_square_p_value, chi_square_test, distinct_n, distribution_frame,
                                       empirical_counts, entropy, gloss, kept_count, ngrams, pipeline_stages,
                                       poem_characters, read_grid, repeated_line_share, repeated_ngram_share,
                                       stages_figure, transformers_stages)
from minimind.lab.sampling_lab import (continuation_context, last_line, min_p_filter, partial_character_tokens,
                                       pipeline_figure, pipeline_mistakes, token_bytes, transformers_min_p)
from minimind.sampling import next_token_distribution, top_k_filter, top_p_filter


def test_entropy_in_nats_ignores_filtered_tokens():
    # float32 log_softmax and exp over 8 (or 2) equal logits against float64 math.log: ~1e-7 relative
    assert entropy(torch.zeros(1, 8)).item() == pytest.approx(math.log(8), rel=1e-6)
    filtered = torch.tensor([[0.0, 0.0, float("-inf"), float("-inf")]])
    assert entropy(filtered).item() == pytest.approx(math.log(2), rel=1e-6) and kept_count(filtered).item() == 2
    assert entropy(torch.tensor([[0.0, float("-inf")]])).item() == 0  # exact: log_softmax 0, exp 1, 1 * 0


def test_pipeline_stages_equal_transformers_processors():
    torch.manual_seed(0)
    logits, ids = torch.randn(2, 50) * 3, torch.randint(0, 50, (2, 7))
    ours = pipeline_stages(logits, ids, 1.3, 0.7, 10, 0.8)
    theirs = transformers_stages(logits, ids, 1.3, 0.7, 10, 0.8)
    assert [name for name, _ in ours] == ["model", "repetition penalty 1.3", "temperature 0.7", "top-k 10",
                                          "top-p 0.8"]
    # exact: the package runs transformers' own steps in its order (gather/where/scatter, / T, topk, sort,
    # softmax, cumsum) on the same tensors, and masking keeps the surviving logits untouched
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(ours, theirs))
    assert kept_count(ours[3][1]).tolist() == [10, 10] and (kept_count(ours[4][1]) <= 10).all()
    off = pipeline_stages(logits, ids)  # every knob neutral: nothing changes
    assert all(torch.equal(x, logits) for _, x in off)  # exact: neutral stages return their input


def test_chi_square_accepts_the_right_distribution_and_rejects_a_wrong_one():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    g = torch.Generator().manual_seed(0)
    draws = torch.multinomial(probs, 10_000, replacement=True, generator=g)
    counts = empirical_counts(draws, 5)
    assert counts.sum() == 10_000 and counts[4] == 0
    stat, df, p = chi_square_test(counts, probs)
    assert df == 3 and p > 0.01
    _, _, p_wrong = chi_square_test(counts, torch.tensor([0.45, 0.35, 0.15, 0.05, 0.0]))
    assert p_wrong < 1e-6
    assert chi_square_test(torch.tensor([5, 5, 1]), torch.tensor([0.5, 0.5, 0.0]))[2] == 0.0  # impossible: p is 0.0


def test_chi_square_pools_small_bins_and_p_value_matches_known_quantiles():
    probs = torch.tensor([0.5] + [0.5 / 50] * 50)  # 50 bins expected once each in 100 draws: pooled into one
    counts = torch.tensor([50] + [1] * 50)
    stat, df, p = chi_square_test(counts, probs)
    # 0.5 / 50 is not exact in float32: the pooled bins expect 50 - 1e-6, stat ~2.5e-14 and p = 1 - 1.3e-7
    assert df == 1 and stat == pytest.approx(0.0, abs=1e-10) and p == pytest.approx(1.0, rel=1e-6)
    # the textbook 5% points, rounded to 3 decimals: p off by 1.4e-5 and 6e-7
    assert chi_square_p_value(3.841, 1) == pytest.approx(0.05, abs=1e-4)
    assert chi_square_p_value(18.307, 10) == pytest.approx(0.05, abs=1e-4)


def test_diversity_measures_on_small_poems():
    assert poem_characters("春风，明月。") == list("春风明月")
    assert ngrams("春风吹，明月。", 2) == ["春风", "风吹", "明月"]  # never across punctuation
    assert distinct_n(["春风春风，"], 2) == 2 / 3  # exact: the same Python division of counts
    assert distinct_n(["春风，", "春风，"], 2) == 0.5
    assert repeated_ngram_share("妾妾妾妾，") == 2 / 3  # exact: likewise
    assert repeated_ngram_share("床前明月光，") == 0
    assert repeated_line_share(["春风，春风，明月。", "山水。"]) == 1 / 4  # exact: likewise
    assert distinct_n([], 2) == 0 and repeated_ngram_share("") == 0


def test_gloss_and_grid_reader(tmp_path):
    assert gloss("金") == "金 (gold)" and gloss("妾x") == "妾x"
    path = tmp_path / "grid.csv"
    path.write_text("decoding,temperature,top_p,line_share\nsample,0.7,0.9,0.95\n")
    # exact: float() of the same decimal text as the literals
    assert read_grid(path) == [{"decoding": "sample", "temperature": 0.7, "top_p": 0.9, "line_share": 0.95}]


def test_figures_draw_kept_and_removed_tokens():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    torch.manual_seed(0)
    logits, ids = torch.randn(1, 40), torch.randint(0, 40, (1, 5))
    stages = pipeline_stages(logits, ids, 1.3, 0.8, 5, 0.9)
    shown = logits[0].topk(8).indices.tolist()
    fig = stages_figure(stages, shown, [str(i) for i in shown], ymax=1.0)
    assert len(fig.axes) == 5 and "kept 5 tokens" in fig.axes[3].texts[0].get_text()
    plt.close(fig)
    fig = distribution_frame(stages[3][1], shown, [str(i) for i in shown], 1.0, "top-k 5")
    colours = [p.get_facecolor() for p in fig.axes[0].patches]
    assert len({c for c in colours}) == 2  # kept and removed bars differ
    removed_heights = [p.get_height() for p in fig.axes[0].patches if p.get_facecolor() != colours[-1]]
    assert max(removed_heights) <= 0.03 + 1e-9  # a strip at 0, never a bar reaching a probability
    plt.close(fig)
    fig = distribution_frame(stages[2][1], shown, [str(i) for i in shown], 1.0, "T", other=True)
    bars = [p.get_height() for p in fig.axes[0].patches]
    # float32 probabilities summed: the shown bars and the "other" bar make 1 within 1e-6
    assert len(bars) == len(shown) + 1 and sum(bars) == pytest.approx(1.0, abs=1e-6)
    plt.close(fig)
    fig = pipeline_figure(40, [40, 40, 40, 5, 3, 3], dict(repetition_penalty=1.3, temperature=0.8,
                                                         top_k=5, top_p=0.9))
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert all(word in texts for word in ["repetition", "temperature", "top-k", "top-p", "softmax",
                                          "sample", "r = 1.3", "k = 5"])
    plt.close(fig)


def test_min_p_equals_transformers_and_keeps_the_best():
    torch.manual_seed(0)
    logits = torch.randn(4, 100) * 3
    for min_p in (0.01, 0.1, 0.5, 1.0):
        # exact: the same softmax, amax, product and comparison as MinPLogitsWarper
        assert torch.equal(min_p_filter(logits, min_p), transformers_min_p(logits, min_p))
    assert (kept_count(min_p_filter(logits, 1.0)) == 1).all()  # min_p 1: only the favourite


def test_pipeline_mistakes_differ_from_the_package():
    torch.manual_seed(0)
    logits, ids = torch.randn(2, 40) * 3, torch.tensor([[1, 2, 2, 9], [0, 5, 7, 7]])
    differs = set()
    settings = [(1.3, 0.8, 3, 0.6), (1.3, 1.0, 0, 1.0), (1.3, 2.0, 10, 0.8)]  # 2nd: no filter
    for r, t, k, p in settings:
        right = next_token_distribution(logits, ids, t, k, p, r)
        mistakes = pipeline_mistakes(logits, ids, r, t, k, p)
        differs |= {name for name, probs in mistakes.items() if not torch.allclose(probs, right, atol=1e-6)}
    assert set(mistakes) == {"temperature after the filters",
                             "top-p read the distribution from before top-k",
                             "filtering probabilities without renormalising",
                             "filtering probabilities, renormalised only at the end",
                             "penalty divides negative logits", "penalty once per occurrence",
                             "penalty after the filters"}
    assert differs == set(mistakes)  # each is a real difference on one of the settings


def test_contexts_and_byte_tokens():
    assert continuation_context("床前明月光，春入玉门春。玉殿金台下，金台玉殿前。") == "床前明月光，春入玉门春。玉殿金台下，"
    assert continuation_context("春风，", lines=3) == "春风，"  # shorter than asked: all of it
    assert last_line("床前明月光，春入玉门春。玉殿金台下，") == "玉殿金台下，"

    class ByteTokenizer:  # GPT-2's byte alphabet: 0xe9 0x87 0x91 is 金, shown as 'éĩĳ'
        def convert_ids_to_tokens(self, i):
            return {0: "éĩĳ", 1: "éĩ", 2: "ĳ"}[i]

    tok = ByteTokenizer()
    assert token_bytes(tok, 0) == "金".encode() and token_bytes(tok, 1) == b"\xe9\x87"
    assert [(p, i) for p, i, _ in partial_character_tokens(tok, [0, 1, 2])] == [(1, 1), (2, 2)]


def test_pipeline_mistakes_are_told_apart_and_the_two_nucleus_mistakes_agree():
    torch.manual_seed(0)
    logits, ids = torch.randn(2, 40) * 3, torch.tensor([[1, 2, 2, 9], [0, 5, 7, 7]])
    right = next_token_distribution(logits, ids, 0.8, 10, 0.7, 1.3)
    mistakes = pipeline_mistakes(logits, ids, 1.3, 0.8, 10, 0.7)
    assert {"penalty once per occurrence", "filtering probabilities without renormalising",
            "penalty after the filters"} <= set(mistakes)
    raw = mistakes["filtering probabilities without renormalising"]
    assert (raw.sum(-1) < 1 - 1e-3).all()  # zeroed, never renormalised: less than 1 left
    # top-p before top-k keeps the same set as a nucleus of the whole distribution cut to
    # top-k (both are runs of the best tokens): exact, the same masks on the same logits
    for k, p in [(3, 0.6), (10, 0.9), (25, 0.3)]:
        scaled = logits / 0.8
        nucleus = torch.isfinite(top_p_filter(scaled, p))
        cut = top_k_filter(scaled, k).masked_fill(~nucleus, float("-inf"))
        assert torch.equal(top_k_filter(top_p_filter(scaled, p), k), cut)


def testpenalty_per_occurrence_and_kept_probs_miss():
    from minimind.lab.sampling_lab import penalty_per_occurrence, kept_probs_miss
    logits = torch.tensor([[2.0, -1.0, 3.0]])
    out = penalty_per_occurrence(logits, torch.tensor([[0, 0, 1]]), 2.0)
    assert out.tolist() == [[0.5, -2.0, 3.0]]  # exact: powers of two
    got, expected = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[0.4, 0.3, 0.3]])
    assert kept_probs_miss(got, expected) == "row 1: you keep 2 tokens, the package keeps 3"
    assert kept_probs_miss(expected, expected) is None


def test_stage_ymax_and_pinned_palette():
    import io

    import matplotlib
    matplotlib.use("Agg")
    from PIL import Image

    from minimind.lab.sampling_lab import KEPT, pinned_png, stage_ymax
    from minimind.lab.viz import figure_png
    z = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    assert stage_ymax([("model", z)], [0, 1]) == 0.6  # 0.5 * 1.1 = 0.55, up to 0.6
    fig = distribution_frame(z, [0, 1], ["a", "b"], 1.0, "T", other=True)
    image = Image.open(io.BytesIO(pinned_png(figure_png(fig, dpi=60)))).convert("RGB")
    blue = tuple(int(KEPT[i:i + 2], 16) for i in (1, 3, 5))
    assert blue in {c for _, c in image.getcolors(4096)}  # the kept blue, exactly


def _figure_words(fig) -> tuple[str, set]:
    """All the text a figure draws (titles, tick labels, notes, legend), and its Latin words."""
    import re

    from matplotlib.text import Text
    text = "\n".join(t.get_text() for t in fig.findobj(Text))
    return text, set(re.findall(r"[A-Za-z][A-Za-z_]+", text))


def test_figures_in_chinese_have_no_glosses_and_no_english():
    """Issue #23: the Chinese edition's stage figure and widget frames (zh=True)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minimind.lab.sampling_lab import say
    torch.manual_seed(0)
    logits, ids = torch.randn(1, 40), torch.randint(0, 40, (1, 5))
    stages = pipeline_stages(logits, ids, 1.3, 0.8, 5, 0.9)
    shown = logits[0].topk(3).indices.tolist()
    texts = ["金", "珠", "床"]
    english, _ = _figure_words(stages_figure(stages, shown, texts, 1.0, "床前"))
    assert "金 (gold)" in english and "kept 5 tokens" in english
    allowed = {"top", "poetry", "dense", "nats", "token"}  # names, unit, token (terms.tsv)
    figures = [stages_figure(stages, shown, texts, 1.0, "床前", zh=True)]
    figures += [distribution_frame(stages[k][1], shown, texts, 1.0, say(
        "top-p {p}, after {tail}", True, p=0.9, tail="床前"), other=other, zh=True)
        for k, other in [(2, True), (4, False)]]
    for fig in figures:
        text, words = _figure_words(fig)
        assert "(" not in "".join(ch for ch in text if ch.isascii())  # no "金 (gold)"
        assert words <= allowed, words - allowed
        assert "金" in text and "概率" in text
    assert "重复惩罚 1.3" in _figure_words(figures[0])[0]
    assert "其余" in _figure_words(figures[1])[0]  # the summed bar and its legend
    plt.close("all")
