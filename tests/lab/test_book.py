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
    assert "✗ case 1 (a tensor of shape [2, 3] (float32)): " in out and "values differ" in out
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
