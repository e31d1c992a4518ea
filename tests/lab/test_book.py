"""minimind/lab/book.py: the live-source display (the checker: test_checker.py)."""
import torch

from minimind.lab.book import show_source
from minimind.model import MiniMindModel
from minimind.norm import RMSNorm


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
