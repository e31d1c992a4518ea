"""Helpers every chapter uses: setup and the live source display (the checker: checker.py)."""
import inspect
import os
import random
import textwrap
from pathlib import Path

import torch

from .checker import Case, NotYet, check  # noqa: F401  (chapters import them from here)
from .device import pick_device, pick_dtype


def setup(seed: int = 0, quiet=True):
    """Seed everything, silence progress bars and choose the device; returns (device, dtype).

    Prints the device and library versions: the cell that calls this is tagged nbval-ignore-output.
    """
    import numpy as np
    import transformers
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # GPU prints = CPU prints
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=110)
    np.set_printoptions(precision=4, suppress=True, linewidth=110)
    if quiet:
        os.environ.setdefault("TQDM_DISABLE", "1")
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    device = pick_device()
    dtype = pick_dtype(device)
    print(f"device {device}, dtype {dtype}; torch {torch.__version__}, transformers {transformers.__version__}")
    return device, dtype


def within_rounding(delta: float, bound: float = 1e-5, what: str = "float32 rounding") -> str:
    """A difference as it reads on every machine: "≤ 1e-05 (float32 rounding)" or "= 8e-04".

    Below `bound` the digits are rounding noise that differs between CPU kernels (AVX-512, AVX2,
    plain) and GPUs, so only the bound is printed; above it, one significant digit.
    """
    delta = float(delta)
    if delta != delta:  # NaN
        return "= nan"
    return f"≤ {bound:.0e} ({what})" if abs(delta) <= bound else f"= {delta:.0e}"


def bench_results() -> Path:
    """The committed benchmark tables (`bench/results/*.csv`, `*.json`) that
    chapters 5-8, 10 and the appendix plot.

    Looked up next to the notebook first (`./bench/results`: the copy that
    `tools/course.py` and `tools/student_edition.py` put beside a chapter), then in
    the repository checkout the package runs from (an editable install). A
    pip-installed package has no `bench/` folder.
    """
    here = Path.cwd() / "bench" / "results"  # a course's or student edition's copy
    root = Path(__file__).resolve().parents[2]  # minimind/lab/book.py -> the checkout
    for folder in (here, root / "bench" / "results"):
        if folder.is_dir():
            return folder
    raise FileNotFoundError(
        f"no bench/results next to this notebook ({here}) nor in a repository "
        "checkout: copy the repository's bench/results folder beside the notebook "
        "(tools/course.py does)")


REGION_START, REGION_END = "# region ", "# endregion"


def show_source(obj, region: str | None = None):
    """Display the live source of a class, function or method from the package, with its file line numbers.

    `region="name"` shows only the lines between `# region name` and `# endregion` inside it; marker lines are
    never shown.
    """
    from IPython.display import HTML, display
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    source_lines, start = inspect.getsourcelines(obj)
    if region is not None:
        source_lines, start = _region(source_lines, start, region, obj)
    numbered = [(start + i, line) for i, line in enumerate(source_lines)
                if not line.strip().startswith((REGION_START, REGION_END))]
    code = textwrap.dedent("".join(line for _, line in numbered))
    where = inspect.getmodule(obj).__name__.replace(".", "/") + ".py"  # e.g. minimind/norm.py, wherever installed
    first, last = numbered[0][0], numbered[-1][0]
    formatter = HtmlFormatter(linenos="inline", linenostart=first, noclasses=True, style="friendly")
    if last - first + 1 != len(numbered):  # marker lines were dropped: number each line by hand
        code = "".join(f"{n:>4} {line}" for n, line in zip([n for n, _ in numbered], code.splitlines(True)))
        formatter = HtmlFormatter(noclasses=True, style="friendly")
    html = (f'<div class="live-source"><div style="font-size:0.85em;color:#555">{where}, '
            f"lines {first}–{last}</div>{highlight(code, PythonLexer(), formatter)}</div>")
    display(HTML(html))


def _region(lines, start, name, obj):
    marker = f"{REGION_START}{name}"
    begin = next((i for i, line in enumerate(lines) if line.strip() == marker), None)
    if begin is None:
        names = [line.strip()[len(REGION_START):] for line in lines if line.strip().startswith(REGION_START)]
        raise ValueError(f"no region {name!r} in {getattr(obj, '__qualname__', obj)}; regions: {names}")
    end = next(i for i in range(begin, len(lines)) if lines[i].strip() == REGION_END)
    return lines[begin + 1:end], start + begin + 1
