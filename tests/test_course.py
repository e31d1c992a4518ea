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
    # (number, title, points, difficulty, minutes): ex2 is difficulty 3 with a `points-2` override
    assert assignments["fx01"][1] == [(1, "a number", 1, 1, 5), (2, "a function", 2, 3, 10)]
    config = _load_config(root / "nbgrader_config.py", monkeypatch)
    assert config.ClearSolutions.code_stub == {"python": "# YOUR CODE HERE"}  # no raise: stubs still run
    assert config.Execute.timeout == course.TIMEOUT_S == 300
    assert config.CourseDirectory.course_id == course.COURSE_ID
    # the kernels nbgrader starts inherit its environment: graded mode, this interpreter first on PATH
    assert os.environ["MINIMIND_GRADED"] == "1"
    assert os.environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    readme = (root / "README.md").read_text()
    assert "| 2 | a function | 3 | 10 | 2 |" in readme and "| | total | | 15 | 3 |" in readme
    assert "1 chapter, 2 exercises, 3 points, 15 minutes" in readme


def test_init_prints_the_points(tmp_path, capsys):
    assert course.main(["init", str(tmp_path / "c"), "--chapters", "fx01_fixture", "--book",
                        str(_book(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "fx01: fx01_fixture.ipynb, 2 exercises, 3 points, 15 minutes" in out
    assert "exercise 2  a function" in out and "difficulty 3  10 min  2 points" in out
    assert "total: 1 chapter, 3 points" in out


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


def test_init_copies_the_teachers_guides(tmp_path, capsys):
    book = _book(tmp_path, bench=True)
    (book / "teaching").mkdir()
    (book / "teaching" / "fx01.md").write_text("# Teacher's guide: the fixture\n")
    assert course.main(["init", str(tmp_path / "c"), "--chapters", "fx01", "fx03", "--book", str(book)]) == 0
    assert "guides/" in capsys.readouterr().out
    guides = tmp_path / "c" / "guides"
    assert [p.name for p in guides.iterdir()] == ["fx01.md"]
    assert (guides / "fx01.md").read_text() == "# Teacher's guide: the fixture\n"
    readme = (tmp_path / "c" / "README.md").read_text()
    assert "- [fx01](guides/fx01.md)" in readme and "(no guide yet for fx03)" in readme


def test_table_of_the_book(tmp_path, capsys):
    book = _book(tmp_path)
    nb = nbformat.read(FIXTURE, as_version=4)
    for cell in nb.cells:  # a chapter whose check cells are not tagged yet
        if exercises.kind(cell) == exercises.CHECK:
            cell.metadata["tags"] = ["check"]
    nbformat.write(nb, book / "fx02_untagged.ipynb")
    (book / "teaching").mkdir()
    (book / "teaching" / "fx01.md").write_text("# guide\n")
    assert course.main(["table", "--book", str(book)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| chapter | exercises | by difficulty (1 · 2 · 3) | minutes | points | guide |",
        "|---|---|---|---|---|---|",
        "| fx01_fixture | 2 | 1 · 0 · 1 | 15 | 3 | [fx01.md](book/teaching/fx01.md) |",
        "| fx02_untagged | 2 | 0 · 0 · 0 (2 untagged) | ≥ 0 (2 untagged) | 2 | — |",
        "| **total** | 4 | 1 · 0 · 1 | ≥ 15 (2 untagged) | 5 | |"]


TABLE_START, TABLE_END = "<!-- course.py table -->", "<!-- end of course.py table -->"


def test_the_readme_table_is_the_tools_output():
    """README.md's teaching section shows `python tools/course.py table`: re-paste it when a chapter's
    exercises change (the lines between the two markers)."""
    readme = (REPO_ROOT / "README.md").read_text()
    assert TABLE_START in readme and TABLE_END in readme
    pasted = readme.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert pasted == course.book_table().strip(), "re-paste `python tools/course.py table` into README.md"


def _check_cells():
    for path in sorted((REPO_ROOT / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, (cell, number) in enumerate(zip(nb.cells, exercises.exercise_numbers(nb))):
            if exercises.kind(cell) == exercises.CHECK:
                yield path.stem, i, number, cell


def test_every_check_cell_has_a_difficulty_and_minutes():
    """The planning tags (tools/exercises.py): `difficulty-1|2|3` and `minutes-N` on every check cell."""
    missing = [f"{name} cell {i} (exercise {n})" for name, i, n, cell in _check_cells()
               if exercises.difficulty(cell) not in exercises.DIFFICULTIES or exercises.minutes(cell) is None]
    assert not missing, "no difficulty-N or minutes-N tag: " + ", ".join(missing)


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


# The simulated class of the done-means test (issue #21), per chapter: what a partly right student writes
# (exercise -> the solution cell's code; `right`: the exercises it gets right, one of them correct but
# raising a torch UserWarning), and the gaming attempts, each of which must score 0 with the words that
# refuse it in its check cell's output. A chapter added to COURSE_CHAPTERS needs its entry here.
WARNS = "torch.tensor(x)"  # a correct answer that warns: "To copy construct from a tensor ..."
CLASS = {
    "ch04a": {
        "partly": {
            1: "weights_shape = (1, 4, 3, 8)",
            2: "def fixed_mask(q_len, kv_len):\n"
               "    return torch.ones(q_len, kv_len, dtype=torch.bool).tril()",  # the broken mask
            3: f"def my_repeat_kv(x, n_rep):\n    return {WARNS}.repeat_interleave(n_rep, dim=2)",
        },
        "right": [1, 3],
        "gaming": {
            2: ("def fixed_mask(q_len, kv_len):  # a wrapper of the package's mask\n"
                "    return causal_mask(q_len, kv_len)[0, 0]", "asks you not to use `causal_mask`"),
            3: ("my_repeat_kv = repeat_kv", "is the package's own `repeat_kv`"),
            4: ("attention_params = 1_000_000", "is not the package's value"),  # no direction
            5: ("def my_attention(q, k, v):\n"
                "    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)",
                "asks you not to use `torch.nn.functional.scaled_dot_product_attention`"),
        },
    },
    "ch05": {
        "partly": {
            1: "def my_intermediate_size(hidden_size):\n"
               "    return math.ceil(hidden_size * math.pi / 64) * 64",
            2: "def my_swiglu(x, w_gate, w_up, w_down):\n"
               f"    x = {WARNS}\n    g = x @ w_gate.T\n"
               "    return (g * torch.sigmoid(g) * (x @ w_up.T)) @ w_down.T",
            3: "def my_ffn_flops(hidden_size, width, gated):\n"
               "    return (3 if gated else 2) * hidden_size * width",  # a multiply-add counted once
        },
        "right": [1, 2],
        "gaming": {
            1: ("def my_intermediate_size(hidden_size):\n    return 2400", "is not the package's value"),
            2: ("def my_swiglu(x, w_gate, w_up, w_down):\n"
                "    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T",
                "asks you not to use `torch.nn.functional.silu`"),
            6: ("my_keep_largest = ffn_lab.keep_largest", "is the package's own `keep_largest`"),
        },
    },
}
COURSE_CHAPTERS = os.environ.get("COURSE_TEST_CHAPTERS", "ch04a ch05").split()


def _answered(release, chapter: str, answers: dict) -> nbformat.NotebookNode:
    """The release with the solution cells of some exercises replaced by a student's code."""
    nb = nbformat.read(release, as_version=4)
    ids = {f"{chapter}-ex{n}-solution": code for n, code in answers.items()}
    found = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in ids:
            cell.source, found = ids[grade_id], found | {grade_id}
    assert found == set(ids), f"no solution cell {sorted(set(ids) - found)} in {release.name}"
    return nb


def _check_output(nb, grade_id: str) -> str:
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return "\n".join(o.get("text", "") + "\n".join(o.get("traceback", [])) for o in cell.outputs)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's gradebook, harmless
def test_course_path_for_a_class(tmp_path):
    """The done-means test of issue #21, on COURSE_CHAPTERS (default ch04a ch05; COURSE_TEST_CHAPTERS
    picks others, each with an entry in CLASS): init -> generate_assignment -> four submissions per
    chapter -> autograde -> generate_feedback. The unchanged release scores 0, the reference full marks,
    the partly right student exactly the points of its right exercises (one of them correct but warning:
    full marks, the warning reported on stdout), and each gaming attempt 0 with the check's refusal in
    its output; graded mode reaches the kernel and keeps the direction of a numeric miss out of it.
    The release equals the student edition. Prints the autograde time of each submission."""
    from nbgrader.api import Gradebook
    root, folder = tmp_path / "course", tmp_path / "book"
    folder.mkdir()
    books = {c: nbformat.read(shutil.copy(course.resolve([c])[0], folder), as_version=4)
             for c in COURSE_CHAPTERS}  # snapshots: the chapters may change meanwhile
    notebooks = {c: nb for c, (nb, _) in course.init(root, COURSE_CHAPTERS, folder).items()}
    times: dict[str, float] = {}
    for chapter, notebook in notebooks.items():
        times[f"{chapter} release"] = _nbgrader(root, "generate_assignment", chapter)
        release = root / "release" / chapter / notebook.name
        assert _comparable(nbformat.read(release, as_version=4)) == \
            _comparable(student_notebook(books[chapter], chapter))
        plan = CLASS[chapter]
        unchanged = nbformat.read(release, as_version=4)  # an added cell runs, and is not graded
        unchanged.cells.append(new_code_cell('import os\nprint("graded:", os.environ.get("MINIMIND_GRADED"))'))
        submissions = {"unchanged": unchanged, "reference": nbformat.read(notebook, as_version=4),
                       "partly": _answered(release, chapter, plan["partly"]),
                       "gamer": _answered(release, chapter, {n: c for n, (c, _) in plan["gaming"].items()})}
        for student, nb in submissions.items():
            (root / "submitted" / student / chapter).mkdir(parents=True)
            nbformat.write(nb, root / "submitted" / student / chapter / notebook.name)
            times[f"{chapter} {student}"] = _nbgrader(root, "autograde", chapter, "--student", student)
        times[f"{chapter} feedback"] = _nbgrader(root, "generate_feedback", chapter)
    print("\n" + "; ".join(f"{k} {v:.0f} s" for k, v in times.items()))

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id=course.COURSE_ID) as gradebook:
        for chapter, notebook in notebooks.items():
            table, plan = course.exercise_table(books[chapter]), CLASS[chapter]
            total = sum(e.points for e in table)
            value = {e.number: e.points for e in table}
            scores = {s: gradebook.find_submission(chapter, s).score
                      for s in ("unchanged", "reference", "partly", "gamer")}
            assert gradebook.find_submission(chapter, "reference").max_score == total > 0
            assert scores == {"unchanged": 0, "reference": total, "gamer": 0,
                              "partly": sum(value[n] for n in plan["right"])}, (chapter, scores)
            assert not any(gradebook.find_submission(chapter, s).needs_manual_grade for s in scores)
            graded = {s: nbformat.read(root / "autograded" / s / chapter / notebook.name, as_version=4)
                      for s in ("unchanged", "partly", "gamer")}
            assert "graded: 1" in graded["unchanged"].cells[-1].outputs[0].text
            slowest = max(_seconds(c) for c in graded["unchanged"].cells if c.cell_type == "code")
            print(f"{chapter}: slowest cell {slowest:.1f} s; scores {scores}")
            warned = [n for n in plan["right"] if WARNS in plan["partly"][n]]
            for n in warned:  # correct, warned: full marks, the warning on stdout
                output = _check_output(graded["partly"], f"{chapter}-ex{n}-check")
                assert "✓" in output and "note: your function warned: UserWarning" in output, output
            for n, (_, refusal) in plan["gaming"].items():
                grade = gradebook.find_grade(f"{chapter}-ex{n}-check", notebook.stem, chapter, "gamer")
                output = _check_output(graded["gamer"], f"{chapter}-ex{n}-check")
                assert grade.score == 0 and refusal in output, (chapter, n, output)
                assert "too large" not in output and "too small" not in output  # graded mode
            feedback = root / "feedback" / "partly" / chapter / notebook.with_suffix(".html").name
            assert feedback.is_file() and "✗" in feedback.read_text()


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
