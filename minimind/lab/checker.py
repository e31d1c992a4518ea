"""The exercise checker: a reader's function against the package's, with feedback in plain words.

Every chapter's exercises end in a `check(...)` cell (guide: `tools/exercises.py`). On a miss it raises
`NotYet`, whose message says which case failed and how, in the reader's terms (the first entry that
differs, counted from 1; never `nan`, never the expected answer in graded mode), followed by the next of
the exercise's hints: the first failure gets the first hint (a nudge), later failures the later ones
(closer to the answer). A case may carry its own hint, shown when that case is the one that fails.

It is also fair enough to give marks with (nbgrader, the classroom edition):
- each function gets its own copy of a case's tensors, so an in-place answer cannot corrupt them;
- warnings and anything written to stderr while the answer runs are caught (nbgrader zeroes a cell
  that writes to stderr) and reported as one line of stdout;
- `forbid=` names package functions the exercise asks the reader to write themselves: passing one (or
  an alias) is refused, and while the answer runs they are unavailable (calling one fails the case);
  `without=` makes further functions unavailable, e.g. `without=["torch.softmax"]`;
- in graded mode (`MINIMIND_GRADED=1`) numeric misses no longer say too large / too small and cases
  marked `hidden=True` are described without their arguments.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import traceback
import warnings

import torch

_failures: dict[str, int] = {}  # per exercise name: misses so far this session (which hint comes next)


class NotYet(AssertionError):
    """A check that did not pass: IPython shows the message alone, without a traceback."""

    def _render_traceback_(self):
        return str(self).splitlines()


class Passed:
    """What a passing check returns: true (so `assert check(...)` works) and shown as nothing, so a
    check on a cell's last line adds no `True` under its ✓ line."""

    def __bool__(self):
        return True

    def __repr__(self):
        return "True"

    def _ipython_display_(self):
        pass


class Case:
    """One set of arguments for `check`, with an optional hint for when this case fails.

    `hidden=True`: in graded mode the feedback does not describe the arguments (a case the student's
    notebook does not list, e.g. inside nbgrader's `### BEGIN HIDDEN TESTS` region).
    """

    def __init__(self, *args, hint: str | None = None, hidden: bool = False):
        self.args, self.hint, self.hidden = args, hint, hidden


class _Unavailable(Exception):
    """Raised when an answer calls a function its exercise asks it not to use."""


def graded() -> bool:
    """True when feedback must not help a student search for the answer (nbgrader marking)."""
    return os.environ.get("MINIMIND_GRADED", "") not in ("", "0")


def check(answer_fn, reference_fn, cases, atol=1e-5, rtol=1e-4, name=None, hints=(), hint=None,
          forbid=(), without=(), explain=None) -> Passed:
    """Compare `answer_fn` with the package's `reference_fn` on each case; passes, or raises NotYet.

    `cases`: tuples of arguments, or `Case(...)`s. `hints`: from nudge to nearly the answer, one shown
    per miss (`hint=` is a single hint). `forbid`: package functions the reader must not hand in or
    call; `without`: dotted names (`"torch.softmax"`) the answer must not call. `explain(got,
    expected)`: the miss in the exercise's own terms ("row 1: you keep 4 tokens, the package 5"), or
    None to fall back on the first differing entry; or (message, hint) to give the hint that fits
    this mistake instead of the next one in `hints`.
    """
    name = name or getattr(answer_fn, "__name__", "your function")
    hints = list(hints) + ([hint] if hint else [])
    unavailable = [*forbid, *without]
    refused = _refused_alias(answer_fn, forbid)
    if refused:
        _fail(name, f"{name} is the package's own `{refused}`: this exercise asks you to write it.", hints)
    cases = [c if isinstance(c, Case) else Case(*(c if isinstance(c, tuple) else (c,))) for c in cases]
    notes = []
    names = _parameter_names(reference_fn)
    for i, case in enumerate(cases, 1):
        where = _where(i, case, name, names)
        with _caught([]):
            expected = reference_fn(*_fresh(case.args))
        try:
            with _caught(notes), _made_unavailable(unavailable, answer_fn):
                got = answer_fn(*_fresh(case.args))  # a copy: an in-place answer cannot touch the cases
        except NotImplementedError:
            got = ...
        except _Unavailable as error:  # not about this case: no case hint
            _fail(name, f"{where}: {error}", hints)
        except Exception as error:  # the reader's code: report it in one line, don't crash the notebook
            line = traceback.extract_tb(error.__traceback__)[-1].lineno
            _fail(name, f"{where}: {name} raised {type(error).__name__}: {error} (line {line})", hints, case)
        if _unanswered(got):
            _fail(name, f"{name} is not written yet: replace the `...` or `None` with your answer.", [])
        problem = _mismatch(got, expected, atol, rtol)
        chosen = None
        if problem and explain is not None and not graded():
            explained = _explained(explain, got, expected)
            if isinstance(explained, tuple):  # (message, the hint that fits this mistake)
                explained, chosen = explained
            problem = explained or problem
        if problem:
            _fail(name, f"{where}: {problem}", hints, case, notes, chosen)
    _failures.pop(name, None)
    every = f" on all {len(cases)} cases" if len(cases) > 1 else ""
    print(f"✓ {name} matches the package{every}." + "".join(f"\n  note: {n}" for n in notes[:3]))
    return Passed()


def _explained(explain, got, expected) -> str | None:
    try:
        return explain(got, expected)
    except Exception:  # a shape the explanation did not foresee: the generic message is still right
        return None


def _parameter_names(fn) -> list[str] | None:
    """The reference's parameter names, to describe a case's arguments by name (None: unnamed)."""
    import inspect
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None
    return [p.name for p in params]


def _where(i, case, name, names=None) -> str:
    if case.hidden and graded():
        return f"case {i} (one the notebook does not list)"
    if not case.args:
        return name
    if names and len(names) >= len(case.args):
        return f"case {i} ({', '.join(_named(n, a) for n, a in zip(names, case.args))})"
    return f"case {i} ({', '.join(_describe(a) for a in case.args)})"


def _named(name, value) -> str:
    if torch.is_tensor(value):
        return f"{name} {list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    return f"{name}={_describe(value)}"


def _fail(name, message, hints, case=None, notes=(), chosen=None):
    """Raise NotYet with the message, the failing case's hint and the next of the exercise's hints
    (or the hint `explain` chose for this very mistake)."""
    lines = ["✗ " + message]
    lines += [f"  note: {n}" for n in list(notes)[:3]]
    if case is not None and case.hint and not (case.hidden and graded()):
        lines.append(f"  About this case: {case.hint}")
    if chosen:
        lines.append(f"  Hint: {chosen}")
    elif hints:
        shown = _failures.get(name, 0)
        _failures[name] = shown + 1
        k = min(shown, len(hints) - 1)
        lines.append(f"  Hint {k + 1} of {len(hints)}: {hints[k]}" if len(hints) > 1 else f"  Hint: {hints[0]}")
    raise NotYet("\n".join(lines))


# --- fairness: stderr, refused aliases, unavailable functions ----------------------------------------------

@contextlib.contextmanager
def _caught(notes: list):
    """Run with warnings and stderr captured; each becomes a one-line note (stdout), never stderr."""
    err = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                note = f"your function warned: {w.category.__name__}: {str(w.message).splitlines()[0]}"
                if note not in notes:
                    notes.append(note)
            if err.getvalue().strip():
                notes.append("your function wrote to stderr: " + err.getvalue().strip().splitlines()[0])


def _target(item):
    """(owner, attribute name, object) for a function or a dotted name like "torch.softmax"."""
    if isinstance(item, str):
        parts = item.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:-1]:
                owner = getattr(owner, attr)
            return owner, parts[-1], getattr(owner, parts[-1])
        raise ValueError(f"cannot find {item!r}: give a dotted name such as 'torch.softmax'")
    owner = importlib.import_module(item.__module__)
    for attr in item.__qualname__.split(".")[:-1]:  # a method: patch it on its class
        if attr == "<locals>":
            break
        owner = getattr(owner, attr)
    return owner, item.__name__, item


def _refused_alias(answer_fn, forbid) -> str | None:
    """The name of the forbidden function `answer_fn` is (itself, a partial of it, or a wrapper of it)."""
    inner = answer_fn.func if isinstance(answer_fn, functools.partial) else answer_fn
    inner = getattr(inner, "__wrapped__", inner)
    for item in forbid:
        _, attr, obj = _target(item)
        if inner is obj or getattr(inner, "__code__", 0) is getattr(obj, "__code__", 1):
            return attr
    return None


@contextlib.contextmanager
def _made_unavailable(items, answer_fn):
    """While the answer runs, each item (in its module and in the answer's globals) raises instead."""
    patches = []
    for item in items:
        owner, attr, obj = _target(item)
        label = item if isinstance(item, str) else attr

        def refuse(*args, _label=label, **kwargs):
            raise _Unavailable(f"this exercise asks you not to use `{_label}`, and your function called it")

        patches.append((owner, attr, obj, refuse))
        scope = getattr(answer_fn, "__globals__", {})
        patches += [(scope, key, obj, refuse) for key, value in list(scope.items()) if value is obj]
    try:
        for owner, attr, _, refuse in patches:
            _assign(owner, attr, refuse)
        yield
    finally:
        for owner, attr, obj, _ in reversed(patches):
            _assign(owner, attr, obj)


def _assign(owner, attr, value):
    if isinstance(owner, dict):
        owner[attr] = value
    else:
        setattr(owner, attr, value)


# --- comparing an answer with the package's, in words that do not give the answer away ---------------------

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
    index = tuple(int(i) for i in wrong.nonzero()[0])
    count = int(wrong.sum())
    share = ("one entry differs" if count == 1
             else f"{count} of {wrong.numel()} entries differ") + " from the package's"
    if not exact:  # masked and infinite entries: say so in words, never as a difference
        share += _non_finite(g, e)
    where = (f"{what} has the right shape, but {share}; the first, at index "
             f"{list(index)} (Python's, from 0)")
    if graded():
        return f"{where}: yours is {_entry(g[index])}"
    return f"{where}: yours is {_entry(g[index])}, the package's {_entry(e[index])}"


def _non_finite(g, e) -> str:
    """'; 2 are masked (-inf) in the package's but kept in yours' and the like, or ''."""
    def counted(n, text):
        return f"; {n} {'is' if n == 1 else 'are'} {text}" if n else ""
    masked = g.isneginf(), e.isneginf()
    other = g.isposinf() | g.isnan(), e.isposinf() | e.isnan()
    return (counted(int((masked[1] & ~masked[0]).sum()),
                    "masked (-inf) in the package's but kept in yours")
            + counted(int((masked[0] & ~masked[1]).sum()),
                      "masked (-inf) in yours but kept in the package's")
            + counted(int((other[0] & ~other[1]).sum()),
                      "inf or NaN in yours but finite in the package's"))


def _entry(value) -> str:
    x = value.item()
    return repr(x) if isinstance(x, (bool, int)) else f"{x:.4g}"


def _describe(value, width: int = 60) -> str:
    """A case's argument in a few words: a tensor's shape and dtype, a dict's or config's settings."""
    if torch.is_tensor(value):
        return f"a tensor of shape {list(value.shape)} ({str(value.dtype).replace('torch.', '')})"
    if hasattr(value, "to_dict") and hasattr(value, "model_type"):  # a config: its non-defaults
        defaults = type(value)().to_dict()
        value = {k: v for k, v in value.to_dict().items()
                 if defaults.get(k) != v and k not in ("transformers_version", "architectures")}
        name = "a config"
    else:
        name = type(value).__name__
    if isinstance(value, dict):
        settings = ", ".join(f"{k}={v!r}" for k, v in value.items())
        text = f"{name} with {settings}" if settings else f"{name} with the defaults"
        return text if len(text) <= width else text[:width - 1] + "…"
    return repr(value) if len(repr(value)) <= width else name


def _mismatch(got, expected, atol, rtol, what="the answer"):
    """What is wrong with `got`, in words that do not give `expected` away; None when it matches."""
    if torch.is_tensor(expected):
        return _tensor_mismatch(got, expected, atol, rtol, what)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            kind = type(expected).__name__
            return f"{what} should be a {kind} of {len(expected)} items, not a {type(got).__name__}"
        if len(got) != len(expected):
            return f"{what} has too {'many' if len(got) > len(expected) else 'few'} items"
        for i, (g, e) in enumerate(zip(got, expected)):
            item = f"item {i + 1} of {what}" if what == "the answer" else what  # counted from 1
            problem = _mismatch(g, e, atol, rtol, what=item)
            if problem:
                return problem
        return None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return _number_mismatch(got, expected, atol, rtol, what)
    return None if got == expected else f"{what} does not match the package's ({_describe(got)} is not it)"


def _number(x) -> str:
    """1,474,560 for a count, 0.5472 for a float: never 1.47456e+06 for an integer."""
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:.6g}"


def _tensor_mismatch(got, expected, atol, rtol, what):
    if not torch.is_tensor(got):
        return f"{what} should be a tensor, not a {type(got).__name__}"
    if got.dim() != expected.dim():
        return f"{what} has {got.dim()} dimensions; the package's has {expected.dim()}"
    if got.shape != expected.shape:
        wrong = [d for d in range(got.dim()) if got.shape[d] != expected.shape[d]]
        return f"{what} has shape {list(got.shape)}: dimension {wrong[0]} has the wrong size"
    if got.dtype != expected.dtype and got.is_floating_point() and expected.is_floating_point():
        return (f"{what} has dtype {str(got.dtype).replace('torch.', '')}; the package's is "
                f"{str(expected.dtype).replace('torch.', '')}")
    if expected.dtype == torch.bool and got.dtype != torch.bool:  # a mask: exactly
        return f"{what} has dtype {got.dtype}; the package's is boolean (True/False)"
    if expected.dim() == 0 and expected.is_floating_point():  # a loss, a norm: one number
        if not torch.isfinite(got).all() and torch.isfinite(expected).all():
            return f"{what} is {got.item()}, where the package's is a finite number"
        return _number_mismatch(got, expected.item(), atol, rtol, what)
    return _first_difference(got, expected, atol, rtol, what)


def _number_mismatch(got, expected, atol, rtol, what):
    if torch.is_tensor(got) and got.numel() == 1:
        got = got.item()
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return f"{what} should be a number, not a {type(got).__name__}"
    if abs(got - expected) <= atol + rtol * abs(expected):
        return None
    if graded():  # no direction: a numeric answer must not be found by bisection
        return f"{what} ({_number(got)}) is not the package's value"
    ratio = got / expected if expected else float("inf")
    yours = f"{what} ({_number(got)})"  # the reader's own value, never the package's
    if expected and abs(ratio - round(ratio)) < 1e-6 and round(ratio) > 1:
        n = round(ratio)
        return f"{yours} is {n}× too large: look for a factor of {n} too many"
    if expected and got and abs(1 / ratio - round(1 / ratio)) < 1e-6 and round(1 / ratio) > 1:
        n = round(1 / ratio)
        return f"{yours} is {n}× too small: look for a missing factor of {n}"
    side = "large" if got > expected else "small"
    gap = abs(got - expected) / abs(expected) if expected else float("inf")
    if gap < 0.05:  # close: say how close, or "50" against "49.94" reads like a match
        return f"{yours} is {gap:.2%} too {side}: close, but not the package's value"
    return f"{yours} is too {side}"
