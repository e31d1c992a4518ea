"""Small tables shown as tables: HTML in Jupyter and the book, aligned text in a terminal.

A printed table wider than the text column wraps and loses its columns; `table(...)` keeps each row
on one line (the HTML scrolls sideways if it must) and formats numbers the same way in both forms.
"""
from __future__ import annotations

import html
import numbers

import torch


class Table:
    """Rows of values under column names; `_repr_html_` for notebooks, `str` for terminals."""

    def __init__(self, rows, columns, caption=None, digits=3, formats=None):
        self.columns = [str(c) for c in columns]
        self.rows = [list(row) for row in rows]
        for i, row in enumerate(self.rows, 1):
            if len(row) != len(self.columns):
                raise ValueError(f"row {i} has {len(row)} values for {len(self.columns)} columns")
        self.caption, self.digits, self.formats = caption, digits, dict(formats or {})

    def cell(self, value, column: str) -> str:
        """One value as text: a format from `formats[column]`, else numbers to `digits` significant."""
        if torch.is_tensor(value) and value.numel() == 1:
            value = value.item()
        spec = self.formats.get(column)
        if spec is not None:
            return spec(value) if callable(spec) else format(value, spec)
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            return str(value)
        if isinstance(value, numbers.Integral):
            return f"{value:,}"
        return f"{value:.{self.digits}g}"

    def texts(self) -> list[list[str]]:
        return [[self.cell(v, c) for v, c in zip(row, self.columns)] for row in self.rows]

    def _numeric(self, j: int) -> bool:
        values = [row[j] for row in self.rows]
        return all(isinstance(v, numbers.Number) or torch.is_tensor(v) for v in values)

    def _repr_html_(self) -> str:
        align = ["right" if self._numeric(j) else "left" for j in range(len(self.columns))]
        head = "".join(f'<th style="text-align:{a}">{html.escape(c)}</th>'
                       for c, a in zip(self.columns, align))
        body = "".join("<tr>" + "".join(f'<td style="text-align:{a}">{html.escape(t)}</td>'
                                        for t, a in zip(row, align)) + "</tr>"
                       for row in self.texts())
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<div class="mm-table" style="overflow-x:auto"><table style="white-space:nowrap">'
                f"{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")

    def __str__(self) -> str:
        texts = self.texts()
        widths = [max(len(c), *(len(r[j]) for r in texts)) for j, c in enumerate(self.columns)]
        lines = ["  ".join(c.rjust(w) if self._numeric(j) else c.ljust(w)
                           for j, (c, w) in enumerate(zip(self.columns, widths)))]
        lines += ["  ".join(t.rjust(w) if self._numeric(j) else t.ljust(w)
                            for j, (t, w) in enumerate(zip(r, widths))) for r in texts]
        return "\n".join(([self.caption] if self.caption else []) + lines)

    __repr__ = __str__


def table(rows, columns, caption=None, digits=3, formats=None) -> Table:
    """A small table to show as the cell's result (the last line of a cell, or `display(...)`).

    `rows`: sequences of values, one per column. Numbers keep `digits` significant digits (ints get
    thousands separators) unless `formats` gives a column a format spec (".2%") or a function.
    """
    return Table(rows, columns, caption, digits, formats)
