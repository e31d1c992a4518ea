import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minimind.training.data import SAMPLE
from minimind.training.tokenizer import train_tokenizer
from minimind.training.train import learning_rate, PRESETS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    shutil.copy(SAMPLE, root / "train.txt")
    shutil.copy(SAMPLE, root / "val.txt")
    train_tokenizer(str(SAMPLE), str(root / "tok"), vocab_size=500)
    return root


def run_train(corpus, out, *extra, launcher=(sys.executable, "-m")):
    cmd = [*launcher, "minimind.training.train", "--preset", "test", "--data", str(corpus), "--tokenizer",
           str(corpus / "tok"), "--out", str(out), "--no-progress", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    return list(csv.DictReader(open(out / "train_log.csv")))


def test_learning_rate_schedule():
    p = PRESETS["tiny-dense"]
    assert learning_rate(0, p) == p.lr / p.warmup and learning_rate(p.warmup, p) == pytest.approx(p.lr)
    assert learning_rate(p.steps, p) == pytest.approx(p.lr * p.min_lr_ratio)


def test_twenty_steps_lower_the_loss_and_export(corpus, tmp_path):
    log = run_train(corpus, tmp_path)
    assert len(log) == 20
    assert float(log[-1]["val_loss"]) < float(log[9]["val_loss"]) < 6.3  # ln(500) = 6.2 at the start
    assert float(log[-1]["train_loss"]) < float(log[0]["train_loss"]) - 0.5
    for name in ["config.json", "model.safetensors", "tokenizer.json", "training.json", "loss_curve.png"]:
        assert (tmp_path / "final" / name).exists()


def test_resume_continues_the_same_run(corpus, tmp_path):
    full = run_train(corpus, tmp_path / "full")
    run_train(corpus, tmp_path / "part", "--stop-at", "10")  # as if interrupted at step 10
    resumed = run_train(corpus, tmp_path / "part", "--resume")
    assert [r["train_loss"] for r in resumed] == [r["train_loss"] for r in full]


@pytest.mark.skipif(shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
                    reason="torchrun not installed")
def test_two_process_data_parallel(corpus, tmp_path):
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    log = run_train(corpus, tmp_path, launcher=(torchrun, "--nproc_per_node", "2", "--master_port", "29517", "-m"))
    assert len(log) == 20 and float(log[-1]["train_loss"]) < float(log[0]["train_loss"])
