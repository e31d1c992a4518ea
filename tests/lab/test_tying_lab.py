"""minimind/lab/tying_lab.py: the numbers behind chapter 8 (the tie, its savings, gradients, the embedding)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from figure_helpers import english_words as latin_words, figure_texts
from model_helpers import random_ids, tiny_config, tiny_model
from minimind import MiniMindConfig
from minimind.lab.tying_lab import (category_cohesion, end_gradients, gloss, gradient_summary, is_tied,
                                    nearest_in_same_group, nearest_neighbours, pca_2d, read_curves, running_mean,
                                    tie_report, tying_savings)
from minimind.lab.tying_lab import (drift_run, end_drift, head_miss, through_both_ends, tied_logits,
                                    tying_figure)
from minimind.lab.variants import untied_model


def test_tie_report_tells_a_real_tie_from_a_copy_and_from_storage_twins():
    tied = tiny_model()
    real = tie_report(tied)
    assert real == {"same object": True, "same data_ptr": True, "same storage": True, "equal values": True,
                    "parameters": sum(p.numel() for p in tied.parameters())} and is_tied(tied)
    copied = copy.deepcopy(tied)
    copied.lm_head.weight = nn.Parameter(copied.model.embed_tokens.weight.detach().clone())
    fake = tie_report(copied)
    # "equal values" is torch.equal, exact: a clone of the same matrix
    assert fake["equal values"] and not (fake["same object"] or fake["same data_ptr"] or fake["same storage"])
    assert fake["parameters"] == real["parameters"] + 320 * 64 and not is_tied(copied)
    twins = copy.deepcopy(tied)
    twins.lm_head.weight = nn.Parameter(twins.model.embed_tokens.weight.data)  # same memory, two Parameters
    t = tie_report(twins)
    assert t["same data_ptr"] and t["same storage"] and not t["same object"] and not is_tied(twins)
    assert not is_tied(untied_model(tiny_config()))
    assert not tie_report(untied_model(tiny_config()))["equal values"]


def test_deepcopy_keeps_the_tie():  # the chapter relies on it when it copies the trained model
    assert is_tied(copy.deepcopy(tiny_model()))


def test_tying_savings_is_one_vocab_by_hidden_matrix():
    s = tying_savings(MiniMindConfig())
    assert s["saved"] == 6400 * 768 == s["untied"] - s["tied"] and s["tied"] == 63_912_192
    # exact: the same integer over 2 ** 20 (18.75 MiB), and doubling is exact in binary
    assert s["saved MiB fp32"] == 6400 * 768 * 4 / 2 ** 20 and s["saved MiB bf16"] * 2 == s["saved MiB fp32"]
    small = tying_savings(tiny_config(tie_word_embeddings=False))  # whatever the config says, both are counted
    assert small["saved"] == 320 * 64 and 0 < small["share"] < 1


def test_end_gradients_add_up_to_the_tied_gradient():
    model = tiny_model().train()
    ids = random_ids()
    g_embed, g_head, loss = end_gradients(model, ids)
    model.zero_grad()
    tied_loss = model(ids, labels=ids).loss
    tied_loss.backward()
    # exact: the same forward ops on value-identical copies of the tied matrix (dropout 0)
    assert torch.equal(loss, tied_loss.detach())
    # the tied .grad is the same two contributions added by autograd; a second backward (on a GPU, attention and
    # embedding backward may accumulate in another order) moves gradients <= 0.6 by ~1e-7
    torch.testing.assert_close(g_embed + g_head, model.lm_head.weight.grad, atol=1e-6, rtol=1e-5)
    assert model.lm_head.weight.grad is not None and is_tied(model)  # the model itself is left tied
    # the embedding end only reaches rows of tokens that were read (and whose reading reached the loss)
    touched = (g_embed != 0).any(-1).nonzero().flatten()
    assert set(touched.tolist()) <= set(ids.unique().tolist())
    assert (g_head != 0).any(-1).all()  # the softmax pushes on every row


def test_gradient_summary_shares_add_up_and_rows_are_counted():
    g_embed = torch.zeros(5, 3)
    g_embed[1] = torch.tensor([1.0, 0, 0])
    g_head = torch.tensor([[0.0, 1, 0]] * 5)
    s = gradient_summary(g_embed, g_head)
    # float32 shares 1/6 and 5/6: ~1e-7
    assert abs(s["share embed"] + s["share head"] - 1) < 1e-6 and abs(s["share embed"] - 1 / 6) < 1e-6
    # exact: no coordinate is nonzero in both, so the dot product is exactly 0
    assert s["rows embed"] == 1 and s["rows head"] == 5 and s["cosine"] == 0
    # orthogonal here; float32 norms 1, sqrt 5, sqrt 6 squared back: <= ~1.3e-6
    assert abs(s["norm total"] ** 2 - s["norm embed"] ** 2 - s["norm head"] ** 2) < 1e-5


def test_nearest_neighbours_uses_direction_not_length():
    w = torch.tensor([[1.0, 0.0], [10.0, 10.0], [0.9, 0.1], [-1.0, 0.0]])
    idx, cos = nearest_neighbours(w, 0, k=3)
    assert idx.tolist() == [2, 1, 3]  # row 1 has the larger dot product but the smaller cosine
    # normalize-then-matmul vs cosine_similarity's own formula, values <= 1: a few float32 ulps
    torch.testing.assert_close(cos, F.cosine_similarity(w[[2, 1, 3]], w[0:1]), atol=1e-6, rtol=1e-6)


def test_pca_2d_matches_the_covariance_eigenvectors_and_is_sign_stable():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 6, generator=g) * torch.tensor([5.0, 3.0, 1.0, 0.5, 0.2, 0.1])
    coords, explained = pca_2d(x)
    centred = x - x.mean(0)
    evals, evecs = torch.linalg.eigh(centred.T @ centred)
    # two float32 solvers (SVD of x, eigh of x^T x, eigenvalues up to ~1250): shares agree to ~1e-7
    torch.testing.assert_close(explained, evals.flip(0)[:2] / evals.sum(), atol=2e-6, rtol=0)
    for j in range(2):
        # their eigenvectors agree to ~1e-7 relative, coordinates up to ~10 to ~3e-6; 1e-4 leaves room for
        # other LAPACK builds
        torch.testing.assert_close(coords[:, j].abs(), (centred @ evecs[:, -1 - j]).abs(), atol=1e-4, rtol=0)
        assert coords[coords[:, j].abs().argmax(), j] > 0
    flipped, _ = pca_2d(-x)  # a sign convention: the same picture for x and -x
    # the SVD of -x mirrors that of x to the last bit here, but no solver promises it: as above, 1e-4
    torch.testing.assert_close(flipped, coords, atol=1e-4, rtol=0)


def test_category_cohesion_and_nearest_in_same_group():
    w = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [-1.0, 0.0]])
    groups = {"a": [0, 1], "b": [2, 3]}
    result = category_cohesion(w, groups)
    expected_within = F.cosine_similarity(w[0:1], w[1:2]).item()
    # (sum - diagonal) / 2 of a float32 2x2 block vs cosine_similarity: the subtraction costs ~ulp(4) / 2 = 2.4e-7
    assert abs(result["a"][0] - expected_within) < 1e-6 and result["a"][1] < result["a"][0]
    assert nearest_in_same_group(w, groups) == (4, 4)
    assert nearest_in_same_group(w, {"a": [0, 2], "b": [1, 3]}) == (0, 4)


def test_read_curves_and_running_mean(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("variant,step,tokens,lr,train_loss,val_loss\nx,1,8,0.1,3.0,\nx,2,16,0.1,1.0,2.5\n"
                    "y,1,8,0.1,4.0,\n")
    curves = read_curves(path)
    # exact: float() of the same text; means of small integers
    assert curves["x"] == {"step": [1, 2], "train": [3.0, 1.0], "val_step": [2], "val": [2.5]}
    assert curves["y"]["val"] == []
    assert running_mean([3.0, 1.0, 2.0, 6.0], 2).tolist() == [3.0, 2.0, 1.5, 4.0]


def test_gloss():
    assert gloss("月") == "月 (yuè, moon)" and gloss("，") == "， (comma)" and gloss("龘") == "龘"


def test_tying_figure_draws_the_config_sizes():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = tying_figure(MiniMindConfig(), {"poetry": tiny_config()})
    texts = " ".join(t.get_text() for t in fig.axes[0].texts) + fig.axes[0].get_title()
    assert "6,400 × 768" in texts and "4,915,200" in texts and "320 × 64" in texts
    plt.close(fig)


def test_tied_logits_is_the_models_own_head():
    model = tiny_model()
    h = torch.randn(2, 3, 64)
    # the same F.linear on the same tensor: exact
    assert torch.equal(tied_logits(h, model.model.embed_tokens), model.lm_head(h))


def _copied_head(hidden, embedding):  # the mistake the exercise warns about: right values, own tensor
    return hidden @ embedding.weight.detach().clone().T


def test_through_both_ends_sees_the_tie_in_the_gradient():
    torch.manual_seed(0)
    weight, ids, targets = torch.randn(12, 6), torch.randint(12, (2, 5)), torch.randint(12, (2, 5))
    logits, grad = through_both_ends(tied_logits, weight, ids, targets)
    # by hand: two leaf copies of the matrix, one per use; the tied gradient is their sum
    w_in, w_out = weight.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    x = F.embedding(ids, w_in)
    by_hand = torch.tanh(x + x.roll(1, dims=1)) @ w_out.T
    F.cross_entropy(by_hand.flatten(0, 1), targets.flatten()).backward()
    # the same float32 ops (F.linear vs @ may use other kernels): ~1e-7 on values of order 1
    torch.testing.assert_close(logits, by_hand.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, w_in.grad + w_out.grad, atol=1e-6, rtol=1e-5)
    copied_logits, copied_grad = through_both_ends(_copied_head, weight, ids, targets)
    torch.testing.assert_close(copied_logits, logits, atol=1e-6, rtol=1e-6)  # same numbers...
    torch.testing.assert_close(copied_grad, w_in.grad, atol=1e-6, rtol=1e-5)  # ...lookup's share only
    message, hint = head_miss((copied_logits, copied_grad), (logits, grad))
    assert "copy" in message and ".detach().clone()" in hint  # the hint fits the mistake
    def cloned(h, e):  # a clone made inside forward stays in autograd's graph: a tie
        return F.linear(h, e.weight.clone())

    assert head_miss(through_both_ends(cloned, weight, ids, targets), (logits, grad)) is None
    assert "one score per token" in head_miss((torch.zeros(2, 5, 6), grad), (logits, grad))
    assert head_miss((logits, grad), (logits, grad)) is None


def test_end_drift():
    torch.manual_seed(0)
    e = torch.randn(10, 4)
    rms_same, cos_same = end_drift(e, e.clone())
    assert rms_same == 0.0 and abs(cos_same - 1) < 1e-6  # exact 0; a cosine of 1 within float32 ulps
    rms, cos = end_drift(e, 2 * e)  # same directions, difference = e
    # float32 RMS and cosines of order 1: ~1e-7
    assert abs(rms - e.pow(2).mean().sqrt().item()) < 1e-6 and abs(cos - 1) < 1e-6
    _, cos_neg = end_drift(e, -e)
    assert abs(cos_neg + 1) < 1e-6


def test_drift_run_moves_only_the_head_of_tokens_never_read():
    model = tiny_model()
    untied = untied_model(model.config)
    untied.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 100, (6, 9), generator=g)  # rows 100+ are never read
    history = drift_run(untied, rows, steps=3, rows_per_step=2, lr=1e-2)
    assert history["step"] == [1, 2, 3] and history["n_read"] <= 100
    (embed_read, head_read), (embed_unread, head_unread) = (history["moved"]["read"],
                                                            history["moved"]["unread"])
    assert embed_read > 0 and head_read > 0 and head_unread > 0
    # never-read embedding rows get no gradient: only AdamW's decoupled weight decay
    # (lr 1e-2 x 0.01) moves them, 3 steps x 1e-4 of their size (~0.125 here): ~4e-5
    assert embed_unread < 1e-4 < head_unread
    assert history["read"][-1][0] > 0 and history["read"][-1][1] < 1


def test_drift_run_with_sgd_leaves_never_read_embedding_rows_exactly_in_place():
    model = tiny_model()
    untied = untied_model(model.config)
    untied.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 100, (6, 9), generator=g)  # rows 100+ are never read
    history = drift_run(untied, rows, steps=3, rows_per_step=2, lr=0.1, optimizer="sgd")
    embed_unread, head_unread = history["moved"]["unread"]
    assert embed_unread == 0 < head_unread  # plain SGD: no weight decay, no gradient
    assert history["moved"]["read"][1] > head_unread  # SGD: small gradient, small step


def english_words(texts) -> set[str]:
    return latin_words(texts, kept=("poetry", "dense", "token"))


def test_every_chinese_template_uses_only_the_english_fields():
    from string import Formatter
    from minimind.lab.tying_lab import ZH
    fields = lambda text: {f for _, f, _, _ in Formatter().parse(text) if f}
    assert all(fields(zh) <= fields(en) for en, zh in ZH.items())
    assert "glosses" not in fields(ZH["{name}: {chars} ({glosses})"])


def test_group_gloss_lists_a_short_group_and_spans_a_long_one():
    from minimind.lab.tying_lab import group_gloss
    assert group_gloss("春夏秋冬") == "spring, summer, autumn, winter"
    assert group_gloss("一二三四五六七八九十百千万") == "one … ten thousand"


@pytest.mark.filterwarnings("ignore:Glyph")
def test_category_map_for_the_chinese_edition_has_no_glosses():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from minimind.lab.tying_lab import category_map

    class Pieces:  # a tokenizer that knows six characters
        chars = "春秋红白东西"
        def decode(self, ids):
            return self.chars[ids[0]]

    weight = torch.randn(6, 16, generator=torch.Generator().manual_seed(0))
    categories = {"seasons": "春秋", "colours": "红白", "directions": "东西"}
    groups = {"seasons": [0, 1], "colours": [2, 3], "directions": [4, 5]}
    english = category_map(weight, groups, categories, Pieces())
    legend = [t.get_text() for t in english.legends[0].get_texts()]
    assert legend[0] == "seasons: 春秋 (spring, autumn)"
    assert english.axes[0].get_title().endswith("of 6 characters")
    chinese = category_map(weight, groups, categories, Pieces(), zh=True)
    assert [t.get_text() for t in chinese.legends[0].get_texts()] == [
        "季节：春秋", "颜色：红白", "方位：东西"]
    assert english_words(figure_texts(chinese)) == set()
    plt.close("all")


@pytest.mark.filterwarnings("ignore:Glyph")
def test_row_norm_figure_for_the_chinese_edition_names_the_marks_in_chinese():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from minimind.lab.tying_lab import row_norm_figure

    class Marks:  # ids 0 and 1 are the most read: the comma and the full stop
        def decode(self, ids):
            return "，。"[ids[0]] if ids[0] < 2 else "字"

    batch = torch.tensor([[0, 1, 0, 1, 0, 2, 3]])  # [1, 7]: 0 read 3 times, 1 twice
    generator = torch.Generator().manual_seed(0)
    g_embed, g_head = torch.rand(8, 4, generator=generator), torch.rand(8, 4)
    english = row_norm_figure(g_embed, g_head, batch, Marks())
    notes = sorted(t.get_text() for t in english.axes[1].texts)
    assert notes == ["comma ，", "full stop 。"]
    # ids 3 to 7: 3 only at the last position, where no scored prediction reads it
    assert english.axes[0].get_title() == "not read\n(5 tokens)"
    chinese = row_norm_figure(g_embed, g_head, batch, Marks(), zh=True)
    assert sorted(t.get_text() for t in chinese.axes[1].texts) == ["句号 。", "逗号 ，"]
    assert english_words(figure_texts(chinese)) == set()
    plt.close("all")
