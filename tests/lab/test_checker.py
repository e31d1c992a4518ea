"""minimind/lab/checker.py: feedback in plain words, progressive hints, and checks that cannot be gamed."""
import warnings

import pytest
import torch

from minimind.lab import checker
from minimind.lab.checker import Case, NotYet, check
from minimind.sampling import top_p_filter


def reference(x):
    return x * 2


def miss(*args, **kwargs) -> str:
    """The message of a check that must fail."""
    with pytest.raises(NotYet) as failure:
        check(*args, **kwargs)
    return str(failure.value)


def test_a_pass_says_so_and_a_miss_names_the_case_and_entry(capsys):
    cases = [(torch.ones(2, 3),), (torch.arange(4.0),)]
    assert check(lambda x: x + x, reference, cases, name="double")
    assert "✓ double matches the package on all 2 cases." in capsys.readouterr().out
    out = miss(lambda x: x * 3, reference, cases, name="triple")
    assert out.startswith("✗ case 1 (x [2, 3] float32): ")  # counted from 1, named as the package names it
    assert "6 of 6 entries differ" in out and "yours is 3, the package's 2" in out
    assert "dimension 0 has the wrong size" in miss(lambda x: x[:1] * 2, reference, cases, name="short")


def test_a_miss_shows_only_its_message_in_ipython():
    with pytest.raises(NotYet) as failure:
        check(lambda x: x, reference, [(torch.ones(2),)], name="same")
    assert failure.value._render_traceback_() == str(failure.value).splitlines()
    assert isinstance(failure.value, AssertionError)  # nbgrader and `assert` treat it as a failed test


def test_hints_progress_from_a_nudge_to_the_last_one():
    hints = ["a nudge", "closer", "nearly the answer"]
    shown = [miss(lambda x: x, reference, [(torch.ones(2),)], name="hinted", hints=hints)
             for _ in range(4)]
    assert "Hint 1 of 3: a nudge" in shown[0] and "closer" not in shown[0]
    assert "Hint 2 of 3: closer" in shown[1]
    assert "Hint 3 of 3: nearly the answer" in shown[2] and "Hint 3 of 3" in shown[3]
    assert check(reference, reference, [(torch.ones(2),)], name="hinted")
    assert "Hint 1 of 3" in miss(lambda x: x, reference, [(torch.ones(2),)], name="hinted", hints=hints)


def test_the_hint_of_the_case_that_failed_is_shown():
    cases = [Case(torch.ones(3)), Case(-torch.ones(3), hint="a negative input: is the sign kept?")]
    fn = lambda x: x.abs() * 2  # noqa: E731  wrong only on the negative input
    out = miss(fn, reference, cases, name="signs")
    assert out.startswith("✗ case 2") and "About this case: a negative input" in out


def test_masks_and_ids_are_described_without_nan_or_distances():
    mask = torch.tensor([[0.0, float("-inf"), float("-inf")], [0.0, 0.0, float("-inf")]])
    kept = mask.clone()
    kept[0, 1] = 0.0
    out = miss(lambda m: kept, lambda m: mask, [(mask,)], name="mask")
    assert "nan" not in out and "1 is masked (-inf) in the package's but kept in yours" in out
    assert "index [0, 1]" in out
    ids = torch.tensor([5, 17, 638])
    out = miss(lambda: torch.tensor([5, 17, 17]), lambda: ids, [()], name="ids")
    assert "yours is 17, the package's 638" in out and "621" not in out


def test_a_finite_entry_where_the_package_masks_is_named():
    masked = torch.tensor([[0.5, float("-inf")], [0.25, float("-inf")]])
    wrong = masked.clone()
    wrong[1, 0] = 0.75
    out = miss(lambda x: wrong, lambda x: masked, [(masked,)], name="mask")
    # -inf where the package has -inf is a match, not "differ by up to nan"
    assert "one entry differs" in out and "index [1, 0] (Python's, from 0): yours is 0.75, the package's 0.25" in out
    unmasked = torch.where(masked.isinf(), 0.0, masked)
    assert "(Python's, from 0): yours is 0, the package's -inf" in miss(lambda x: unmasked, lambda x: masked,
                                                                  [(masked,)], name="mask")


def test_items_are_counted_from_one():
    out = miss(lambda: (torch.ones(2), 3), lambda: (torch.ones(2), 4), [()], name="pair")
    assert "item 2 of the answer" in out


def test_never_prints_the_expected_answer():
    answer = [3, 7, 384]
    for wrong in ([3, 7, 768], [3, 7], 1152, "3, 7, 384"):
        out = miss(lambda: wrong, lambda: answer, [()], name="k_proj shape")
        assert "384" not in out.replace(repr(wrong), "") and "expected" not in out
    out = miss(lambda: 2 * 12345, lambda: 12345, [()], name="count")
    assert "2× too large" in out and "12345" not in out.replace("24690", "")
    assert "the answer (5) is too small" in miss(lambda: 5.0, lambda: 7.5, [()], name="x")


def test_unwritten_answers_and_errors_are_named():
    def unwritten(x):
        raise NotImplementedError()

    assert "mine is not written yet" in miss(unwritten, reference, [(torch.ones(1),)], name="mine")
    assert "pair is not written yet" in miss(lambda: (..., 3), lambda: (2, 3), [()], name="pair")
    assert "bad raised RuntimeError" in miss(lambda x: x @ x, reference, [(torch.ones(2, 3),)],
                                             name="bad")
    x = torch.ones(4, dtype=torch.bfloat16)
    assert "dtype" in miss(lambda x: (x * 2).float(), reference, [(x,)], name="dtype")


def test_an_in_place_answer_cannot_corrupt_the_cases():
    x = torch.ones(3)

    def in_place(t):
        return t.mul_(2)

    assert check(in_place, reference, [(x,), (x,)], name="in place")
    assert torch.equal(x, torch.ones(3))


def test_warnings_and_stderr_never_reach_stderr(capsys):
    import sys

    def noisy(x):
        warnings.warn("this overload is deprecated", UserWarning)
        print("debug line", file=sys.stderr)
        return x * 2

    assert check(noisy, reference, [(torch.ones(2),)], name="noisy")
    out, err = capsys.readouterr()
    assert err == "" and "your function warned: UserWarning: this overload is deprecated" in out
    assert "your function wrote to stderr: debug line" in out


def test_the_package_function_itself_is_refused():
    logits = torch.randn(2, 10)
    ref = lambda l, p: top_p_filter(l, p)  # noqa: E731
    for alias in (top_p_filter, __import__("functools").partial(top_p_filter)):
        out = miss(alias, ref, [(logits, 0.9)], name="my_top_p", forbid=[top_p_filter])
        assert "is the package's own `top_p_filter`" in out
    wrapper = lambda l, p: top_p_filter(l, p)  # noqa: E731  a wrapper calls it: unavailable
    out = miss(wrapper, ref, [(logits, 0.9)], name="my_top_p", forbid=[top_p_filter])
    assert "not to use `top_p_filter`" in out
    assert check(ref, ref, [(logits, 0.9)], name="reference still works")  # restored afterwards


def test_without_makes_a_torch_function_unavailable():
    x = torch.randn(2, 5)
    out = miss(lambda t: torch.softmax(t, -1), lambda t: torch.softmax(t, -1), [(x,)], name="soft",
               without=["torch.softmax"])
    assert "not to use `torch.softmax`" in out
    by_hand = lambda t: t.exp() / t.exp().sum(-1, keepdim=True)  # noqa: E731
    assert check(by_hand, lambda t: torch.softmax(t, -1), [(x,)], name="soft", without=["torch.softmax"])
    assert torch.softmax is torch.softmax and torch.softmax(x, -1).shape == x.shape


def test_graded_mode_gives_no_direction_and_hides_hidden_cases(monkeypatch):
    monkeypatch.setenv("MINIMIND_GRADED", "1")
    out = miss(lambda: 5.0, lambda: 7.5, [()], name="x")
    assert "too small" not in out and "not the package's value" in out
    assert "too large" not in miss(lambda: 2 * 12345, lambda: 12345, [()], name="count")
    hidden = Case(torch.full((2,), 3.0), hidden=True, hint="reveals the case")
    out = miss(lambda x: x, reference, [hidden], name="h")
    assert "one the notebook does not list" in out and "reveals" not in out and "package's 6" not in out


def test_explain_puts_a_miss_in_the_exercises_terms():
    def kept(got, expected):
        for row, (g, e) in enumerate(zip(got, expected), 1):
            if g.isfinite().sum() != e.isfinite().sum():
                return f"row {row}: you keep {int(g.isfinite().sum())} tokens, the package keeps " \
                       f"{int(e.isfinite().sum())}"

    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    ref = lambda l: top_p_filter(l, 0.9)  # noqa: E731
    out = miss(lambda l: l, ref, [(logits,)], name="top-p", explain=kept)
    assert "row 1: you keep 4 tokens, the package keeps" in out
    checker._failures.clear()


def test_a_pass_is_true_and_displays_nothing():
    result = check(reference, reference, [(torch.ones(2),)], name="quiet")
    assert result and repr(result) == "True"
    assert result._ipython_display_() is None  # IPython shows nothing for it, not "True"


def test_a_forbidden_method_is_unavailable_on_its_class():
    from minimind.norm import RMSNorm

    norm = RMSNorm(4)
    ref = lambda x: norm(x)  # noqa: E731  the package's module, called through its forward
    out = miss(lambda x: norm(x), ref, [Case(torch.ones(1, 4), hint="not shown here")], name="norm",
               forbid=[RMSNorm.forward])
    assert "not to use `forward`" in out and "not shown here" not in out
    assert torch.equal(norm(torch.ones(1, 4)), ref(torch.ones(1, 4)))  # restored afterwards


def test_a_case_of_settings_is_described_by_its_settings():
    from minimind import MiniMindConfig

    out = miss(lambda c: 1, lambda c: 2, [({"head_dim": 128, "num_key_value_heads": 8},)], name="d")
    assert "case 1 (c=dict with head_dim=128, num_key_value_heads=8)" in out
    out = miss(lambda c: 1, lambda c: 2, [(MiniMindConfig(hidden_size=512),)], name="c")
    assert "case 1 (c=a config with " in out and "hidden_size=512" in out


def test_a_count_is_printed_as_a_count():
    assert "the answer (1,474,560) is too small" in miss(lambda: 1474560, lambda: 2e6, [()], name="n")
    assert "the answer (0.125) is 4× too small" in miss(lambda: 0.125, lambda: 0.5, [()], name="f")


def test_explain_may_choose_the_hint_that_fits_the_mistake():
    def diagnose(got, expected):
        return "every head differs: not the head mapping", "check the scale of the scores"

    out = miss(lambda x: x, reference, [(torch.ones(2),)], name="heads", hints=["shapes first"],
               explain=diagnose)
    assert "every head differs" in out and "Hint: check the scale" in out and "shapes first" not in out


def test_a_near_miss_says_how_near():
    out = miss(lambda: 50.0, lambda: 49.94, [()], name="scale")
    assert "the answer (50) is 0.12% too large: close" in out


def test_a_single_infinite_number_is_described_in_words():
    out = miss(lambda x: torch.tensor(float("inf")), lambda x: x.sum(), [(torch.ones(3),)],
               name="loss")
    assert "is inf, where the package's is a finite number" in out and "masked" not in out
    out = miss(lambda x: x.sum() * 1.01, lambda x: x.sum(), [(torch.ones(3),)], name="loss")
    assert "1.00% too large" in out and "package's 3" not in out  # never the answer
    out = miss(lambda x: x.double().sum(), lambda x: x.sum(), [(torch.ones(3),)], name="loss")
    assert "has dtype float64; the package's is float32" in out
