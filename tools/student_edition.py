"""Write the student edition of the book with nbgrader's own preprocessors.

    python tools/student_edition.py OUT_DIR            # every notebook in _toc.yml
    python tools/student_edition.py OUT_DIR --toc path/to/_toc.yml
    python tools/student_edition.py OUT_DIR book/ch03_rope.ipynb ...
    python tools/student_edition.py OUT_DIR --lang zh  # the Chinese student edition (中文版)

For each notebook (paths kept relative to the toc's folder, e.g. OUT_DIR/book/ch03_rope.ipynb):
- nbgrader metadata is derived from the cell tags (tools/exercises.py);
- cells tagged `answer` (and markdown cells tagged `solution`: written-out solutions) are dropped;
- nbgrader's preprocessors then run as `nbgrader generate_assignment` runs them: LockCells, ClearSolutions
  (each `### BEGIN SOLUTION` ... `### END SOLUTION` region becomes `# YOUR CODE HERE`, so the stub line
  before it, `cache_bytes = ...  # an int`, or the def and docstring around it, survive and the cell still
  runs), ClearOutput, ClearHiddenTests, ClearMarkScheme, CheckCellMetadata (unique grade ids);
- saved widget state is removed;
- the benchmark tables a chapter reads (`bench/results`) are found through the package
  (`minimind.lab.bench_results()`) and copied next to the notebook, so it runs from a pip install.
Students run it top to bottom: only the `check` cells fail, until each exercise is solved.

With `--lang zh` the markdown cells are the Chinese edition's (tools/zh_notebooks.py, from the page's
catalogue), translated after the nbgrader metadata is derived: the grade ids come from the English
`### Exercise N` headings, so both languages' releases have the same cells, ids and points.

`source_notebook` is the same notebook before nbgrader's preprocessors, solutions kept: what
tools/course.py writes to an nbgrader course's `source/`, so that `nbgrader generate_assignment` gives
this student edition.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exercises import ANSWER, CHECK, SOLUTION, apply_metadata, kind, notebook_prefix  # noqa: E402
from refresh_notebooks import REPO_ROOT, toc_notebooks  # noqa: E402

CODE_STUB = "# YOUR CODE HERE"
BENCH = REPO_ROOT / "bench" / "results"
# How the chapters found bench/results before minimind.lab.bench_results(): a path that exists only in a
# repository checkout (editable install). Rewritten to the package lookup; a no-op once no chapter has it.
REPO_BENCH = 'Path(minimind.__file__).resolve().parents[1] / "bench" / "results"'
PACKAGE_BENCH = "minimind.lab.bench_results()"
LANGUAGES = ("en", "zh")


def nbgrader_preprocessors():
    """nbgrader's own preprocessors, configured for the book (the order of `nbgrader generate_assignment`)."""
    from nbgrader.preprocessors import (CheckCellMetadata, ClearHiddenTests, ClearMarkScheme, ClearOutput,
                                        ClearSolutions, LockCells)
    return [LockCells(), ClearSolutions(code_stub={"python": CODE_STUB}, enforce_metadata=True), ClearOutput(),
            ClearHiddenTests(), ClearMarkScheme(), CheckCellMetadata()]


def translations(path: Path, lang: str) -> dict[str, str] | None:
    """The Chinese messages of the notebook at `path` for `lang` "zh", None for "en" (the source's own)."""
    if lang not in LANGUAGES:
        raise ValueError(f"language {lang!r}: one of {', '.join(LANGUAGES)}")
    if lang == "en":
        return None
    from zh_notebooks import catalogue_path, messages  # Sphinx and MyST: only for the Chinese edition
    return messages(catalogue_path(path))


def source_notebook(nb, prefix: str, translated: dict[str, str] | None = None):
    """A copy of `nb` as an nbgrader course's source (solutions kept): nbgrader metadata from the tags,
    answer-only cells dropped (markdown `answer`/`solution` cells would become 0-point "YOUR ANSWER
    HERE" boxes), outputs and widget state cleared, bench/results found through the package.
    `translated` ({msgid: msgstr}, see `translations`): the markdown cells in that language."""
    nb = nbformat.from_dict(nb)  # deep copy
    apply_metadata(nb, prefix)
    nb.cells = [cell for cell in nb.cells if kind(cell) != ANSWER]
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for key in ("execution", "ExecuteTime"):
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.source = cell.source.replace(REPO_BENCH, PACKAGE_BENCH)
            cell.outputs, cell.execution_count = [], None
        if kind(cell) == SOLUTION:  # where the student writes: unfolded (notebook_form folds it)
            cell.metadata.pop("jupyter", None)
            cell.metadata.pop("mystnb", None)
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != "hide-input"]
        if kind(cell) == CHECK:  # JupyterLab's Run All goes on past a check not yet passed
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "raises-exception"]
    if translated is not None:  # after apply_metadata: it numbers exercises by the English headings
        from zh_notebooks import translate_cells
        nb, _ = translate_cells(nb, translated)
    return nb


def student_notebook(nb, prefix: str, translated: dict[str, str] | None = None):
    """Return a copy of `nb` as students get it (`prefix`: grade-id prefix, e.g. 'ch03'; `translated`: the
    page's Chinese messages for the Chinese edition)."""
    nb = source_notebook(nb, prefix, translated)
    resources: dict = {}
    for preprocessor in nbgrader_preprocessors():
        nb, resources = preprocessor.preprocess(nb, resources)
    return nb


def reads_bench(nb) -> bool:
    """Whether the notebook reads the benchmark tables (then bench/results must sit beside it)."""
    return any("bench_results(" in cell.source or REPO_BENCH in cell.source
               for cell in nb.cells if cell.cell_type == "code")


def copy_bench(folder: Path) -> Path:
    """Copy the repository's bench/results to folder/bench/results (where bench_results() looks)."""
    target = folder / "bench" / "results"
    shutil.copytree(BENCH, target, dirs_exist_ok=True)
    return target


def write_student_edition(notebooks: list[Path], base: Path, out_dir: Path, lang: str = "en") -> list[Path]:
    """Write each notebook's student version (in `lang`) to out_dir, keeping its path relative to base."""
    written = []
    for path in notebooks:
        path = path.resolve()
        target = out_dir / (path.relative_to(base.resolve()) if path.is_relative_to(base.resolve()) else path.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        nb = student_notebook(nbformat.read(path, as_version=4), notebook_prefix(path), translations(path, lang))
        nbformat.write(nb, target)
        if reads_bench(nb):
            copy_bench(target.parent)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in the toc")
    parser.add_argument("--toc", type=Path, default=REPO_ROOT / "_toc.yml")
    parser.add_argument("--lang", choices=LANGUAGES, default="en", help="zh: the Chinese edition's Markdown")
    args = parser.parse_intermixed_args(argv)  # OUT_DIR --lang zh NOTEBOOK ...
    notebooks = [p.resolve() for p in args.notebooks] or toc_notebooks(args.toc)
    if not notebooks:
        print(f"no notebooks found from {args.toc}", file=sys.stderr)
        return 1
    base = args.toc.resolve().parent
    for target in write_student_edition(notebooks, base, args.out_dir, args.lang):
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
