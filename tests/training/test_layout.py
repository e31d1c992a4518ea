"""Neither the model core nor training imports the book's helpers; its names work."""
import ast
from pathlib import Path

import pytest

import minimind
from minimind.lab import device as lab_device, probes
from minimind.training import device, evaluate

PACKAGE = Path(minimind.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, [base, node.module]))
            names |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return names


CORE_AND_TRAINING = sorted([*PACKAGE.glob("*.py"), *PACKAGE.glob("training/*.py")])


@pytest.mark.parametrize("path", CORE_AND_TRAINING,
                         ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_lab_import(path):
    lab = {name for name in imported_modules(path) if name.startswith("minimind.lab")}
    assert not lab, f"{path.name} imports {sorted(lab)}"


def test_the_resolver_sees_a_lab_import():
    book = PACKAGE / "lab" / "book.py"  # from .device import pick_device, pick_dtype
    assert "minimind.lab.device" in imported_modules(book)


def test_the_book_names_are_the_training_ones():
    assert lab_device.pick_device is device.pick_device
    assert lab_device.pick_dtype is device.pick_dtype
    assert probes.router_choices is evaluate.router_choices
    assert probes.router_load is evaluate.router_load


def test_pick_device_refuses_what_is_not_there():
    assert device.pick_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="'gpu' is not a device torch knows"):
        device.pick_device("gpu")
