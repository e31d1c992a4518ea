"""Exercises for the classroom: nbgrader metadata from tags (tools/exercises.py), the student edition built
with nbgrader's preprocessors (tools/student_edition.py), and nbgrader's own autograde flow.

Fast tests use tests/fixtures/fx01_fixture.ipynb, a small chapter-like notebook (two exercises: a value stub and
a function stub, hints, an `answer` cell, a markdown solution, a `points-2` check), so they do not depend on the
chapters. Tests marked `slow` execute notebooks: the fixture's autograde, one real chapter's autograde, and the
student edition of every chapter in _toc.yml (`pytest -m "not slow"` leaves them out).
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import exercises  # noqa: E402
from refresh_notebooks import KERNEL_ENV, toc_notebooks  # noqa: E402
from student_edition import CODE_STUB, student_notebook, write_student_edition  # noqa: E402

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "fx01_fixture.ipynb"
CHAPTERS = [p for p in toc_notebooks(REPO_ROOT / "_toc.yml")]


def _tags(cell):
    return cell.metadata.get("tags", [])


def _fixture():
    return nbformat.read(FIXTURE, as_version=4)


def _kernel_env(monkeypatch):
    for name, value in KERNEL_ENV.items():
        monkeypatch.setenv(name, value)
    # the python3 kernelspec runs `python` from PATH: make it this environment's interpreter
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


# --- nbgrader metadata from tags ----------------------------------------------------------------------------

def test_metadata_follows_the_tags():
    nb = exercises.apply_metadata(_fixture(), "fx01")
    meta = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["nbgrader"]
            for cell in nb.cells if "nbgrader" in cell.metadata}
    assert list(meta) == ["fx01-ex1-solution", "fx01-ex1-check", "fx01-ex1-answer",
                          "fx01-ex2-solution", "fx01-ex2-check", "fx01-ex2-answer"]
    assert meta["fx01-ex1-solution"] | {} == {"grade": False, "grade_id": "fx01-ex1-solution", "locked": False,
                                              "schema_version": 3, "solution": True, "task": False}
    check1, check2 = meta["fx01-ex1-check"], meta["fx01-ex2-check"]
    assert (check1["grade"], check1["locked"], check1["solution"], check1["points"]) == (True, True, False, 1)
    assert check2["points"] == 2  # the `points-2` tag
    assert meta["fx01-ex1-answer"]["solution"] and not meta["fx01-ex1-answer"]["grade"]  # code: cleared
    assert meta["fx01-ex2-answer"]["grade"] and meta["fx01-ex2-answer"]["points"] == 0  # markdown: 0-point answer
    # nbgrader's own validator accepts it (unique ids, markdown answers graded, points present)
    from nbgrader.nbgraderformat import MetadataValidator
    MetadataValidator().validate_nb(nb)


def test_metadata_is_stable_and_replaces_stale_metadata():
    nb = _fixture()
    nb.cells[1].metadata["nbgrader"] = {"grade": True, "grade_id": "stale", "points": 5}  # untagged cell
    once = exercises.apply_metadata(nb, "fx01")
    twice = exercises.apply_metadata(copy.deepcopy(once), "fx01")
    assert once == twice and "nbgrader" not in once.cells[1].metadata


def test_a_second_cell_of_one_kind_gets_a_numbered_id():
    nb = new_notebook(cells=[new_markdown_cell("### Exercise 4: two checks"),
                             new_code_cell("assert True", metadata={"tags": ["check"]}),
                             new_code_cell("assert True", metadata={"tags": ["check"]})])
    ids = [m["grade_id"] for m in exercises.nbgrader_metadata(nb, "ch07") if m]
    assert ids == ["ch07-ex4-check", "ch07-ex4-check-2"]
    assert exercises.notebook_prefix("book/ch07_attention.ipynb") == "ch07"


def test_the_fixture_follows_the_conventions():
    assert exercises.problems(_fixture()) == []


@pytest.mark.parametrize("source, tags, expected", [
    ("x = 1", ["solution"], "without a ### BEGIN SOLUTION"),
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", ["solution"], "nothing survives"),
    ("x = ...  # an int\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION", [], "is not tagged `solution`"),
    ("print(my_check(f, g))", ["check"], "must fail"),  # neither check(...) (raises) nor assert
    ("x = 1", ["solution", "check"], "use one of them"),
    ("assert check(f, g, [()])", ["points-2"], "only counts on a `check` cell"),
    ("x = 1", ["difficulty-2"], "`difficulty-N` tag only counts on a `check` cell"),
    ("assert check(f, g, [()])", ["check", "minutes-5"], "needs a `difficulty-1`"),
    ("assert check(f, g, [()])", ["check", "difficulty-2"], "needs a `minutes-N` tag"),
    ("assert check(f, g, [()])", ["check", "difficulty-4", "minutes-5"], "use difficulty-1, -2 or -3"),
    ("assert check(f, g, [()])", ["check", "difficulty-1", "difficulty-2", "minutes-5"], "keep one"),
    ("def f(x):\n    # return twice x\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
     ["solution"], "stub is not valid Python"),
])
def test_problems_name_each_broken_convention(source, tags, expected):
    nb = new_notebook(cells=[new_markdown_cell("### Exercise 1: t"),
                             new_markdown_cell('<details class="hint"><summary>Hint 1</summary>\n\nh\n\n</details>'),
                             new_code_cell(source, metadata={"tags": tags}),
                             new_code_cell("assert check(f, g, [()])", metadata={"tags": ["check"]})])
    found = exercises.problems(nb)
    assert any(expected in p for p in found), found


def test_points_default_to_the_difficulty():
    def cell(*tags):
        return new_code_cell("check(f, g, [()])", metadata={"tags": ["check", *tags]})
    assert exercises.points(cell("difficulty-3", "minutes-20")) == 3
    assert exercises.points(cell("difficulty-3", "minutes-20", "points-1")) == 1  # the override
    assert exercises.points(cell()) == 1  # untagged (a problem): 1 point, as before the tags
    nb = new_notebook(cells=[new_markdown_cell("### Exercise 1: t"), cell("difficulty-2", "minutes-10")])
    assert exercises.nbgrader_metadata(nb, "ch01")[1]["points"] == 2


def test_problems_want_a_check_and_a_hint_per_exercise():
    nb = new_notebook(cells=[new_markdown_cell("### Exercise 1: no check, no hint"),
                             new_code_cell("x = ...  # int\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION",
                                           metadata={"tags": ["solution"]})])
    found = exercises.problems(nb)
    assert any("no cell tagged `check`" in p for p in found) and any("no hint" in p for p in found)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_exercises_follow_the_conventions(chapter):
    """Every chapter in the toc: exercise tags well formed, and the nbgrader metadata written by
    tools/refresh_notebooks.py is current (else: refresh the chapter)."""
    nb = nbformat.read(chapter, as_version=4)
    assert exercises.problems(nb) == []
    expected = exercises.apply_metadata(copy.deepcopy(nb), exercises.notebook_prefix(chapter))
    stale = [i for i, (a, b) in enumerate(zip(nb.cells, expected.cells))
             if a.metadata.get("nbgrader") != b.metadata.get("nbgrader")]
    assert not stale, f"nbgrader metadata out of date in cells {stale}: run tools/refresh_notebooks.py {chapter}"


# --- the student edition ------------------------------------------------------------------------------------

def test_student_edition_of_the_fixture(tmp_path):
    [written] = write_student_edition([FIXTURE], FIXTURE.parents[2], tmp_path / "student")
    assert written == tmp_path / "student" / "tests" / "fixtures" / FIXTURE.name
    nb = nbformat.read(written, as_version=4)
    nbformat.validate(nb)
    text = "\n".join(cell.source for cell in nb.cells)
    # solutions gone, stubs that name what to define kept, nbgrader's stub in place of each solution region
    assert "3.0 ** 2" not in text and "return 2 * x" not in text and "SOLUTION" not in text
    assert f"area = ...  # a float: the area of the square\n{CODE_STUB}" in text
    assert f'def double(x):\n    """Return 2 * x."""\n    {CODE_STUB}' in text
    assert "NotImplementedError" not in text  # value stubs must still run: only the checks fail
    # answer cells dropped: the code cell that prints the answer and the markdown solution
    assert "print(area)" not in text and "Multiply by two" not in text
    assert not any(set(_tags(c)) & {"answer"} for c in nb.cells)
    # hints and checks kept; checks locked
    assert text.count("<summary>Hint") == 3
    checks = [c for c in nb.cells if "check" in _tags(c)]
    assert len(checks) == 2 and all(c.metadata["editable"] is False and c.metadata["deletable"] is False
                                    for c in checks)
    assert all(c.metadata["nbgrader"]["grade"] for c in checks)
    assert all("raises-exception" in _tags(c) for c in checks)  # Run All goes on past an unsolved one
    solutions = [c for c in nb.cells if "solution" in _tags(c)]
    assert solutions and not any(c.metadata.get("jupyter", {}).get("source_hidden") or
                                 "hide-input" in _tags(c) for c in solutions)  # where students write
    # outputs, counts and widget state cleared
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert "widgets" not in nb.metadata
    # the source is untouched
    assert "3.0 ** 2" in FIXTURE.read_text()


def test_unclosed_solution_block_is_an_error():
    nb = new_notebook(cells=[new_markdown_cell("### Exercise 1: t"),
                             new_code_cell("x = ...\n### BEGIN SOLUTION\nx = 1", metadata={"tags": ["solution"]})])
    with pytest.raises(RuntimeError, match="no end solution"):
        student_notebook(nb, "ch01")


def _execute(nb, cwd: Path, allow_errors=True):
    from nbclient import NotebookClient
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _errored(nb) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
            and any(o.output_type == "error" for o in c.outputs)]


def _describe_errors(nb, indices) -> str:
    lines = []
    for i in indices:
        error = next(o for o in nb.cells[i].outputs if o.output_type == "error")
        lines.append(f"cell {i} {_tags(nb.cells[i])}: {error.ename}: {error.evalue[:200]}\n"
                     f"    {nb.cells[i].source[:160]!r}")
    return "\n  ".join(lines)


def _student_run(notebook: Path, monkeypatch, folder: Path):
    """Execute a notebook's student edition in `folder`, outside the repository, as a student's copy runs (a
    path relative to book/, like ../bench, fails there); return it and its errored cells."""
    _kernel_env(monkeypatch)
    nb = student_notebook(nbformat.read(notebook, as_version=4), exercises.notebook_prefix(notebook))
    start = time.perf_counter()
    _execute(nb, folder)
    print(f"\n{notebook.name}: student edition executed in {time.perf_counter() - start:.1f} s")
    return nb, _errored(nb)


def _assert_only_checks_fail(nb, errored):
    checks = [i for i, c in enumerate(nb.cells) if "check" in _tags(c)]
    unexpected, passing = sorted(set(errored) - set(checks)), sorted(set(checks) - set(errored))
    assert not unexpected, f"cells other than `check` cells fail in the student edition:\n  " \
                           f"{_describe_errors(nb, unexpected)}"
    assert not passing, ("`check` cells pass with only the stubs (a student would score these points without "
                         f"answering): cells {passing}: {[nb.cells[i].source[:100] for i in passing]}")
    from nbgrader.utils import determine_grade
    assert sum(determine_grade(nb.cells[i])[0] for i in checks) == 0  # exact: integer points


@pytest.mark.slow
def test_student_edition_of_the_fixture_runs_with_only_the_checks_failing(monkeypatch, tmp_path):
    nb, errored = _student_run(FIXTURE, monkeypatch, tmp_path)
    assert len(errored) == 2
    _assert_only_checks_fail(nb, errored)
    # the checker's feedback (the message of the error it raises) names the unanswered exercise, never the answer
    feedback = "".join(o.get("text", "") + o.get("evalue", "") + "".join(o.get("traceback", []))
                       for i in errored for o in nb.cells[i].outputs)
    assert "not written yet" in feedback and "9.0" not in feedback


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_student_edition_runs_with_only_the_checks_failing(chapter, monkeypatch, tmp_path):
    nb, errored = _student_run(chapter, monkeypatch, tmp_path)
    _assert_only_checks_fail(nb, errored)


# --- nbgrader's autograde flow: reference solutions score full marks, stubs zero -----------------------------

def _autograde(notebook: Path, course: Path, monkeypatch) -> dict:
    """generate_assignment on `notebook`, then autograde two submissions: the notebook itself (the reference
    solutions) and the released version (the stubs). Returns {student: (score, max_score)} from the gradebook."""
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    _kernel_env(monkeypatch)
    assignment = exercises.notebook_prefix(notebook)
    source = course / "source" / assignment
    source.mkdir(parents=True)
    shutil.copy(notebook, source / notebook.name)
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.course_id = "minimind-annotated"
    config.Execute.timeout = 600
    config.ClearSolutions.code_stub = {"python": CODE_STUB}
    api = NbGraderAPI(config=config)
    result = api.generate_assignment(assignment)
    assert result["success"], result["log"][-3000:]
    submissions = {"reference": source / notebook.name,
                   "stubs": course / "release" / assignment / notebook.name}
    for student, path in submissions.items():
        target = course / "submitted" / student / assignment
        target.mkdir(parents=True)
        shutil.copy(path, target / notebook.name)
        result = api.autograde(assignment, student, force=True, create=True)
        assert result["success"], result["log"][-3000:]
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="minimind-annotated") as gradebook:
        for student in submissions:
            submission = gradebook.find_submission(assignment, student)
            scores[student] = (submission.score, submission.max_score)
    return scores


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's gradebook, harmless
def test_autograde_fixture_full_marks_for_solutions_zero_for_stubs(tmp_path, monkeypatch):
    scores = _autograde(FIXTURE, tmp_path / "course", monkeypatch)
    assert scores == {"reference": (3.0, 3.0), "stubs": (0.0, 3.0)}  # exact: sums of integer points


def _chapter_for_autograde() -> Path | None:
    """AUTOGRADE_CHAPTER (a path), else the first chapter of the toc with `check` cells."""
    if os.environ.get("AUTOGRADE_CHAPTER"):
        return Path(os.environ["AUTOGRADE_CHAPTER"]).resolve()
    for chapter in CHAPTERS:
        if any("check" in _tags(c) for c in nbformat.read(chapter, as_version=4).cells):
            return chapter
    return None


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_autograde_a_real_chapter(tmp_path, monkeypatch):
    chapter = _chapter_for_autograde()
    if chapter is None:
        pytest.skip("no chapter in _toc.yml has `check` cells yet")
    start = time.perf_counter()
    scores = _autograde(chapter, tmp_path / "course", monkeypatch)
    print(f"\n{chapter.name}: autograde of reference and stubs in {time.perf_counter() - start:.1f} s: {scores}")
    total = scores["reference"][1]
    assert total > 0
    assert scores == {"reference": (total, total), "stubs": (0.0, total)}  # exact: sums of integer points
