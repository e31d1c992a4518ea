"""Shared by the command-line tests: one `error:` line per user error, nothing lost."""
import os
from pathlib import Path

import pytest


def error_line(capsys, main, argv) -> str:
    """main(argv) must exit with status 2 after one `error: ...` line on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and err[-1] == "\n", err
    return err.rstrip("\n")


def files(folder) -> dict:
    """Every file under `folder` with its bytes: compare before and after a refusal."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def deny_writes(monkeypatch, folder: Path):
    """Make `folder` read-only; as root (whom modes do not stop) also in os.access."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
            Path(path).resolve() != folder.resolve() and real(path, mode, **kw)))


def train_argv(corpus, out, *extra, preset="test", tokenizer=None) -> list[str]:
    """The training command's arguments: `corpus` (train/val.txt, tok/) into `out`."""
    tokenizer = tokenizer or corpus / "tok"
    return ["--preset", preset, "--data", str(corpus), "--tokenizer", str(tokenizer),
            "--out", str(out), "--device", "cpu", "--no-progress", *map(str, extra)]
