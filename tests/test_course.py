"""tools/course.py: an nbgrader course from the book's chapters, in one command.

Fast tests build courses from tests/fixtures/fx01_fixture.ipynb (two exercises, 1 + 2 points, an `answer` code
cell, a markdown solution, saved widget state), so they do not depend on the chapters. The `slow` test runs
nbgrader itself (generate_assignment, autograde) on one real chapter, with the course's own nbgrader_config.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import course  # noqa: E402
import exercises  # noqa: E402
from student_edition import PACKAGE_BENCH, REPO_BENCH, student_notebook, write_student_edition  # noqa: E402

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "fx01_fixture.ipynb"
CONFIG_ENV = ("MINIMIND_GRADED", "TQDM_DISABLE", "TRANSFORMERS_VERBOSITY", "OMP_WAIT_POLICY", "PATH")


def _book(tmp_path: Path, bench: bool = False) -> Path:
    """A book folder with the fixture (`fx01`) and, with bench=True, a copy that reads bench/results (`fx03`)."""
    book = tmp_path / "book"
    book.mkdir()
    shutil.copy(FIXTURE, book / FIXTURE.name)
    if bench:
        nb = nbformat.read(FIXTURE, as_version=4)
        nb.cells.insert(3, new_code_cell(f'grid = {REPO_BENCH} / "sampling_grid.csv"'))
        nbformat.write(nb, book / "fx03_bench.ipynb")
    return book


def _load_config(path: Path, monkeypatch):
    """The course's nbgrader_config.py as nbgrader loads it (its os.environ changes undone after the test)."""
    from traitlets.config.loader import PyFileConfigLoader
    for name in CONFIG_ENV:
        monkeypatch.setenv(name, os.environ.get(name, "")) if name == "PATH" else monkeypatch.delenv(
            name, raising=False)
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def test_init_writes_the_layout(tmp_path, monkeypatch):
    book = _book(tmp_path)
    assignments = course.init(tmp_path / "course", ["fx01"], book)
    root = tmp_path / "course"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "README.md", "nbgrader_config.py", "source", "source/fx01", "source/fx01/fx01_fixture.ipynb"]
    assert assignments["fx01"][1] == [(1, "a number", 1), (2, "a function", 2)]  # the `points-2` tag
    config = _load_config(root / "nbgrader_config.py", monkeypatch)
    assert config.ClearSolutions.code_stub == {"python": "# YOUR CODE HERE"}  # no raise: stubs still run
    assert config.Execute.timeout == course.TIMEOUT_S == 300
    assert config.CourseDirectory.course_id == course.COURSE_ID
    # the kernels nbgrader starts inherit its environment: graded mode, this interpreter first on PATH
    assert os.environ["MINIMIND_GRADED"] == "1"
    assert os.environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    readme = (root / "README.md").read_text()
    assert "| 2 | a function | 2 |" in readme and "1 chapter, 2 exercises, 3 points" in readme


def test_init_prints_the_points(tmp_path, capsys):
    assert course.main(["init", str(tmp_path / "c"), "--chapters", "fx01_fixture", "--book",
                        str(_book(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "fx01: fx01_fixture.ipynb, 2 exercises, 3 points" in out
    assert "exercise 2  a function" in out and "total: 1 chapter, 3 points" in out


def test_init_refuses_an_existing_folder(tmp_path, capsys):
    book, root = _book(tmp_path), tmp_path / "course"
    root.mkdir()
    (root / "gradebook.db").write_text("the teacher's marks")
    assert course.main(["init", str(root), "--chapters", "fx01", "--book", str(book)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists; nothing was written" in err
    assert [p.name for p in root.iterdir()] == ["gradebook.db"]


def test_init_names_the_valid_chapters(tmp_path, capsys):
    book, root = _book(tmp_path), tmp_path / "course"
    (book / "notes.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))  # no exercises: not one
    assert course.main(["init", str(root), "--chapters", "fx01", "ch99", "notes", "--book", str(book)]) == 2
    err = capsys.readouterr().err
    assert err == "course.py: unknown chapter(s) ch99 notes; chapters with exercises: fx01\n"
    assert not root.exists()


def test_source_is_the_student_edition_with_solutions(tmp_path):
    """generate_assignment of the source gives the student edition: same cells, ids, tags and nbgrader
    metadata; only solution regions differ (replaced by the code stub). Answer-only cells and widget state
    are gone from both."""
    book = _book(tmp_path)
    course.init(tmp_path / "course", ["fx01"], book)
    source = nbformat.read(tmp_path / "course" / "source" / "fx01" / FIXTURE.name, as_version=4)
    student = student_notebook(nbformat.read(FIXTURE, as_version=4), "fx01")
    nbformat.validate(source)
    assert len(source.cells) == len(student.cells) == len(nbformat.read(FIXTURE, as_version=4).cells) - 2
    for mine, theirs in zip(source.cells, student.cells):
        assert (mine.cell_type, mine.id, mine.metadata.get("tags")) == \
               (theirs.cell_type, theirs.id, theirs.metadata.get("tags"))
        assert mine.metadata.get("nbgrader") == theirs.metadata.get("nbgrader")
        if exercises.kind(mine) == exercises.SOLUTION:
            assert exercises.BEGIN in mine.source
            assert exercises._student_stub(mine.source).strip() == theirs.source.strip()
        else:
            assert mine.source == theirs.source
    text = "\n".join(cell.source for cell in source.cells)
    assert "print(area)" not in text and "Multiply by two" not in text  # the answer cells: dropped
    assert "widgets" not in source.metadata
    assert all(c.outputs == [] for c in source.cells if c.cell_type == "code")


def test_bench_results_travel_with_the_chapters_that_read_them(tmp_path):
    book = _book(tmp_path, bench=True)
    course.init(tmp_path / "course", ["fx01", "fx03"], book)
    source = tmp_path / "course" / "source"
    nb = nbformat.read(source / "fx03" / "fx03_bench.ipynb", as_version=4)
    assert f'grid = {PACKAGE_BENCH} / "sampling_grid.csv"' in [c.source for c in nb.cells]  # not the repo path
    assert (source / "fx03" / "bench" / "results" / "sampling_grid.csv").is_file()
    assert not (source / "fx01" / "bench").exists()
    # the student edition ships the same copy beside its notebook
    [written] = write_student_edition([book / "fx03_bench.ipynb"], book, tmp_path / "student")
    assert (written.parent / "bench" / "results" / "sampling_grid.csv").is_file()


# --- nbgrader itself, with the course's config: generate_assignment, autograde ------------------------------

def _nbgrader(root: Path, *args: str) -> float:
    """Run an nbgrader command in the course folder as a teacher does (MINIMIND_GRADED from the config)."""
    env = {k: v for k, v in os.environ.items() if k != "MINIMIND_GRADED"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return time.perf_counter() - start


def _comparable(nb):
    """Cells as nbgrader's release and the student edition must agree on them (checksums aside)."""
    cells = []
    for cell in nb.cells:
        grader = {k: v for k, v in cell.metadata.get("nbgrader", {}).items()
                  if k not in ("checksum", "cell_type")}  # what generate_assignment adds
        cells.append((cell.cell_type, cell.id, cell.source, cell.metadata.get("tags"), grader,
                      cell.metadata.get("editable"), cell.metadata.get("deletable")))
    return cells


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's gradebook, harmless
def test_course_path_on_a_chapter(tmp_path):
    """init -> generate_assignment -> autograde two submissions: the reference solutions score full marks,
    the unchanged release 0; the release is the student edition; graded mode reaches the kernel.
    COURSE_TEST_CHAPTER picks the chapter (default ch04a). Measured on 2 shared cores: ~90 s in all at load
    average 5 (autograde 29 s and 45 s), 8 min at load average 10."""
    from nbgrader.api import Gradebook
    chapter = os.environ.get("COURSE_TEST_CHAPTER", "ch04a")
    root, folder = tmp_path / "course", tmp_path / "book"
    folder.mkdir()
    snapshot = Path(shutil.copy(course.resolve([chapter])[0], folder))  # the chapter may change meanwhile
    notebook = course.init(root, [chapter], folder)[chapter][0]
    times = {"generate": _nbgrader(root, "generate_assignment", chapter)}
    release = root / "release" / chapter / notebook.name
    book = nbformat.read(snapshot, as_version=4)
    assert _comparable(nbformat.read(release, as_version=4)) == _comparable(student_notebook(book, chapter))
    stubs = nbformat.read(release, as_version=4)  # a student who adds a cell: it runs, and it is not graded
    stubs.cells.append(new_code_cell('import os\nprint("graded mode:", os.environ.get("MINIMIND_GRADED"))'))
    submissions = {"reference": nbformat.read(notebook, as_version=4), "stubs": stubs}
    for student, nb in submissions.items():
        (root / "submitted" / student / chapter).mkdir(parents=True)
        nbformat.write(nb, root / "submitted" / student / chapter / notebook.name)
        times[student] = _nbgrader(root, "autograde", chapter, "--student", student)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id=course.COURSE_ID) as gradebook:
        scores = {s: (gradebook.find_submission(chapter, s).score, gradebook.find_submission(chapter, s).max_score)
                  for s in submissions}
    graded = nbformat.read(root / "autograded" / "stubs" / chapter / notebook.name, as_version=4)
    slowest = max(_seconds(cell) for cell in graded.cells if cell.cell_type == "code")
    print(f"\n{chapter}: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
          + f"; slowest cell {slowest:.1f} s; scores {scores}")
    total = scores["reference"][1]
    assert total == sum(p for _, _, p in course.exercise_table(book)) > 0
    assert scores == {"reference": (total, total), "stubs": (0.0, total)}  # exact: sums of integer points
    assert "graded mode: 1" in graded.cells[-1].outputs[0].text


def _seconds(cell) -> float:
    from datetime import datetime
    timing = cell.metadata.get("execution", {})
    if "iopub.execute_input" not in timing or "shell.execute_reply" not in timing:
        return 0.0
    start, end = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                  for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def test_exercises_write_puts_the_metadata_of_new_tags(tmp_path):
    """A teacher who tags a new exercise writes its nbgrader metadata without re-executing the chapter."""
    path = tmp_path / FIXTURE.name
    nb = nbformat.read(FIXTURE, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    nbformat.write(nb, path)
    assert exercises.main(["--write", str(path)]) == 0
    written = nbformat.read(path, as_version=4)
    assert written == exercises.apply_metadata(nbformat.read(FIXTURE, as_version=4), "fx01")
