"""The form every chapter notebook keeps, from its cell tags: folds, labels, kernelspec.

    python tools/notebook_form.py book/ch02_rmsnorm.ipynb ...   # apply in place (outputs untouched)
    python tools/notebook_form.py --check book/*.ipynb          # list what is not in form (exit 1)

- A code cell tagged `solution` folds behind a toggle labelled "Solution": in the book (myst-nb's
  `hide-input` and `code_prompt_show`) and in JupyterLab (`jupyter.source_hidden`).
- A code cell tagged `going-deeper` (a second or third measurement of a point) folds with its output
  behind "Going deeper" (`hide-cell`; `source_hidden` and `outputs_hidden` in JupyterLab).
- Hints, a markdown solution and the prose of a going-deeper block are written as
  `<details class="hint"><summary>Hint 1</summary> ... </details>`, which folds in the book, in
  JupyterLab and in nbconvert's HTML alike (a MyST admonition is raw text in JupyterLab).
- The kernelspec is the one Jupyter writes, so opening a chapter does not mark it modified.
- The first code cell is `PACKAGE_GUARD` (hidden in the book): a chapter downloaded on its own and
  opened where `minimind` is not installed says in one line what to install, not ModuleNotFoundError.
tools/refresh_notebooks.py applies this after every run; tests/test_notebook_form.py checks it.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
FOLDS = {  # tag: (myst-nb tag, prompt to show, prompt to hide, JupyterLab flags)
    "solution": ("hide-input", "Solution", "Hide the solution", {"source_hidden": True}),
    "going-deeper": ("hide-cell", "Going deeper", "Hide",
                     {"source_hidden": True, "outputs_hidden": True}),
}
PACKAGE_GUARD = """\
import importlib.util

if importlib.util.find_spec("minimind") is None:  # a chapter downloaded on its own
    class NeedsTheBooksPackage(Exception):
        def _render_traceback_(self):  # IPython shows this one line, no traceback
            return [str(self)]
    raise NeedsTheBooksPackage(
        "This chapter needs the book's package `minimind`: in a clone of the book's "
        "repository run `pip install -r requirements.txt` (README), then restart "
        "the kernel.")"""
GUARD_START = 'import importlib.util\n\nif importlib.util.find_spec("minimind") is None:'
GUARD_TAGS = ["remove-cell"]
ADMONITION = re.compile(r":::+\{admonition\}\s*(?P<title>[^\n]*)\n(?::class:[^\n]*\n)?(?P<body>.*?)\n:::+",
                        re.DOTALL)


def details(title: str, body: str) -> str:
    """A block that folds everywhere: `<details>` with the body as Markdown between blank lines."""
    kind = "hint" if title.lower().startswith("hint") else (
        "going-deeper" if title.lower().startswith("going deeper") else "solution")
    return f'<details class="{kind}"><summary>{title}</summary>\n\n{body.strip()}\n\n</details>'


def apply_form(nb):
    """Set fold metadata from the tags, convert admonition toggles to `<details>`, fix the kernelspec."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    _ensure_guard(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = ADMONITION.sub(lambda m: details(m["title"].strip(), m["body"]), cell.source)
            continue
        tags = cell.metadata.setdefault("tags", [])
        for tag, (myst_tag, show, hide, lab) in FOLDS.items():
            if tag in tags:
                if myst_tag not in tags:
                    tags.append(myst_tag)
                cell.metadata["mystnb"] = {"code_prompt_show": show, "code_prompt_hide": hide}
                cell.metadata["jupyter"] = dict(lab)
        if not tags:
            del cell.metadata["tags"]
    return nb


def _first_code(nb):
    return next((i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"), None)


def _ensure_guard(nb):
    first = _first_code(nb)
    if first is not None and nb.cells[first].source.startswith(GUARD_START):  # this or an older one
        nb.cells[first].source = PACKAGE_GUARD
        nb.cells[first].metadata["tags"] = list(GUARD_TAGS)
        return
    guard = nbformat.v4.new_code_cell(PACKAGE_GUARD, metadata={"tags": list(GUARD_TAGS)})
    guard["id"] = "package-guard"  # a fixed id: re-applying the form changes nothing
    nb.cells.insert(first if first is not None else len(nb.cells), guard)


def problems(nb) -> list[str]:
    """What `apply_form` would change, in words (an empty list: the notebook is in form)."""
    found = []
    if nb.metadata.get("kernelspec") != KERNELSPEC:
        found.append(f"kernelspec is {nb.metadata.get('kernelspec')}, not {KERNELSPEC}")
    first = _first_code(nb)
    if first is None or nb.cells[first].source != PACKAGE_GUARD:
        found.append("the first code cell is not the package guard (PACKAGE_GUARD)")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and ADMONITION.search(cell.source):
            found.append(f"cell {i}: an admonition toggle (raw text in JupyterLab): use <details>")
        tags = cell.metadata.get("tags", [])
        for tag, (myst_tag, show, _, lab) in FOLDS.items():
            if cell.cell_type == "code" and tag in tags and (
                    myst_tag not in tags or cell.metadata.get("jupyter") != lab
                    or cell.metadata.get("mystnb", {}).get("code_prompt_show") != show):
                found.append(f"cell {i}: tagged {tag} but not folded as one")
    return found


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check_only = "--check" in args
    paths = [Path(a) for a in args if a != "--check"]
    bad = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        found = problems(nb)
        if check_only:
            for problem in found:
                print(f"{path}: {problem}")
            bad += bool(found)
        elif found:
            nbformat.write(apply_form(nb), path)
            print(f"{path}: {len(found)} fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
