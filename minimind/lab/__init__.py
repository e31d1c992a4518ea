"""Book helpers, apart from the model: setup, live source, the exercise checker, tables, diagrams, widgets,
probes, shape traces.

Nothing in minimind's core imports this package.
"""
from .book import bench_results, setup, show_source, within_rounding
from .checker import Case, NotYet, check
from .table import table

__all__ = ["Case", "NotYet", "bench_results", "check", "setup", "show_source", "table", "within_rounding"]
