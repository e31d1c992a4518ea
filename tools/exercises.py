"""Exercise cells -> nbgrader metadata, derived from cell tags in one place.

Chapter authors only tag cells; this module turns the tags into nbgrader cell
metadata, so `nbgrader generate_assignment` / `autograde` work on the book's notebooks as they are, and
tools/student_edition.py builds the student edition with nbgrader's own preprocessors.

    tag         cell       nbgrader metadata                                    student edition
    solution    code       solution cell, `{nb}-ex{N}-solution`                 BEGIN..END SOLUTION -> "# YOUR CODE HERE"
    check       code       autograded test cell, locked, `{nb}-ex{N}-check`;    kept, locked; fails until the
                           it must call `check(...)` (raises) or `assert`       exercise is solved
    answer      code       solution cell (generate_assignment clears it),       dropped
                           `{nb}-ex{N}-answer`
    answer or   markdown   manually graded answer worth 0 points (nbgrader      dropped
    solution               requires markdown solution cells to be graded):
                           generate_assignment replaces the text by "YOUR
                           ANSWER HERE"; left unchanged it scores 0 and
                           needs no manual grading

Every `check` cell also carries two planning tags (a missing one is a problem):

    difficulty-1   a guided step (fill in a number or a shape the chapter just showed)
    difficulty-2   build a piece from the chapter's description
    difficulty-3   an open experiment, or the hardest build of the chapter
    minutes-N      what a student needs for the exercise, honestly (5, 10, 15, 20, 30)
    points-N       optional: the check's nbgrader points; without it, points = the difficulty

`tools/course.py table` prints them per chapter (the README's teaching section).

`{nb}` is the notebook's name up to its first underscore (`ch03_rope.ipynb` -> `ch03`), `N` the number of the
nearest `### Exercise N` heading above the cell (0 before the first one); a second cell of the same kind in one
exercise gets `-2`, a third `-3`. The ids only change when exercises are renumbered.

    python tools/exercises.py book/ch03_rope.ipynb ...          # list each chapter's exercises and any problems
    python tools/exercises.py --write book/ch03_rope.ipynb ...  # also write the nbgrader metadata in place
                                                                # (outputs untouched; refresh_notebooks.py
                                                                # does it too, re-executing the chapter)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SOLUTION, CHECK, ANSWER = "solution", "check", "answer"
POINTS_TAG = re.compile(r"^points-(\d+(?:\.\d+)?)$")
DIFFICULTY_TAG = re.compile(r"^difficulty-(\d+)$")
MINUTES_TAG = re.compile(r"^minutes-(\d+)$")
DIFFICULTIES = (1, 2, 3)
EXERCISE_HEADING = re.compile(r"^(#{1,6})\s*Exercise\s+(\d+)\b", re.IGNORECASE)
HEADING = re.compile(r"^(#{1,6})\s")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CHECK_CALL = re.compile(r"(?<!\w)check\(")  # minimind.lab.check raises NotYet on a miss
HINT = re.compile(r'<details class="hint"><summary>Hint', re.IGNORECASE)  # tools/notebook_form.py
SCHEMA_VERSION = 3


class ExerciseError(ValueError):
    """A tag combination nbgrader cannot represent."""


def notebook_prefix(path) -> str:
    """`book/ch03_rope.ipynb` -> `ch03`: the grade-id prefix (letters, digits, '-' only)."""
    stem = Path(path).stem.split("_")[0]
    return re.sub(r"[^A-Za-z0-9-]", "-", stem) or "nb"


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _tag_values(cell, pattern) -> list[str]:
    return [m.group(1) for tag in _tags(cell) if (m := pattern.match(tag))]


def difficulty(cell) -> int | None:
    """1, 2 or 3 from a `difficulty-N` tag (None without one)."""
    values = _tag_values(cell, DIFFICULTY_TAG)
    return int(values[0]) if values else None


def minutes(cell) -> int | None:
    """The expected minutes from a `minutes-N` tag (None without one)."""
    values = _tag_values(cell, MINUTES_TAG)
    return int(values[0]) if values else None


def points(cell) -> float:
    """Points of a `check` cell: a `points-N` tag, else its difficulty, else 1."""
    values = _tag_values(cell, POINTS_TAG)
    if values:
        value = float(values[0])
        return int(value) if value.is_integer() else value
    return difficulty(cell) or 1


def kind(cell) -> str | None:
    """'solution', 'check', 'answer' or None, from the tags (ExerciseError for an impossible mix)."""
    tags = set(_tags(cell))
    kinds = tags & {SOLUTION, CHECK, ANSWER}
    if len(kinds) > 1:
        raise ExerciseError(f"a cell is tagged {sorted(kinds)}: use one of them:\n{cell.source[:200]}")
    if not kinds:
        return None
    found = kinds.pop()
    if cell.cell_type == "markdown":
        if found == CHECK:
            raise ExerciseError(f"a markdown cell is tagged `check` (checks are code):\n{cell.source[:200]}")
        return ANSWER  # a written solution: an answer to drop, whichever tag it has
    return found


def exercise_numbers(nb) -> list[int]:
    """For each cell, the number of the nearest `Exercise N` heading above it (0 before the first)."""
    current, numbers = 0, []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = EXERCISE_HEADING.match(line.strip())
                if match:
                    current = int(match.group(2))
        numbers.append(current)
    return numbers


def nbgrader_metadata(nb, prefix: str) -> list[dict | None]:
    """The nbgrader metadata each cell should carry (None: none), from the tags alone."""
    seen: dict[str, int] = {}
    result = []
    for cell, number in zip(nb.cells, exercise_numbers(nb)):
        what = kind(cell)
        if what is None:
            result.append(None)
            continue
        base = f"{prefix}-ex{number}-{what}"
        seen[base] = seen.get(base, 0) + 1
        grade_id = base if seen[base] == 1 else f"{base}-{seen[base]}"
        meta = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": SCHEMA_VERSION,
                "solution": False, "task": False}
        if what == CHECK:
            meta.update(grade=True, locked=True, points=points(cell))
        elif cell.cell_type == "markdown":
            meta.update(grade=True, solution=True, points=0)
        else:
            meta.update(solution=True)
        result.append(meta)
    return result


def apply_metadata(nb, prefix: str):
    """Set every cell's nbgrader metadata from its tags (and remove stale metadata). Returns nb."""
    for cell, meta in zip(nb.cells, nbgrader_metadata(nb, prefix)):
        cell.metadata.pop("nbgrader", None)
        if meta is not None:
            cell.metadata["nbgrader"] = meta
    return nb


# --- conventions a chapter's exercises must follow (tested for every chapter in _toc.yml) -------------------

def _solution_region(source: str) -> tuple[bool, list[str]]:
    """(has a BEGIN..END SOLUTION region, the lines outside it)."""
    inside, found, outside = False, False, []
    for line in source.splitlines():
        if BEGIN in line:
            inside = found = True
        elif END in line:
            inside = False
        elif not inside:
            outside.append(line)
    return found, outside


def _student_stub(source: str) -> str:
    """The cell as the student edition leaves it: the solution region replaced by `# YOUR CODE HERE`."""
    lines, inside = [], False
    for line in source.splitlines():
        if BEGIN in line:
            inside = True
            lines.append(line[: len(line) - len(line.lstrip())] + "# YOUR CODE HERE")
        elif END in line:
            inside = False
        elif not inside:
            lines.append(line)
    return "\n".join(lines)


def _stub_syntax_error(source: str) -> str | None:
    """Why the student's stub is not valid Python (None when it is; cells with magics are not checked)."""
    stub = _student_stub(source)
    if any(line.lstrip().startswith(("%", "!")) for line in stub.splitlines()):
        return None
    try:
        compile(stub, "<stub>", "exec")
    except SyntaxError as error:
        return f"{error.msg} (line {error.lineno}: {(error.text or '').strip()!r})"
    return None


def _is_code_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def problems(nb) -> list[str]:
    """What breaks the exercise conventions (or nbgrader), in words; [] when the notebook is fine."""
    found: list[str] = []
    try:
        kinds = [kind(cell) for cell in nb.cells]
    except ExerciseError as error:
        return [str(error)]
    numbers = exercise_numbers(nb)
    for i, (cell, what) in enumerate(zip(nb.cells, kinds)):
        where = f"cell {i} (exercise {numbers[i]})" if numbers[i] else f"cell {i}"
        has_region, outside = _solution_region(cell.source) if cell.cell_type == "code" else (False, [])
        if has_region and what != SOLUTION:
            found.append(f"{where}: has a {BEGIN} region but is not tagged `solution`")
        if what == SOLUTION:
            if not has_region:
                found.append(f"{where}: tagged `solution` without a {BEGIN} ... {END} region "
                             "(the whole cell would vanish from the student edition)")
            elif not any(_is_code_line(line) for line in outside):
                found.append(f"{where}: tagged `solution` but nothing survives outside the solution region: "
                             "put a stub before it (`name = ...  # a float`) or a def with a docstring")
            elif (error := _stub_syntax_error(cell.source)) is not None:
                found.append(f"{where}: the student edition's stub is not valid Python: {error}; a def whose "
                             "body is only the solution region needs a docstring, not a comment")
        if what == CHECK:
            if "assert" not in cell.source and not CHECK_CALL.search(cell.source):
                found.append(f"{where}: a `check` cell must fail when the answer is wrong "
                             "(`check(...)`, which raises, or an `assert`), or an unanswered exercise "
                             "still scores its points")
        for pattern, label in ((POINTS_TAG, "points-N"), (DIFFICULTY_TAG, "difficulty-N"),
                               (MINUTES_TAG, "minutes-N")):
            values = _tag_values(cell, pattern)
            if values and what != CHECK:
                found.append(f"{where}: a `{label}` tag only counts on a `check` cell")
            elif len(values) > 1:
                found.append(f"{where}: {len(values)} `{label}` tags: keep one")
        if what == CHECK:
            level = difficulty(cell)
            if level is None:
                found.append(f"{where}: a `check` cell needs a `difficulty-1`, `difficulty-2` or "
                             "`difficulty-3` tag (its points default to it)")
            elif level not in DIFFICULTIES:
                found.append(f"{where}: `difficulty-{level}`: use difficulty-1, -2 or -3")
            if minutes(cell) is None:
                found.append(f"{where}: a `check` cell needs a `minutes-N` tag (what a student needs: "
                             "5, 10, 15, 20, 30)")
        if what is not None and numbers[i] == 0:
            found.append(f"{where}: tagged `{what}` but no `### Exercise N` heading comes before it")
    # per exercise: at least one check and one hint dropdown
    exercises: dict[int, list[int]] = {}
    for i, number in enumerate(numbers):
        if number:
            exercises.setdefault(number, []).append(i)
    headings = [n for cell in nb.cells if cell.cell_type == "markdown"
                for line in cell.source.splitlines() if (m := EXERCISE_HEADING.match(line.strip()))
                for n in [int(m.group(2))]]
    for number in sorted({n for n in headings if headings.count(n) > 1}):
        found.append(f"exercise {number}: two headings with the same number")
    for number, cells in exercises.items():
        if not any(kinds[i] == CHECK for i in cells):
            found.append(f"exercise {number}: no cell tagged `check`")
        if not any(nb.cells[i].cell_type == "markdown" and HINT.search(nb.cells[i].source) for i in cells):
            found.append(f"exercise {number}: no hint (a markdown cell with a "
                         '`<details class="hint"><summary>Hint 1</summary>` block)')
    return found


def summary(nb, prefix: str) -> list[str]:
    """One line per exercise cell: grade id; for a check, points, difficulty and minutes."""
    lines = []
    for i, (cell, meta) in enumerate(zip(nb.cells, nbgrader_metadata(nb, prefix))):
        if meta:
            extra = f", {meta['points']} point(s)" if meta["grade"] else ""
            if kind(cell) == CHECK:
                extra += (f", difficulty {difficulty(cell) or '?'}, "
                          f"{minutes(cell) or '?'} min")
            lines.append(f"cell {i:3d}: {meta['grade_id']}{extra}")
    return lines


def main(argv: list[str] | None = None) -> int:
    import nbformat
    args = list(argv if argv is not None else sys.argv[1:])
    write = "--write" in args
    paths = [Path(p) for p in args if p != "--write"]
    bad = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        print(path)
        if write and not problems(nb):
            before = nbformat.writes(nb)
            apply_metadata(nb, notebook_prefix(path))
            if nbformat.writes(nb) != before:
                nbformat.write(nb, path)
                print("  nbgrader metadata written")
        for line in summary(nb, notebook_prefix(path)):
            print("  " + line)
        for problem in problems(nb):
            print("  PROBLEM: " + problem)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
