"""Every chapter keeps the form of tools/notebook_form.py, and its sliders have their saved state.

Fast: reads the committed notebooks, runs nothing. A notebook saved from JupyterLab with "Save Widget
State Automatically" off keeps widget views whose models are not in the saved state: the HTML book's
sliders then point at nothing, which this catches long before the browser test.
"""
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from notebook_form import PACKAGE_GUARD, apply_form, problems  # noqa: E402
from refresh_notebooks import toc_notebooks  # noqa: E402

NOTEBOOKS = toc_notebooks(ROOT / "_toc.yml")
VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_is_in_form(path):
    assert problems(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_widget_view_has_its_saved_state(path):
    nb = nbformat.read(path, as_version=4)
    state = nb.metadata.get("widgets", {}).get(STATE, {}).get("state", {})
    views = [(i, out["data"][VIEW]["model_id"]) for i, cell in enumerate(nb.cells)
             for out in cell.get("outputs", []) if VIEW in out.get("data", {})]
    missing = [(i, model) for i, model in views if model not in state]
    assert not missing, (f"{len(missing)} of {len(views)} widget views have no saved state (first: cell "
                         f"{missing[0][0]}); save with widget state (README, 'Saving a chapter')")


def test_apply_form_folds_solutions_and_converts_admonitions():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(":::{admonition} Hint 1\n:class: dropdown\n\nLook at `eps`.\n:::"),
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("y = 2", metadata={"tags": ["going-deeper"]})])
    assert len(problems(nb)) == 5
    apply_form(nb)
    assert problems(nb) == [] and nb.cells[1].source == PACKAGE_GUARD  # before the first code cell
    assert nb.cells[0].source == ('<details class="hint"><summary>Hint 1</summary>\n\nLook at `eps`.'
                                  '\n\n</details>')
    solution, deeper = nb.cells[2].metadata, nb.cells[3].metadata
    assert "hide-input" in solution.tags and solution.jupyter == {"source_hidden": True}
    assert solution.mystnb["code_prompt_show"] == "Solution"
    assert "hide-cell" in deeper.tags and deeper.jupyter["outputs_hidden"]
    before = nbformat.writes(nb)
    assert nbformat.writes(apply_form(nb)) == before  # applying it twice changes nothing


def test_the_package_guard_names_what_to_install():
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    result = shell.run_cell(PACKAGE_GUARD.replace('"minimind"', '"no_such_package_xyz"'))
    error = result.error_in_exec
    assert type(error).__name__ == "NeedsTheBooksPackage"
    assert error._render_traceback_() == [str(error)] and "pip install -r requirements.txt" in str(error)
    assert shell.run_cell(PACKAGE_GUARD).error_in_exec is None  # installed here: nothing happens


def test_an_older_guard_is_replaced_not_doubled():
    old = 'import importlib.util\n\nif importlib.util.find_spec("minimind") is None:\n    raise SystemExit'
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(old), nbformat.v4.new_code_cell("x")])
    apply_form(nb)
    assert [c.source for c in nb.cells] == [PACKAGE_GUARD, "x"]
