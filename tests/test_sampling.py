"""Each sampling function against the matching transformers logits processor."""
import pytest
import torch
from transformers import (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
                          TopPLogitsWarper)

from minimind.sampling import (apply_repetition_penalty, apply_temperature, next_token_distribution,
                               sample_next_token, top_k_filter, top_p_filter)

logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(0)) * 3
input_ids = torch.randint(0, 300, (4, 12), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("penalty", [0.7, 1.0, 1.3])
def test_repetition_penalty(penalty):
    expected = RepetitionPenaltyLogitsProcessor(penalty)(input_ids, logits.clone())
    assert torch.equal(apply_repetition_penalty(logits, input_ids, penalty), expected)


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_temperature(t):
    assert torch.equal(apply_temperature(logits, t), TemperatureLogitsWarper(t)(input_ids, logits.clone()))


@pytest.mark.parametrize("k", [1, 5, 50, 299])
def test_top_k(k):
    assert torch.equal(top_k_filter(logits, k), TopKLogitsWarper(k)(input_ids, logits.clone()))


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.999])
def test_top_p(p):
    assert torch.equal(top_p_filter(logits, p), TopPLogitsWarper(p)(input_ids, logits.clone()))


def tied_rows(seed, dtype):
    """256 rows of 40 logits with many exact ties (bf16 keeps 8 significant bits)."""
    rows = torch.randn(256, 40, generator=torch.Generator().manual_seed(seed)) * 2
    return rows.round() if dtype is None else rows.to(dtype)


TIED = [tied_rows(2, None), tied_rows(3, torch.bfloat16),
        tied_rows(4, torch.bfloat16).float()]
TIED_IDS = ["integers", "bf16", "bf16-valued-fp32"]


def test_top_p_breaks_a_tie_as_transformers_does():
    tie = torch.tensor([[2.0, 1.0, 1.0, 0.0]])  # 1 - top_p falls between the tied 1s
    expected = TopPLogitsWarper(0.632753)(None, tie.clone())
    assert torch.equal(top_p_filter(tie, 0.632753), expected)  # same ops: exact
    assert torch.isfinite(expected).sum() == 2  # one of the tied pair is dropped


@pytest.mark.parametrize("rows", TIED, ids=TIED_IDS)
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.632753, 0.8, 0.95])
def test_top_p_on_tied_rows(rows, p):
    # exact: same operations as TopPLogitsWarper on the same dtype, so the same bits
    assert torch.equal(top_p_filter(rows, p), TopPLogitsWarper(p)(None, rows.clone()))


@pytest.mark.parametrize("rows", TIED, ids=TIED_IDS)
@pytest.mark.parametrize("k", [1, 3, 10, 39])
def test_top_k_on_tied_rows(rows, k):
    # exact: the same topk threshold and comparison as TopKLogitsWarper
    assert torch.equal(top_k_filter(rows, k), TopKLogitsWarper(k)(None, rows.clone()))


@pytest.mark.parametrize("rows", TIED, ids=TIED_IDS)
@pytest.mark.parametrize("penalty", [0.7, 1.3])
def test_repetition_penalty_on_tied_rows(rows, penalty):
    seen = torch.randint(0, 40, (256, 12), generator=torch.Generator().manual_seed(5))
    expected = RepetitionPenaltyLogitsProcessor(penalty)(seen, rows.clone())
    # exact: the same where(< 0, * penalty, / penalty) on the same gathered values
    assert torch.equal(apply_repetition_penalty(rows, seen, penalty), expected)


def test_top_p_always_keeps_the_best_token():
    peaked = torch.tensor([[10.0, 0.0, -1.0]])
    assert torch.isfinite(top_p_filter(peaked, 0.01)).tolist() == [[True, False, False]]


def test_greedy_and_distribution():
    assert torch.equal(sample_next_token(logits, do_sample=False)[:, 0], logits.argmax(-1))
    probs = next_token_distribution(logits, input_ids, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2)
    assert torch.allclose(probs.sum(-1), torch.ones(4)) and ((probs > 0).sum(-1) <= 20).all()


@pytest.mark.parametrize("call, message", [
    (lambda: apply_temperature(logits, 0), "temperature must be > 0"),
    (lambda: top_p_filter(logits, 1.5), r"top_p must be in \(0, 1\]"),
    (lambda: top_p_filter(logits, 0), r"top_p must be in \(0, 1\]"),
    (lambda: top_k_filter(logits, -1), "top_k must be >= 0"),
    (lambda: apply_repetition_penalty(logits, input_ids, 0), "repetition_penalty must be > 0"),
])
def test_bad_settings_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
