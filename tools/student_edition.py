"""Write the student edition of the book: exercises without their solutions, notebooks without outputs.

    python tools/student_edition.py OUT_DIR            # every notebook in _toc.yml
    python tools/student_edition.py OUT_DIR --toc path/to/_toc.yml

For each notebook (paths kept relative to the toc's folder, e.g. OUT_DIR/book/ch03_rope.ipynb):
- in code cells, the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become the nbgrader stub
  `# YOUR CODE HERE` / `raise NotImplementedError()` (indented like the marker);
- cells tagged `solution` are removed (markdown explanations of the solutions);
- all outputs, execution counts and saved widget state are cleared.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refresh_notebooks import REPO_ROOT, toc_notebooks  # noqa: E402

BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
SOLUTION_TAG = "solution"


def strip_solution_code(source: str) -> str:
    """Replace every BEGIN/END SOLUTION block of a code cell by the nbgrader stub."""
    out: list[str] = []
    inside = False
    for line in source.splitlines():
        begin = BEGIN.match(line)
        if not inside and begin:
            indent = begin.group(1)
            out += [f"{indent}# YOUR CODE HERE", f"{indent}raise NotImplementedError()"]
            inside = True
        elif inside and END.match(line):
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("### BEGIN SOLUTION without a matching ### END SOLUTION")
    return "\n".join(out)


def student_notebook(nb):
    """Return a copy of `nb` as students get it."""
    nb = nbformat.from_dict(nb)  # deep copy
    kept = []
    for cell in nb.cells:
        if SOLUTION_TAG in cell.metadata.get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = strip_solution_code(cell.source)
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
            cell.metadata.pop("ExecuteTime", None)
        kept.append(cell)
    nb.cells = kept
    nb.metadata.pop("widgets", None)
    return nb


def write_student_edition(notebooks: list[Path], base: Path, out_dir: Path) -> list[Path]:
    """Write each notebook's student version to out_dir, keeping its path relative to base."""
    written = []
    for path in notebooks:
        target = out_dir / path.resolve().relative_to(base.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(student_notebook(nbformat.read(path, as_version=4)), target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--toc", type=Path, default=REPO_ROOT / "_toc.yml")
    args = parser.parse_args(argv)
    notebooks = toc_notebooks(args.toc)
    if not notebooks:
        print(f"no notebooks found from {args.toc}", file=sys.stderr)
        return 1
    for target in write_student_edition(notebooks, args.toc.parent, args.out_dir):
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
