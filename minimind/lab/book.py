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


def within_rounding(delta: float, bound: float = 1e-5, what: str = "float32 rounding") -> str:
    """A difference as it reads on every machine: "≤ 1e-05 (float32 rounding)" or "= 8e-04".

    Below `bound` the digits are rounding noise that differs between CPU kernels (AVX-512, AVX2,
    plain) and GPUs, so only the bound is printed; above it, one significant digit.
    """
    delta = float(delta)
    if delta != delta:  # NaN
        return "= nan"
    return f"≤ {bound:.0e} ({what})" if abs(delta) <= bound else f"= {delta:.0e}"


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


def check(answer_fn, reference_fn, cases, atol=1e-5, rtol=1e-4, name=None, hint=None) -> bool:
    """Compare a reader's function with the package's on each case (a tuple of arguments), in plain words.

    Says which case failed and how (wrong type, wrong shape, the first entry that differs), and adds
    `hint` when one is given. Each function gets its own copy of the tensors in a case. Never lets
    a traceback escape; returns True when every case matches.
    """
    name = name or getattr(answer_fn, "__name__", "your function")
    for i, args in enumerate(cases, 1):
        args = args if isinstance(args, tuple) else (args,)
        where = f"case {i} ({', '.join(_describe(a) for a in args)})" if args else name
        expected = reference_fn(*_fresh(args))
        try:
            got = answer_fn(*_fresh(args))  # a copy: an in-place answer cannot touch the cases
        except NotImplementedError:
            got = ...
        except Exception as error:  # the reader's code: report, don't crash the notebook
            line = traceback.extract_tb(error.__traceback__)[-1].lineno
            return _fail(f"{where}: {name} raised {type(error).__name__}: {error} (line {line})", hint)
        if _unanswered(got):
            return _fail(f"{name} is not written yet: replace the `...` or `None` with your answer.", hint)
        problem = _mismatch(got, expected, atol, rtol)
        if problem:
            return _fail(f"{where}: {problem}", hint)
    print(f"✓ {name} matches the package" + (f" on all {len(cases)} cases." if len(cases) > 1 else "."))
    return True


def _fail(message, hint):
    print("✗ " + message + (f"\n  Hint: {hint}" if hint else ""))
    return False


def _unanswered(got) -> bool:
    if got is ... or got is None:
        return True
    return isinstance(got, (tuple, list)) and any(_unanswered(g) for g in got)


def _fresh(value):
    """A copy of every tensor in `value` (tuples, lists and dicts followed); other objects as they are."""
    if torch.is_tensor(value):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _first_difference(got, expected, atol, rtol, what):
    """None when the tensors match, else where the first entry differs, in the reader's terms.

    Integer and boolean tensors (token ids, masks) must be equal; floats close, -inf only where
    the package has -inf (a masked entry), never a difference like "nan".
    """
    exact = not (got.is_floating_point() or expected.is_floating_point())
    g, e = got.detach().cpu(), expected.detach().cpu()
    if exact:
        wrong = g != e
    else:
        g, e = g.double(), e.double()
        wrong = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    if not wrong.any():
        return None
    first = [int(i) for i in wrong.nonzero()[0]]
    index = tuple(first)
    count = int(wrong.sum())
    share = "one entry differs" if count == 1 else f"{count} of {wrong.numel()} entries differ"
    return (f"{what} has the right shape, but {share} from the package's; the first, at index "
            f"{first}: yours is {_entry(g[index])}, the package's {_entry(e[index])}")


def _entry(value) -> str:
    x = value.item()
    return repr(x) if isinstance(x, (bool, int)) else f"{x:.4g}"


def _describe(value) -> str:
    if torch.is_tensor(value):
        return f"a tensor of shape {list(value.shape)} ({str(value.dtype).replace('torch.', '')})"
    return repr(value) if len(repr(value)) < 40 else type(value).__name__


def _mismatch(got, expected, atol, rtol, what="the answer"):
    """What is wrong with `got`, in words that do not give `expected` away; None when it matches."""
    if torch.is_tensor(expected):
        if not torch.is_tensor(got):
            return f"{what} should be a tensor, not a {type(got).__name__}"
        if got.dim() != expected.dim():
            return f"{what} has {got.dim()} dimensions; the package's has {expected.dim()}"
        if got.shape != expected.shape:
            wrong = [d for d in range(got.dim()) if got.shape[d] != expected.shape[d]]
            return f"{what} has shape {list(got.shape)}: dimension {wrong[0]} has the wrong size"
        if got.dtype != expected.dtype and got.is_floating_point() and expected.is_floating_point():
            return f"{what} has dtype {got.dtype}, but it should keep the input's dtype"
        return _first_difference(got, expected, atol, rtol, what)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return f"{what} should be a {type(expected).__name__} of {len(expected)} items, not a {type(got).__name__}"
        if len(got) != len(expected):
            return f"{what} has too {'many' if len(got) > len(expected) else 'few'} items"
        for i, (g, e) in enumerate(zip(got, expected)):
            item = f"item {i + 1} of {what}" if what == "the answer" else what  # counted from 1
            problem = _mismatch(g, e, atol, rtol, what=item)
            if problem:
                return problem
        return None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if torch.is_tensor(got) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return f"{what} should be a number, not a {type(got).__name__}"
        if abs(got - expected) <= atol + rtol * abs(expected):
            return None
        ratio = got / expected if expected else float("inf")
        if expected and abs(ratio - round(ratio)) < 1e-6 and round(ratio) > 1:
            return f"{what} is {round(ratio)}× too large: something is counted more than once"
        if expected and got and abs(1 / ratio - round(1 / ratio)) < 1e-6 and round(1 / ratio) > 1:
            return f"{what} is {round(1 / ratio)}× too small: something is missing a factor"
        return f"{what} is too {'large' if got > expected else 'small'}"
    return None if got == expected else f"{what} does not match the package's ({_describe(got)} is not it)"
