"""minimind/lab/book.py: the exercise checker's feedback and the live-source display."""
import torch

from minimind.lab.book import check, show_source
from minimind.model import MiniMindModel
from minimind.norm import RMSNorm


def reference(x):
    return x * 2


def test_check_passes_and_reports_in_plain_words(capsys):
    cases = [(torch.ones(2, 3),), (torch.arange(4.0),)]
    assert check(lambda x: x + x, reference, cases, name="double")
    assert "✓ double matches the package on all 2 cases." in capsys.readouterr().out
    assert not check(lambda x: x * 3, reference, cases, name="triple", hint="multiply by two")
    out = capsys.readouterr().out
    assert "✗ case 1 (a tensor of shape [2, 3] (float32)): " in out
    assert "6 of 6 entries differ" in out and "yours is 3, the package's 2" in out
    assert "Hint: multiply by two" in out
    assert not check(lambda x: x[:1] * 2, reference, cases, name="short")
    assert "dimension 0 has the wrong size" in capsys.readouterr().out


def test_check_never_prints_the_expected_answer(capsys):
    answer = [3, 7, 384]
    for wrong in ([3, 7, 768], None, ..., [3, 7], 1152, "3, 7, 384"):
        assert not check(lambda: wrong, lambda: answer, [()], name="k_proj shape")
        out = capsys.readouterr().out
        assert "384" not in out.replace(repr(wrong), "") and "expected" not in out
    assert not check(lambda: 2 * 12345, lambda: 12345, [()], name="count")
    out = capsys.readouterr().out
    assert "2× too large" in out and "12345" not in out.replace("24690", "")
    assert not check(lambda: 5.0, lambda: 7.5, [()], name="x")
    assert "too small" in capsys.readouterr().out


def test_check_catches_errors_and_unwritten_solutions(capsys):
    def unwritten(x):
        raise NotImplementedError()

    assert not check(unwritten, reference, [(torch.ones(1),)], name="mine")
    assert "mine is not written yet" in capsys.readouterr().out
    assert not check(lambda: (..., 3), lambda: (2, 3), [()], name="pair")
    assert "pair is not written yet" in capsys.readouterr().out
    assert not check(lambda x: x @ x, reference, [(torch.ones(2, 3),)], name="bad")
    assert "bad raised RuntimeError" in capsys.readouterr().out


def test_check_names_a_dtype_change(capsys):
    x = torch.ones(4, dtype=torch.bfloat16)
    assert not check(lambda x: (x * 2).float(), reference, [(x,)], name="dtype")
    assert "dtype" in capsys.readouterr().out


def shown_html(obj, **kwargs):
    from IPython.core.interactiveshell import InteractiveShell
    import IPython.display
    InteractiveShell.instance()
    shown, original = [], IPython.display.display
    IPython.display.display = shown.append
    try:
        show_source(obj, **kwargs)
    finally:
        IPython.display.display = original
    return shown[0].data


def test_show_source_shows_a_whole_object():
    html = shown_html(RMSNorm)
    assert "minimind/norm.py" in html and "class" in html and "rsqrt" in html


def test_show_source_shows_a_named_region_without_its_markers():
    html = shown_html(MiniMindModel.forward, region="positions")
    assert "freqs_cos" in html and "region" not in html and "embed_tokens" not in html
    try:
        shown_html(MiniMindModel.forward, region="nope")
    except ValueError as error:
        assert "positions" in str(error)
    else:
        raise AssertionError("an unknown region must raise")


def test_check_names_the_first_entry_that_differs(capsys):
    masked = torch.tensor([[0.5, float("-inf")], [0.25, float("-inf")]])
    wrong = masked.clone()
    wrong[1, 0] = 0.75
    assert not check(lambda x: wrong, lambda x: masked, [(masked,)], name="mask")
    out = capsys.readouterr().out
    # -inf where the package has -inf is a match, not "differ by up to nan"
    assert "one entry differs" in out and "index [1, 0]: yours is 0.75, the package's 0.25" in out
    assert "nan" not in out
    unmasked = torch.where(masked.isinf(), 0.0, masked)
    assert not check(lambda x: unmasked, lambda x: masked, [(masked,)], name="mask")
    assert "index [0, 1]: yours is 0, the package's -inf" in capsys.readouterr().out


def test_check_compares_token_ids_exactly(capsys):
    ids = torch.tensor([[5, 17, 638]])
    assert not check(lambda: torch.tensor([[5, 17, 17]]), lambda: ids, [()], name="ids")
    out = capsys.readouterr().out
    assert "index [0, 2]: yours is 17, the package's 638" in out and "up to" not in out


def test_check_counts_items_from_one(capsys):
    assert not check(lambda: (torch.ones(2), 3), lambda: (torch.ones(2), 4), [()], name="pair")
    assert "item 2 of the answer" in capsys.readouterr().out


def test_an_in_place_answer_cannot_change_the_cases(capsys):
    x = torch.arange(4.0)

    def in_place(t):
        return t.mul_(2)  # modifies its argument

    assert check(in_place, reference, [(x,)], name="double")
    assert torch.equal(x, torch.arange(4.0))  # exact: the case itself was never touched
