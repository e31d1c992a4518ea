"""Training-side commands: one `error:` line (exit 2) per user error, nothing lost."""
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from minimind.training import data, evaluate, tokenizer, train
from minimind.training.data import SAMPLE
from cli_helpers import deny_writes, error_line, files, train_argv

PUBLISH = Path(__file__).parents[2] / "tools" / "publish_checkpoint.py"
POEMS = SAMPLE.read_text(encoding="utf-8")


def load_publish():
    spec = importlib.util.spec_from_file_location("publish_checkpoint", PUBLISH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- train: an earlier run is never overwritten ---------------------------------------


def test_second_run_without_resume_keeps_the_earlier_one(corpus, earlier_run, capsys):
    before = files(earlier_run)
    line = error_line(capsys, train.main, train_argv(corpus, earlier_run, "--steps", 2))
    assert line == (f"error: {earlier_run}: holds an earlier run (checkpoint.pt, "
                    "train_log.csv, loss_curve.png, final); continue it with --resume, "
                    "or choose another --out")
    assert files(earlier_run) == before


@pytest.mark.parametrize("extra, options, message", [
    (["--steps", 2], {"preset": "tiny-dense"},
     "{ckpt}: written by --preset test, not tiny-dense; resume with --preset test"),
    (["--steps", 2], {"tokenizer": "poetry-dense"},
     "--tokenizer poetry-dense: not the tokenizer {ckpt} was trained with; resume with "
     "--tokenizer {tok}, or choose another --out"),
    (["--steps", 2], {}, "{ckpt}: the run is at step 2 of 2, finished"),
    ([], {}, "{ckpt}: its run has --steps 2, not the preset's 20; pass --steps 2"),
    (["--steps", 4, "--stop-at", 1], {},
     "--stop-at 1: {ckpt} is already at step 2; pass a later --stop-at"),
])
def test_resume_refuses_what_is_not_the_same_run(corpus, earlier_run, capsys, extra,
                                                 options, message):
    before = files(earlier_run)
    argv = train_argv(corpus, earlier_run, "--resume", *extra, **options)
    line = error_line(capsys, train.main, argv)
    ckpt = earlier_run / "checkpoint.pt"
    message = message.format(ckpt=ckpt, tok=corpus / "tok")
    assert line.startswith("error: " + message), line
    assert files(earlier_run) == before


def test_resume_of_an_older_checkpoint_checks_the_shapes(corpus, earlier_run, capsys):
    ckpt = earlier_run / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=False)
    del state["run"]  # as saved before checkpoints recorded preset and tokenizer
    torch.save(state, ckpt)
    before = files(earlier_run)
    argv = train_argv(corpus, earlier_run, "--resume", "--steps", 2,
                      preset="tiny-dense")
    line = error_line(capsys, train.main, argv)
    expected = (f"error: {ckpt}: does not fit --preset tiny-dense (checkpoint does not "
                "match the model config: missing keys (")
    assert line.startswith(expected), line
    assert files(earlier_run) == before


def test_resume_refuses_a_damaged_checkpoint(corpus, earlier_run, capsys):
    ckpt = earlier_run / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])  # cut short, as by a full disk
    argv = train_argv(corpus, earlier_run, "--resume", "--steps", 4)
    line = error_line(capsys, train.main, argv)
    assert line.startswith(f"error: {ckpt}: cannot be read (")


def test_resume_without_a_checkpoint_keeps_the_log(corpus, earlier_run, capsys):
    (earlier_run / "checkpoint.pt").unlink()  # stopped before its first checkpoint
    before = files(earlier_run)
    argv = train_argv(corpus, earlier_run, "--resume", "--steps", 2)
    assert error_line(capsys, train.main, argv) == (
        f"error: {earlier_run}: holds an earlier run but no checkpoint.pt to --resume "
        "from (train_log.csv, loss_curve.png, final); choose another --out")
    assert files(earlier_run) == before


# --- train: unusable data, tokenizer, folder or flag, refused before any work ---------


def write_data(folder: Path, train_text, val_text=None) -> Path:
    folder.mkdir()
    for name, text in (("train.txt", train_text), ("val.txt", val_text)):
        if isinstance(text, bytes):
            (folder / name).write_bytes(text)
        elif text is not None:
            (folder / name).write_text(text, encoding="utf-8")
    return folder


EMPTY = "{data}/train.txt: holds no poems (it is empty or only whitespace)"


@pytest.mark.parametrize("train_text, val_text, message", [
    ("", POEMS, EMPTY),
    (" \n\t\n\u3000\n", POEMS, EMPTY),
    ("\n".join(POEMS.splitlines()[:3]), POEMS, "{data}/train.txt: too short: it packs "
     "into 3 rows of 64 tokens, and one batch of the preset's 4 rows needs at least 4"),
    (POEMS, "床前明月光", "{data}/val.txt: too short: it packs into 0 rows of 64 tokens"),
    (POEMS, None, "--data {data}: no val.txt there; build it with python -m"),
    (b"\xff\xfe poems", POEMS, "{data}/train.txt: not UTF-8 text"),
])
def test_unusable_data_is_refused_at_once(corpus, tmp_path, capsys, train_text,
                                          val_text, message):
    folder = write_data(tmp_path / "data", train_text, val_text)
    argv = train_argv(folder, tmp_path / "out", tokenizer=corpus / "tok")
    line = error_line(capsys, train.main, argv)
    assert line.startswith("error: " + message.format(data=folder)), line
    assert not (tmp_path / "out").exists()


def broken_tokenizer(corpus, tmp_path, name, text) -> Path:
    folder = shutil.copytree(corpus / "tok", tmp_path / "tok")
    (folder / name).write_text(text)
    return folder


def word_level_tokenizer(corpus, tmp_path) -> Path:
    """A tokenizer that loads, without MiniMind's special tokens."""
    from tokenizers import Tokenizer, models
    folder = tmp_path / "words"
    folder.mkdir()
    vocab = models.WordLevel({"[UNK]": 0, "床": 1}, unk_token="[UNK]")
    Tokenizer(vocab).save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("make, message", [
    (lambda c, t: broken_tokenizer(c, t, "tokenizer.json", '{"model": '),
     "{tok}/tokenizer.json: not valid JSON ("),
    (lambda c, t: broken_tokenizer(c, t, "tokenizer_config.json", ""),
     "{tok}/tokenizer_config.json: not valid JSON ("),
    (lambda c, t: broken_tokenizer(c, t, "tokenizer.json", "{}"),
     "{tok}/tokenizer.json: not a tokenizer"),
    (word_level_tokenizer, "--tokenizer {tok}: has no <|im_start|> token"),
    (lambda c, t: t / "none", "--tokenizer {tok}: no checkpoint folder"),
])
def test_unusable_tokenizer_is_named(corpus, tmp_path, capsys, make, message):
    folder = make(corpus, tmp_path)
    argv = train_argv(corpus, tmp_path / "out", tokenizer=folder)
    line = error_line(capsys, train.main, argv)
    assert line.startswith("error: " + message.format(tok=folder)), line
    assert not (tmp_path / "out").exists()


def test_out_that_is_a_file_is_refused(corpus, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    line = error_line(capsys, train.main, train_argv(corpus, notes))
    assert line == (f"error: --out {notes}: is a file, not a folder; "
                    "choose another --out")
    line = error_line(capsys, train.main, train_argv(corpus, notes / "run"))
    assert line == (f"error: --out {notes / 'run'}: {notes} is a file, not a folder; "
                    "choose another --out")
    assert notes.read_text() == "mine"


def test_out_in_a_folder_without_write_permission(corpus, tmp_path, capsys,
                                                  monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    deny_writes(monkeypatch, locked)
    line = error_line(capsys, train.main, train_argv(corpus, locked / "run"))
    assert line == (f"error: --out {locked / 'run'}: cannot write in {locked} "
                    "(permission denied); choose another --out")


@pytest.mark.parametrize("argv, message", [
    (["--preset", "nope"], "--preset: invalid choice: 'nope' (choose from "
     "'minimind-3', 'test', 'tiny-dense', 'tiny-moe')"),
    (["--device", "gpu"], "--device: 'gpu' is not a device torch knows; use cuda, mps"),
    (["--steps", "0"], "--steps 0: must be a positive number of steps"),
    (["--stop-at", "x"], "--stop-at: invalid int value: 'x'"),
])
def test_bad_flags_are_one_line(corpus, tmp_path, capsys, argv, message):
    line = error_line(capsys, train.main, train_argv(corpus, tmp_path / "out", *argv))
    assert line.startswith("error: " + message), line


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_missing_device_is_named(corpus, tmp_path, capsys):
    argv = train_argv(corpus, tmp_path / "out", "--device", "cuda")
    line = error_line(capsys, train.main, argv)
    assert line.startswith("error: --device: 'cuda' is not available on this machine")


# --- data, tokenizer, evaluate, publish -----------------------------------------------


def package(tmp_path, poems) -> Path:
    """A dist/ folder with one collection file: `poems` as JSON, or a str as it is."""
    (tmp_path / "dist" / "quantangshi").mkdir(parents=True)
    text = poems if isinstance(poems, str) else json.dumps(poems, ensure_ascii=False)
    (tmp_path / "dist" / "quantangshi" / "poet.tang.0.json").write_text(text)
    return tmp_path / "dist"


TWO = [{"paragraphs": ["牀前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"]},
       {"paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"]}]


def test_data_build_keeps_an_earlier_build(tmp_path, capsys):
    pytest.importorskip("opencc")
    dist, out = package(tmp_path, TWO), tmp_path / "built"
    data.main(["build", str(dist), str(out), "--val-percent", "50"])
    before = files(out)
    assert error_line(capsys, data.main, ["build", dist, out]) == (
        f"error: {out}: holds an earlier build (train.txt, val.txt, meta.json); choose "
        "another out folder (a build never overwrites one)")
    assert files(out) == before


FILE = "{dist}/quantangshi/poet.tang.0.json"


@pytest.mark.parametrize("poems, argv, message", [
    (TWO, ["--collections", "tang,han"], "--collections: unknown collection 'han'"),
    (TWO, ["--val-percent", "0"], "--val-percent: 0 is not from 1 to 99"),
    ("[", [], FILE + ": not valid JSON ("),
    ({"poems": 1}, [], FILE + ": not a list of poems"),
    ([{"paragraphs": ["□□□□□，疑是地上霜。"]}], [], "{dist}: no poem kept out of 1 items"),
    (TWO, ["--val-percent", "1"], "--val-percent 1: none of the 2 poems kept went"),
])
def test_data_build_refuses_unusable_input(tmp_path, capsys, poems, argv, message):
    pytest.importorskip("opencc")
    dist = package(tmp_path, poems)
    line = error_line(capsys, data.main, ["build", dist, tmp_path / "out", *argv])
    assert line.startswith("error: " + message.format(dist=dist)), line
    assert not (tmp_path / "out").exists()


def test_data_build_names_a_dist_folder_without_the_package(tmp_path, capsys):
    line = error_line(capsys, data.main, ["build", tmp_path, tmp_path / "out"])
    assert line.startswith(f"error: {tmp_path}: no quantangshi/poet.tang.*.json there")


def test_tokenizer_keeps_an_earlier_tokenizer(corpus, capsys):
    tok = corpus / "tok"
    before = files(tok)
    argv = ["train", SAMPLE, tok, "--vocab-size", 400]
    assert error_line(capsys, tokenizer.main, argv) == (
        f"error: {tok}: holds a tokenizer (tokenizer.json, tokenizer_config.json); "
        "choose another out folder (a run trained with it needs it unchanged)")
    assert files(tok) == before


@pytest.mark.parametrize("text, argv, message", [
    ("{tmp}/none.txt", [], "{tmp}/none.txt: not found"),
    ("{tmp}/blank.txt", [], "{tmp}/blank.txt: holds no poems (it is empty or only"),
    (str(SAMPLE), ["--vocab-size", "100"], "--vocab-size 100: below 292"),
    (str(SAMPLE), ["--val-file", "{tmp}/none.txt"], "{tmp}/none.txt: not found"),
])
def test_tokenizer_refuses_unusable_input(tmp_path, capsys, text, argv, message):
    (tmp_path / "blank.txt").write_text("\n  \n")
    argv = ["train", text, tmp_path / "tok", *argv]
    argv = [str(a).format(tmp=tmp_path) for a in argv]
    line = error_line(capsys, tokenizer.main, argv)
    assert line.startswith("error: " + message.format(tmp=tmp_path)), line
    assert not (tmp_path / "tok").exists()


def test_evaluate_never_overwrites_its_json(finished_run, tmp_path, capsys):
    kept = tmp_path / "eval.json"
    kept.write_text("{}")
    line = error_line(capsys, evaluate.main, [finished_run / "final", "--json", kept])
    assert line == (f"error: --json {kept}: exists; choose another file "
                    "(none is overwritten)")
    assert kept.read_text() == "{}"


@pytest.mark.parametrize("argv, message", [
    (["--json", "{tmp}/no/e.json"], "--json {tmp}/no/e.json: there is no folder"),
    (["--samples", "0"], "--samples: 0 is not a positive number"),
    (["--val-file", "{tmp}/blank.txt"], "{tmp}/blank.txt: holds no poems"),
    (["--val-file", "{tmp}/short.txt"], "{tmp}/short.txt: too short: it packs into 0"),
])
def test_evaluate_refuses_unusable_input(finished_run, tmp_path, capsys, argv, message):
    (tmp_path / "blank.txt").write_text(" \n")
    (tmp_path / "short.txt").write_text("床前明月光\n")
    argv = [finished_run / "final", *[a.format(tmp=tmp_path) for a in argv]]
    line = error_line(capsys, evaluate.main, argv)
    assert line.startswith("error: " + message.format(tmp=tmp_path)), line


def test_evaluate_names_a_damaged_config(finished_run, tmp_path, capsys):
    folder = shutil.copytree(finished_run / "final", tmp_path / "final")
    (folder / "config.json").write_text('{"hidden_size": 64,')
    line = error_line(capsys, evaluate.main, [folder])
    assert line.startswith(f"error: {folder / 'config.json'}: not valid JSON (")


def test_publish_keeps_a_published_checkpoint(finished_run, tmp_path, capsys,
                                              monkeypatch):
    publish = load_publish()
    monkeypatch.setattr(publish, "SHIPPED", tmp_path / "checkpoints")
    shipped = tmp_path / "checkpoints" / "poems"
    shutil.copytree(finished_run / "final", shipped)
    before = files(shipped)
    assert error_line(capsys, publish.main, [finished_run / "final", "poems"]) == (
        f"error: {shipped}: already published; choose another name, or remove it "
        "yourself first (git rm -r) to replace it")
    assert files(shipped) == before


@pytest.mark.parametrize("argv, message", [
    (["{run}", "../elsewhere"], "../elsewhere: not a plain folder name"),
    (["{tmp}/none", "poems"], "{tmp}/none: not a folder"),
    (["{tmp}/partial", "poems"], "{tmp}/partial: has no train_log.csv"),
    (["{run}", "poems", "--val-file", "{tmp}/blank.txt"], "{tmp}/blank.txt: holds no"),
])
def test_publish_refuses_before_copying(finished_run, tmp_path, capsys, monkeypatch,
                                        argv, message):
    publish = load_publish()
    monkeypatch.setattr(publish, "SHIPPED", tmp_path / "checkpoints")
    (tmp_path / "blank.txt").write_text("\n")
    partial = shutil.copytree(finished_run / "final", tmp_path / "partial")
    (partial / "train_log.csv").unlink()
    argv = [a.format(run=finished_run / "final", tmp=tmp_path) for a in argv]
    line = error_line(capsys, publish.main, argv)
    assert line.startswith("error: " + message.format(tmp=tmp_path)), line
    assert not (tmp_path / "checkpoints").exists()
