"""One command for an nbgrader course made of the book's chapters.

    python tools/course.py init COURSE --chapters ch04a ch10      # or ch04a_attention ch10_generation
    python tools/course.py init COURSE --chapters ch04a --book path/to/book/

writes (and refuses to touch an existing COURSE):
- `COURSE/nbgrader_config.py`: the code stub the book's exercises need (`# YOUR CODE HERE`, no raise: a value
  stub must still run), a per-cell timeout of 300 s, graded mode (MINIMIND_GRADED=1) for the kernels nbgrader
  starts, and the kernel's `python` taken from the environment nbgrader runs in;
- `COURSE/source/<chapter>/<notebook>.ipynb`, one assignment per chapter (`ch04a`): the book's notebook as
  `tools/student_edition.py` prepares it, solutions kept (student_edition.source_notebook: nbgrader metadata
  from the tags, answer-only cells dropped, outputs and widget state cleared), so `nbgrader
  generate_assignment ch04a` releases exactly the student edition;
- `COURSE/source/<chapter>/bench/results/` for the chapters that plot the committed benchmark tables (they
  find them with `minimind.lab.bench_results()`, next to the notebook first), so the release runs from a
  pip-installed package;
- `COURSE/README.md`: the exercises and points per chapter, and the next commands.
Points per exercise come from the check cells' `points-N` tags (1 without one). The README of the repository
(section "Teaching with nbgrader") walks through release, collect, autograde and feedback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exercises import CHECK, EXERCISE_HEADING, exercise_numbers, kind, notebook_prefix, points  # noqa: E402
from refresh_notebooks import REPO_ROOT  # noqa: E402
from student_edition import CODE_STUB, copy_bench, reads_bench, source_notebook  # noqa: E402

BOOK = REPO_ROOT / "book"
COURSE_ID = "minimind-annotated"
# Per cell. nbgrader's default (30 s) is too short: on a shared 2-core CPU the slowest ch04a cell took 11 s
# at load average 5 and 36 s at load average 10 (measured 2026-12-02), and a timed-out cell scores 0.
# 300 s leaves room for a busier grader and still stops a student's endless loop within minutes.
TIMEOUT_S = 300

CONFIG = f'''# nbgrader configuration of a MiniMind Annotated course (written by tools/course.py).
# Every nbgrader command run in this folder reads it: generate_assignment, autograde, generate_feedback.
import os
import sys

c = get_config()  # noqa: F821 (traitlets provides it)
c.CourseDirectory.course_id = "{COURSE_ID}"
# The book's stubs (`area = ...  # a float`) must still run: no `raise NotImplementedError()`.
c.ClearSolutions.code_stub = {{"python": "{CODE_STUB}"}}
# Per cell: nbgrader's 30 s default fails slow cells on a loaded grader (a timed-out cell scores 0).
c.Execute.timeout = {TIMEOUT_S}

# The kernels nbgrader starts inherit this process's environment:
# - graded mode: a check's feedback keeps the diagnosis, not the direction of a numeric miss, and
#   Case(..., hidden=True) cases are not described (minimind/lab/checker.py). MINIMIND_GRADED=0 in the
#   shell before an nbgrader command turns it off.
os.environ.setdefault("MINIMIND_GRADED", "1")
# - quiet libraries (anything on stderr in a graded cell scores 0), threads that sleep while they wait
#   (a busy grader runs small forward passes several times faster).
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# - the kernelspec runs `python` from PATH: make it the interpreter nbgrader runs with (the one with the
#   minimind package installed), even when nbgrader was started without activating its environment.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
'''


class CourseError(Exception):
    """A one-line reason why no course was written."""


def chapters(book: Path = BOOK) -> dict[str, Path]:
    """{prefix: notebook} for the notebooks in `book` that have exercises (a `check` cell), by name."""
    found = {}
    for path in sorted(book.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(kind(cell) == CHECK for cell in nb.cells):
            found[notebook_prefix(path)] = path
    return found


def resolve(names: list[str], book: Path = BOOK) -> list[Path]:
    """The notebooks named by prefix (`ch04a`) or stem (`ch04a_attention`); CourseError for others."""
    available = chapters(book)
    by_stem = {path.stem: path for path in available.values()}
    unknown = [n for n in names if n not in available and n.removesuffix(".ipynb") not in by_stem]
    if unknown:
        raise CourseError(f"unknown chapter(s) {' '.join(unknown)}; chapters with exercises: "
                          f"{' '.join(available) or '(none in ' + str(book) + ')'}")
    picked = [available.get(n) or by_stem[n.removesuffix(".ipynb")] for n in names]
    return list(dict.fromkeys(picked))  # a chapter named twice: once


def exercise_table(nb) -> list[tuple[int, str, float]]:
    """(number, title, points) per exercise: the `### Exercise N: title` heading, its check cells' points."""
    titles, totals = {}, {}
    for cell, number in zip(nb.cells, exercise_numbers(nb)):
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = EXERCISE_HEADING.match(line.strip())
                if match:
                    title = line.strip()[match.end():].lstrip(" :.-—")
                    titles[int(match.group(2))] = title
        if kind(cell) == CHECK:
            totals[number] = totals.get(number, 0) + points(cell)
    return [(n, titles.get(n, ""), totals.get(n, 0)) for n in sorted(titles)]


def _count(value, what: str) -> str:
    return f"{value:g} {what}" + ("" if value == 1 else "s")


def _points(value) -> str:
    return _count(value, "point")


def summary(assignments: dict[str, tuple[Path, list]]) -> list[str]:
    """Markdown lines: a table per chapter (exercise, title, points) and the totals."""
    lines, grand, count = [], 0, 0
    for assignment, (notebook, table) in assignments.items():
        total = sum(p for _, _, p in table)
        grand, count = grand + total, count + len(table)
        lines += [f"## {assignment}: {notebook.name} ({_count(len(table), 'exercise')}, {_points(total)})", "",
                  "| exercise | title | points |", "|---|---|---|"]
        lines += [f"| {n} | {title} | {p:g} |" for n, title, p in table] + [""]
    lines.append(f"Total: {_count(len(assignments), 'chapter')}, {_count(count, 'exercise')}, "
                 f"{_points(grand)}.")
    return lines


def init(course: Path, names: list[str], book: Path = BOOK) -> dict[str, tuple[Path, list]]:
    """Write the course folder; returns {assignment: (source notebook, exercise table)}."""
    if course.exists():
        raise CourseError(f"{course} already exists; nothing was written (choose a new folder)")
    notebooks = resolve(names, book)
    if not notebooks:
        raise CourseError("no chapters named: --chapters ch04a ch10 ...")
    assignments = {}
    prepared = []
    for path in notebooks:  # everything read and converted before anything is written
        prefix = notebook_prefix(path)
        nb = source_notebook(nbformat.read(path, as_version=4), prefix)
        prepared.append((prefix, path.name, nb))
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    for prefix, name, nb in prepared:
        folder = course / "source" / prefix
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / name)
        if reads_bench(nb):
            copy_bench(folder)
        assignments[prefix] = (folder / name, exercise_table(nb))
    (course / "README.md").write_text(_readme(course, assignments))
    return assignments


def _readme(course: Path, assignments) -> str:
    first = next(iter(assignments))
    steps = [f"# {course.name}: a MiniMind Annotated course", "",
             "Written by `tools/course.py`. Run nbgrader from this folder, in an environment with the",
             "minimind package installed (`pip install -r requirements.txt` in the repository):", "",
             "```bash", f"nbgrader generate_assignment {first}   # release/{first}/: what students get",
             f"nbgrader autograde {first}             # submitted/<student>/{first}/ -> autograded/",
             f"nbgrader generate_feedback {first}     # feedback/<student>/{first}/*.html",
             "nbgrader export                       # grades.csv", "```", ""]
    return "\n".join(steps + summary(assignments)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("init", help="write a new nbgrader course folder")
    make.add_argument("course", type=Path)
    make.add_argument("--chapters", nargs="+", required=True, metavar="CHAPTER",
                      help="ch04a ch10 ... (or full notebook names)")
    make.add_argument("--book", type=Path, default=BOOK, help="the folder of the chapters (default: book/)")
    args = parser.parse_args(argv)
    try:
        assignments = init(args.course, args.chapters, args.book)
    except CourseError as error:
        print(f"course.py: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.course}/ (nbgrader_config.py, source/, README.md)")
    grand = 0
    for assignment, (notebook, table) in assignments.items():
        total = sum(p for _, _, p in table)
        grand += total
        print(f"{assignment}: {notebook.name}, {_count(len(table), 'exercise')}, {_points(total)}")
        for number, title, value in table:
            print(f"  exercise {number}  {title[:60]:60}  {_points(value)}")
    print(f"total: {_count(len(assignments), 'chapter')}, {_points(grand)}")
    print(f"next: cd {args.course} && nbgrader generate_assignment {next(iter(assignments))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
