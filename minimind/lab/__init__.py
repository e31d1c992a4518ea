"""Book helpers, apart from the model: setup, live source, the exercise checker, widgets, probes, shape traces.

Nothing in minimind's core imports this package.
"""
from .book import check, setup, show_source, within_rounding

__all__ = ["check", "setup", "show_source", "within_rounding"]
