"""tools/student_edition.py: solutions out, stubs in, outputs and widget state cleared."""

import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from student_edition import strip_solution_code, write_student_edition  # noqa: E402


def _chapter(tmp_path: Path) -> Path:
    nb = new_notebook(cells=[
        new_markdown_cell("# RoPE\nRotate pairs of dimensions."),
        new_code_cell("import torch\nx = torch.ones(2)", execution_count=1,
                      outputs=[new_output("stream", name="stdout", text="ok\n")]),
        new_code_cell(
            "def rotate_half(x):\n"
            "    ### BEGIN SOLUTION\n"
            "    x1, x2 = x.chunk(2, dim=-1)\n"
            "    return torch.cat((-x2, x1), dim=-1)\n"
            "    ### END SOLUTION\n"
            "\n"
            "print('defined')",
            execution_count=2,
            outputs=[new_output("stream", name="stdout", text="defined\n")],
        ),
        new_markdown_cell("**Solution.** The halves swap and one changes sign.",
                          metadata={"tags": ["solution"]}),
        new_code_cell("secret_check = 42", metadata={"tags": ["solution", "hide-input"]}),
    ])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"a": {}}}}
    path = tmp_path / "book" / "ch03_rope.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    return path


def test_student_edition_removes_solutions_and_keeps_the_rest(tmp_path):
    source = _chapter(tmp_path)
    [written] = write_student_edition([source], tmp_path, tmp_path / "student")

    assert written == tmp_path / "student" / "book" / "ch03_rope.ipynb"
    nb = nbformat.read(written, as_version=4)
    nbformat.validate(nb)
    sources = [cell.source for cell in nb.cells]

    # solution code gone, nbgrader stub in its place, indented like the marker
    text = "\n".join(sources)
    assert "chunk(2" not in text and "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert ("def rotate_half(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n"
            "print('defined')") in sources
    # cells tagged `solution` removed entirely; the others kept in order
    assert "secret_check" not in text and "**Solution.**" not in text
    assert sources[0].startswith("# RoPE") and sources[1] == "import torch\nx = torch.ones(2)"
    assert len(nb.cells) == 3
    # outputs, counts and widget state cleared
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert "widgets" not in nb.metadata
    # the source notebook is untouched
    assert "chunk(2" in nbformat.read(source, as_version=4).cells[2].source


def test_unclosed_solution_block_is_an_error():
    with pytest.raises(ValueError, match="END SOLUTION"):
        strip_solution_code("### BEGIN SOLUTION\nx = 1")
