"""Helpers every chapter uses: setup, live source display, and the exercise checker."""
import inspect
import os
import random
import textwrap
import traceback

import torch

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


def show_source(obj, lines: tuple[int, int] | None = None):
    """Display the live source of a class, function or method from the package, with its file line numbers.

    `lines=(first, last)` shows only that slice (numbers as in the file).
    """
    from IPython.display import HTML, display
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    source_lines, start = inspect.getsourcelines(obj)
    if lines is not None:
        source_lines = source_lines[lines[0] - start: lines[1] - start + 1]
        start = lines[0]
    code = textwrap.dedent("".join(source_lines))
    where = inspect.getmodule(obj).__name__.replace(".", "/") + ".py"  # e.g. minimind/norm.py, wherever installed
    formatter = HtmlFormatter(linenos="inline", linenostart=start, noclasses=True, style="friendly")
    html = (f'<div class="live-source"><div style="font-size:0.85em;color:#555">{where}, '
            f"lines {start}–{start + len(source_lines) - 1}</div>{highlight(code, PythonLexer(), formatter)}</div>")
    display(HTML(html))


def _describe(value) -> str:
    if torch.is_tensor(value):
        return f"tensor of shape {list(value.shape)} ({str(value.dtype).replace('torch.', '')})"
    return repr(value)


def check(answer_fn, reference_fn, cases, atol=1e-5, rtol=1e-4, name=None) -> bool:
    """Compare a reader's function with the package's on each case (a tuple of arguments), in plain words.

    Prints which case failed, what was expected and what came back; never lets a traceback escape.
    """
    name = name or getattr(answer_fn, "__name__", "your function")
    for i, args in enumerate(cases, 1):
        args = args if isinstance(args, tuple) else (args,)
        shown = ", ".join(_describe(a) for a in args)
        expected = reference_fn(*args)
        try:
            got = answer_fn(*args)
        except NotImplementedError:
            print(f"✗ {name} is not written yet: replace `raise NotImplementedError()` with your code.")
            return False
        except Exception as error:  # the reader's code: report, don't crash the notebook
            where = traceback.extract_tb(error.__traceback__)[-1]
            print(f"✗ case {i} ({shown}): {name} raised {type(error).__name__}: {error} (line {where.lineno})")
            return False
        problem = _mismatch(got, expected, atol, rtol)
        if problem:
            print(f"✗ case {i} ({shown}): {problem}")
            return False
    print(f"✓ {name} matches the package on all {len(cases)} cases.")
    return True


def _mismatch(got, expected, atol, rtol):
    if torch.is_tensor(expected):
        if not torch.is_tensor(got):
            return f"expected a tensor, got {type(got).__name__}"
        if got.shape != expected.shape:
            return f"expected shape {list(expected.shape)}, got {list(got.shape)}"
        if not torch.allclose(got.float(), expected.float(), atol=atol, rtol=rtol):
            worst = (got.float() - expected.float()).abs().max().item()
            return f"values differ from the package's by up to {worst:.3g} (tolerance {atol:g})"
        return None
    if isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(expected):
        for g, e in zip(got, expected):
            problem = _mismatch(g, e, atol, rtol)
            if problem:
                return problem
        return None
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return None if abs(got - expected) <= atol + rtol * abs(expected) else f"expected {expected:.6g}, got {got:.6g}"
    return None if got == expected else f"expected {expected!r}, got {got!r}"
