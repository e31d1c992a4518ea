"""minimind.lab.bench_results(): the committed benchmark tables, from a checkout or beside the notebook."""
from pathlib import Path

import pytest

from minimind.lab import bench_results, book

REPO_BENCH = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_a_checkout_finds_the_repository_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no copy beside the notebook: the editable install's checkout
    assert bench_results() == REPO_BENCH and (bench_results() / "sampling_grid.csv").is_file()


def test_a_copy_beside_the_notebook_comes_first(tmp_path, monkeypatch):
    (tmp_path / "bench" / "results").mkdir(parents=True)  # what tools/course.py ships with a chapter
    monkeypatch.chdir(tmp_path)
    assert bench_results() == tmp_path / "bench" / "results"


def test_a_pip_install_without_a_copy_says_what_to_do(tmp_path, monkeypatch):
    installed = tmp_path / "site-packages" / "minimind" / "lab" / "book.py"  # no bench/ above it
    monkeypatch.setattr(book, "__file__", str(installed))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="copy the repository's bench/results folder beside"):
        bench_results()
