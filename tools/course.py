"""One command for an nbgrader course made of the book's chapters.

    python tools/course.py init COURSE --chapters ch04a ch10      # or ch04a_attention ch10_generation
    python tools/course.py init COURSE --chapters ch04a --book path/to/book/
    python tools/course.py init COURSE --chapters ch04a ch10 --lang zh   # the notebooks in Chinese (中文版)
    python tools/course.py table                                  # the book's exercises per chapter (Markdown)

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
- `COURSE/guides/<chapter>.md`: the teacher's guide of each chapter that has one (`book/teaching/<chNN>.md`:
  what each exercise trains, the common wrong answers and what the checker says to each);
- with `--lang zh`, the same notebooks with their markdown cells in Chinese (tools/zh_notebooks.py; same
  cells, grade ids and points); the README and the teacher's guides stay in English;
- `COURSE/README.md`: per chapter a table of its exercises (difficulty, minutes, points) with totals, the
  guides, and the next commands.
Difficulty and minutes come from the check cells' `difficulty-N` and `minutes-N` tags, points from their
`points-N` tags or else the difficulty (tools/exercises.py). `table` prints one row per chapter of the whole
book: the table in the README of the repository (section "Teaching with nbgrader", which walks through
release, collect, autograde and feedback; a test keeps the two equal).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exercises import (CHECK, EXERCISE_HEADING, difficulty, exercise_numbers, kind, minutes,  # noqa: E402
                       notebook_prefix, points)
from refresh_notebooks import REPO_ROOT  # noqa: E402
from student_edition import CODE_STUB, copy_bench, reads_bench, source_notebook, translations  # noqa: E402

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


class Exercise(NamedTuple):
    """One exercise of a chapter, as a teacher plans with it (None: its check cells lack the tag)."""
    number: int
    title: str
    points: float
    difficulty: int | None
    minutes: int | None


def _title(rest: str) -> str:
    """The title after `### Exercise N`: ": spot the bug" -> "spot the bug";
    " (go further): which head?" -> "which head? (go further)"."""
    rest = rest.strip()
    aside = re.match(r"\(([^)]*)\)\s*", rest)
    if aside:
        rest = rest[aside.end():]
    rest = rest.lstrip(" :.-—")
    return f"{rest} ({aside.group(1)})" if aside and rest else rest


def exercise_table(nb) -> list[Exercise]:
    """One Exercise per `### Exercise N: title` heading: its check cells' points (summed), difficulty
    (the highest) and minutes (summed; None when a check cell has no `minutes-N` tag)."""
    titles, found = {}, {}
    for cell, number in zip(nb.cells, exercise_numbers(nb)):
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = EXERCISE_HEADING.match(line.strip())
                if match:
                    titles[int(match.group(2))] = _title(line.strip()[match.end():])
        if kind(cell) == CHECK:
            found.setdefault(number, []).append(cell)
    table = []
    for n in sorted(titles):
        cells = found.get(n, [])
        levels, times = [difficulty(c) for c in cells], [minutes(c) for c in cells]
        table.append(Exercise(
            n, titles[n], sum(points(c) for c in cells),
            max(levels) if cells and None not in levels else None,
            sum(times) if cells and None not in times else None))
    return table


def _count(value, what: str) -> str:
    return f"{value:g} {what}" + ("" if value == 1 else "s")


def _points(value) -> str:
    return _count(value, "point")


def _or_unknown(value) -> str:
    return "?" if value is None else f"{value:g}"


def _minutes(table) -> str:
    """The minutes of a list of exercises: their sum, or '≥ sum (k untagged)'."""
    known = [e.minutes for e in table if e.minutes is not None]
    missing = len(table) - len(known)
    return f"{sum(known)}" if not missing else f"≥ {sum(known)} ({missing} untagged)"


def summary(assignments: dict[str, tuple[Path, list]]) -> list[str]:
    """Markdown lines: a table per chapter (exercise, title, difficulty, minutes, points) and the totals."""
    lines, grand, count, everything = [], 0, 0, []
    for assignment, (notebook, table) in assignments.items():
        total = sum(e.points for e in table)
        grand, count, everything = grand + total, count + len(table), everything + list(table)
        lines += [f"## {assignment}: {notebook.name} ({_count(len(table), 'exercise')}, {_points(total)}, "
                  f"{_minutes(table)} minutes)", "",
                  "| exercise | title | difficulty | minutes | points |", "|---|---|---|---|---|"]
        lines += [f"| {e.number} | {e.title} | {_or_unknown(e.difficulty)} | {_or_unknown(e.minutes)} "
                  f"| {e.points:g} |" for e in table]
        lines += [f"| | total | | {_minutes(table)} | {total:g} |", ""]
    lines.append(f"Total: {_count(len(assignments), 'chapter')}, {_count(count, 'exercise')}, "
                 f"{_points(grand)}, {_minutes(everything)} minutes.")
    lines.append("")
    lines.append("Difficulty: 1 a guided step, 2 build a piece from the chapter's description, 3 an open "
                 "experiment or the chapter's hardest build. Points are the difficulty unless a check "
                 "cell's `points-N` tag says otherwise; minutes are what a student needs, honestly.")
    return lines


def book_table(book: Path = BOOK, guides: Path | None = None) -> str:
    """The whole book's exercises, one Markdown row per chapter (the repository README's table)."""
    guides = guides if guides is not None else book / "teaching"
    lines = ["| chapter | exercises | by difficulty (1 · 2 · 3) | minutes | points | guide |",
             "|---|---|---|---|---|---|"]
    everything, levels_all = [], [0, 0, 0]
    in_order = sorted(chapters(book).items(), key=lambda item: (item[0].startswith("appendix"), item[0]))
    for prefix, path in in_order:  # the chapters, then the appendices
        table = exercise_table(nbformat.read(path, as_version=4))
        everything += table
        levels = [sum(e.difficulty == d for e in table) for d in (1, 2, 3)]
        levels_all = [a + b for a, b in zip(levels_all, levels)]
        untagged = sum(e.difficulty is None for e in table)
        spread = " · ".join(map(str, levels)) + (f" ({untagged} untagged)" if untagged else "")
        guide = guides / f"{prefix}.md"
        link = f"[{prefix}.md](book/teaching/{prefix}.md)" if guide.is_file() else "—"
        lines.append(f"| {path.stem} | {len(table)} | {spread} | {_minutes(table)} "
                     f"| {sum(e.points for e in table):g} | {link} |")
    lines.append(f"| **total** | {len(everything)} | {' · '.join(map(str, levels_all))} "
                 f"| {_minutes(everything)} | {sum(e.points for e in everything):g} | |")
    return "\n".join(lines) + "\n"


def init(course: Path, names: list[str], book: Path = BOOK, lang: str = "en") -> dict[str, tuple[Path, list]]:
    """Write the course folder (notebooks in `lang`); returns {assignment: (source notebook, exercise table)}."""
    if course.exists():
        raise CourseError(f"{course} already exists; nothing was written (choose a new folder)")
    notebooks = resolve(names, book)
    if not notebooks:
        raise CourseError("no chapters named: --chapters ch04a ch10 ...")
    assignments = {}
    prepared = []
    for path in notebooks:  # everything read and converted before anything is written
        prefix = notebook_prefix(path)
        source = nbformat.read(path, as_version=4)
        english = source_notebook(source, prefix)
        nb = english if lang == "en" else source_notebook(source, prefix, translations(path, lang))
        prepared.append((prefix, path.name, nb, exercise_table(english)))  # titles: the English headings
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    for prefix, name, nb, table in prepared:
        folder = course / "source" / prefix
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / name)
        if reads_bench(nb):
            copy_bench(folder)
        assignments[prefix] = (folder / name, table)
        guide = book / "teaching" / f"{prefix}.md"
        if guide.is_file():
            (course / "guides").mkdir(exist_ok=True)
            shutil.copy(guide, course / "guides" / guide.name)
    (course / "README.md").write_text(_readme(course, assignments))
    return assignments


def _guides(course: Path, assignments) -> list[str]:
    found = [a for a in assignments if (course / "guides" / f"{a}.md").is_file()]
    if not found:
        return []
    lines = ["## Teacher's guides", "",
             "What each exercise trains, the common wrong answers and what the checker says to each:", ""]
    lines += [f"- [{a}](guides/{a}.md)" for a in found]
    missing = [a for a in assignments if a not in found]
    if missing:
        lines.append(f"- (no guide yet for {', '.join(missing)})")
    return lines + [""]


def _readme(course: Path, assignments) -> str:
    first = next(iter(assignments))
    steps = [f"# {course.name}: a MiniMind Annotated course", "",
             "Written by `tools/course.py`. Run nbgrader from this folder, in an environment with the",
             "minimind package installed (`pip install -r requirements.txt` in the repository):", "",
             "```bash", f"nbgrader generate_assignment {first}   # release/{first}/: what students get",
             f"nbgrader autograde {first}             # submitted/<student>/{first}/ -> autograded/",
             f"nbgrader generate_feedback {first}     # feedback/<student>/{first}/*.html",
             "nbgrader export                       # grades.csv", "```", ""]
    return "\n".join(steps + _guides(course, assignments) + summary(assignments)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("init", help="write a new nbgrader course folder")
    make.add_argument("course", type=Path)
    make.add_argument("--chapters", nargs="+", required=True, metavar="CHAPTER",
                      help="ch04a ch10 ... (or full notebook names)")
    make.add_argument("--book", type=Path, default=BOOK, help="the folder of the chapters (default: book/)")
    make.add_argument("--lang", choices=("en", "zh"), default="en", help="zh: the notebooks' Markdown in Chinese")
    show = commands.add_parser("table", help="print the book's exercises per chapter as Markdown")
    show.add_argument("--book", type=Path, default=BOOK, help="the folder of the chapters (default: book/)")
    args = parser.parse_args(argv)
    if args.command == "table":
        print(book_table(args.book), end="")
        return 0
    try:
        assignments = init(args.course, args.chapters, args.book, args.lang)
    except CourseError as error:
        print(f"course.py: {error}", file=sys.stderr)
        return 2
    written = "nbgrader_config.py, source/, " + ("guides/, " if (args.course / "guides").is_dir() else "")
    print(f"wrote {args.course}/ ({written}README.md)")
    grand = 0
    for assignment, (notebook, table) in assignments.items():
        total = sum(e.points for e in table)
        grand += total
        print(f"{assignment}: {notebook.name}, {_count(len(table), 'exercise')}, {_points(total)}, "
              f"{_minutes(table)} minutes")
        for e in table:
            print(f"  exercise {e.number}  {e.title[:52]:52}  difficulty {_or_unknown(e.difficulty)}"
                  f"  {_or_unknown(e.minutes):>2} min  {_points(e.points)}")
    print(f"total: {_count(len(assignments), 'chapter')}, {_points(grand)}")
    print(f"next: cd {args.course} && nbgrader generate_assignment {next(iter(assignments))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
