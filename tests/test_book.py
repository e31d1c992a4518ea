import torch

from model_helpers import tiny_model
from minimind.book import check, show_source
from minimind.norm import RMSNorm


def reference(x):
    return x * 2


def test_check_reports_in_plain_words(capsys):
    cases = [(torch.ones(2, 3),), (torch.arange(4.0),)]
    assert check(lambda x: x + x, reference, cases, name="double")
    assert "✓ double matches the package on all 2 cases." in capsys.readouterr().out
    assert not check(lambda x: x * 3, reference, cases, name="triple")
    assert "✗ case 1 (tensor of shape [2, 3] (float32)): values differ" in capsys.readouterr().out
    assert not check(lambda x: x[:1] * 2, reference, cases, name="short")
    assert "expected shape [2, 3], got [1, 3]" in capsys.readouterr().out


def test_check_catches_errors_and_unwritten_solutions(capsys):
    def unwritten(x):
        raise NotImplementedError()

    assert not check(unwritten, reference, [(torch.ones(1),)], name="mine")
    assert "mine is not written yet" in capsys.readouterr().out
    assert not check(lambda x: x @ x, reference, [(torch.ones(2, 3),)], name="bad")
    assert "bad raised RuntimeError" in capsys.readouterr().out


def test_show_source_numbers_lines_from_the_file(capsys):
    from IPython.core.interactiveshell import InteractiveShell
    InteractiveShell.instance()
    shown = []
    import IPython.display
    original = IPython.display.display
    IPython.display.display = shown.append
    try:
        show_source(RMSNorm)
    finally:
        IPython.display.display = original
    html = shown[0].data
    assert "minimind/norm.py" in html and "class" in html and "rsqrt" in html
