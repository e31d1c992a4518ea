"""minimind/lab/table.py: small tables shown as HTML tables, never as wrapped printed text."""
import pytest
import torch

from minimind.lab.table import table


def test_a_table_renders_as_html_with_numbers_aligned_right():
    t = table([["q_proj", 589824, 0.12345], ["k_proj", 294912, torch.tensor(2.5)]],
              ["module", "parameters", "share"], caption="two projections")
    html = t._repr_html_()
    assert html.count("<tr>") == 3 and "<caption>two projections</caption>" in html
    assert "589,824" in html and "0.123" in html and "2.5" in html
    assert 'text-align:right">294,912' in html and 'text-align:left">k_proj' in html
    assert "white-space:nowrap" in html and "overflow-x:auto" in html


def test_the_text_form_keeps_columns_aligned():
    t = table([["a", 1.0], ["longer", 22.5]], ["name", "x"], formats={"x": ".1f"})
    lines = str(t).splitlines()
    assert lines == ["name       x", "a        1.0", "longer  22.5"]


def test_a_row_of_the_wrong_length_is_named():
    with pytest.raises(ValueError, match="row 2 has 1 values for 2 columns"):
        table([[1, 2], [3]], ["a", "b"])


def test_text_is_escaped():
    assert "&lt;b&gt;" in table([["<b>"]], ["tag"])._repr_html_()
