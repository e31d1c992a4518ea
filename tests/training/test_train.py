import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minimind.training import data, evaluate, tokenizer, train
from minimind.training.data import SAMPLE
from minimind.training.train import PRESETS, build_parser, learning_rate, param_groups, preset_for
from cli_helpers import error_line, files, train_argv
from model_helpers import tiny_model


def run_train(corpus, out, *extra, launcher=(sys.executable, "-m")):
    cmd = [*launcher, "minimind.training.train", "--preset", "test", "--data", str(corpus), "--tokenizer",
           str(corpus / "tok"), "--out", str(out), "--no-progress", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    return list(csv.DictReader(open(out / "train_log.csv")))


def test_learning_rate_schedule():
    p = PRESETS["tiny-dense"]
    assert learning_rate(0, p) == p.lr / p.warmup  # the same two operations: exact
    # approx (relative 1e-6): the cosine branch rounds in float64
    assert learning_rate(p.warmup, p) == pytest.approx(p.lr)
    assert learning_rate(p.steps, p) == pytest.approx(p.lr * p.min_lr_ratio)


def test_no_weight_decay_on_norm_gains():
    model = tiny_model(use_moe=True)
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.dim() == 1 for p in no_decay["params"]) and all(p.dim() == 2 for p in decay["params"])
    assert {names[id(p)].rsplit(".", 2)[-2] for p in no_decay["params"]} == {
        "input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "norm"}
    assert sum(map(len, (decay["params"], no_decay["params"]))) == len(list(model.parameters()))  # tie counted once


def test_command_line_overrides_the_preset():
    args = build_parser().parse_args(["--preset", "test", "--data", "d", "--tokenizer", "t", "--out", "o",
                                      "--steps", "7", "--save-every", "3"])
    assert preset_for(args).steps == 7 and preset_for(args).save_every == 3 and preset_for(args).lr == 3e-3


SHIPPED_TOK = ["--tokenizer", "poetry-dense", "--out", "x"]


@pytest.mark.parametrize("module, argv, where", [
    (evaluate, ["nope"], "nope"),
    (train, ["--preset", "test", "--data", "nope", *SHIPPED_TOK], "--data nope"),
    (train, ["--preset", "test", "--data", ".", "--tokenizer", "nope", "--out", "x"],
     "--tokenizer nope"),
    (train, ["--preset", "test", "--data", ".", *SHIPPED_TOK, "--steps", "0"],
     "--steps 0"),
    (data, ["build", "nope", "x"], "nope"),
    (tokenizer, ["train", "nope", "x"], "nope"),
])
def test_user_errors_exit_with_one_line(module, argv, where, tmp_path, monkeypatch,
                                        capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copy(SAMPLE, tmp_path / "train.txt"), shutil.copy(SAMPLE, tmp_path / "val.txt")
    assert error_line(capsys, module.main, argv).startswith(f"error: {where}: ")


@pytest.mark.slow
def test_cli_error_is_one_line_on_stderr_not_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "minimind.training.evaluate", "nope"], capture_output=True,
                            text=True, cwd=tmp_path, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: nope: no checkpoint folder 'nope'; shipped checkpoints: "
        "['poetry-dense', 'poetry-moe'] (minimind never downloads: fetch a hub model first, e.g. with "
        "huggingface_hub.snapshot_download, and pass its folder)"]


@pytest.mark.slow
def test_second_run_as_a_process_keeps_the_first(corpus, earlier_run):
    before = files(earlier_run)
    argv = train_argv(corpus, earlier_run, "--steps", 2)
    result = subprocess.run([sys.executable, "-m", "minimind.training.train", *argv],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: {earlier_run}: holds an earlier run (checkpoint.pt, train_log.csv, "
        "loss_curve.png, final); continue it with --resume, or choose another --out"]
    assert files(earlier_run) == before


@pytest.mark.slow
def test_twenty_steps_lower_the_loss_and_export(corpus, tmp_path):
    log = run_train(corpus, tmp_path)
    assert len(log) == 20
    # margins, not values: losses move with the CPU's rounding; ln(500) = 6.2 at first
    assert float(log[-1]["val_loss"]) < float(log[9]["val_loss"]) < 6.3
    assert float(log[-1]["train_loss"]) < float(log[0]["train_loss"]) - 0.5  # gain > .5
    for name in ["config.json", "model.safetensors", "tokenizer.json", "training.json", "loss_curve.png"]:
        assert (tmp_path / "final" / name).exists()


@pytest.mark.slow
def test_resume_continues_the_same_run(corpus, tmp_path):
    full = run_train(corpus, tmp_path / "full")
    run_train(corpus, tmp_path / "part", "--stop-at", "10")  # as if interrupted at step 10
    resumed = run_train(corpus, tmp_path / "part", "--resume")
    # exact: the same operations on the same batches in the same order, on one thread
    assert [r["train_loss"] for r in resumed] == [r["train_loss"] for r in full]


@pytest.mark.skipif(shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
                    reason="torchrun not installed")
@pytest.mark.slow
def test_two_process_data_parallel(corpus, tmp_path):
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    log = run_train(corpus, tmp_path, launcher=(torchrun, "--nproc_per_node", "2", "--master_port", "29517", "-m"))
    assert len(log) == 20
    # an ordering, not a value: two processes reduce gradients in their own order
    assert float(log[-1]["train_loss"]) < float(log[0]["train_loss"])
