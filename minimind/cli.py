"""One line for every user error: `error: WHERE: PROBLEM` on stderr, exit status 2.

WHERE is the file, folder or flag at fault; PROBLEM says what is wrong and what to
do. The export, the training commands (data, tokenizer, train, evaluate) and
tools/publish_checkpoint.py share this, and none of them overwrites earlier work.
"""
import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError

from .checkpoint import CheckpointError, checkpoint_folder, load_pretrained
from .checkpoint import load_tokenizer


class UserError(Exception):
    """A mistake in a command's arguments or files; the message names it first."""


def fail(message, status: int = 2):
    """Print `error: message` as one line on stderr and exit (2: argparse's status)."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    sys.exit(status)


class Parser(argparse.ArgumentParser):
    """argparse, its own errors (unknown flag, bad choice, no value) in one line."""

    def error(self, message):
        fail(message.removeprefix("argument ") + f" (see {self.prog} --help)")


@contextmanager
def user_errors():
    """Around a command's work: UserError, CheckpointError, OSError -> `fail`."""
    try:
        yield
    except (UserError, CheckpointError) as error:
        fail(error)
    except OSError as error:  # e.g. a full disk, or a file removed meanwhile
        if error.filename is None:
            raise
        fail(f"{error.filename}: {error.strerror}")


def output_folder(path, flag: str = "") -> Path:
    """`path` as a folder this user can create or write in; UserError if not."""
    path = Path(path)
    where, choose = f"{flag} {path}".strip(), f"choose another {flag or 'folder'}"
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        what = "" if existing == path else f"{existing} "
        raise UserError(f"{where}: {what}is a file, not a folder; {choose}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{where}: cannot write in {existing} (permission denied); "
                        f"{choose}")
    return path


def refuse_earlier_work(folder, names, what: str, advice: str):
    """UserError if `folder` holds any of `names`: earlier work not to overwrite."""
    found = [name for name in names if (Path(folder) / name).exists()]
    if found:
        raise UserError(f"{folder}: holds {what} ({', '.join(found)}); {advice}")


def new_file(path, flag: str) -> Path:
    """A file written when a command ends: refused now if it exists or can't be."""
    path = Path(path)
    if path.exists():
        raise UserError(f"{flag} {path}: exists; choose another file "
                        "(none is overwritten)")
    if not path.parent.is_dir():
        raise UserError(f"{flag} {path}: there is no folder {path.parent}; "
                        "create it first")
    output_folder(path.parent, flag)
    return path


def source_folder(src, flag: str = "") -> Path:
    """checkpoint_folder(src), its error as a UserError naming `flag` and `src`."""
    try:
        return checkpoint_folder(src)
    except CheckpointError as error:
        raise UserError(f"{flag} {src}: {error}".strip()) from None


def named(error, folder: Path) -> UserError:
    """A CheckpointError as a UserError whose message starts with the path at fault."""
    text = str(error)
    return UserError(text if text.startswith(str(folder)) else f"{folder}: {text}")


def read_json(path):
    """The JSON in `path`; UserError naming the file when it is damaged."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error}); the file is damaged: "
                        "restore it or create it again") from None


def model_from(src, flag: str = ""):
    """load_pretrained(src); a damaged config, weights or checksum is a UserError."""
    folder = source_folder(src, flag)
    if (folder / "config.json").is_file():
        read_json(folder / "config.json")
    try:
        return load_pretrained(src)
    except CheckpointError as error:
        raise named(error, folder) from None
    except ValueError as error:  # MiniMindConfig's own checks of the sizes
        raise UserError(f"{folder / 'config.json'}: {error}") from None
    except SafetensorError as error:
        raise UserError(f"{folder / 'model.safetensors'}: cannot be read ({error}); "
                        "the file is damaged: restore it or save it again") from None


def tokenizer_from(src, flag: str = ""):
    """load_tokenizer(src), damaged tokenizer files as a UserError naming the file."""
    folder = source_folder(src, flag)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            read_json(folder / name)
    try:
        return load_tokenizer(src)
    except CheckpointError as error:
        raise named(error, folder) from None
    except Exception as error:  # valid JSON, not a tokenizer: tokenizers' own exception
        kind = type(error).__name__
        raise UserError(f"{folder / 'tokenizer.json'}: not a tokenizer ({kind}: "
                        f"{error}); create it again with python -m "
                        "minimind.training.tokenizer train") from None
