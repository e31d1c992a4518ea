"""Fixtures of the training tests: a small corpus and its tokenizer, a finished run."""
import shutil

import pytest

from minimind.training import train
from minimind.training.data import SAMPLE
from minimind.training.tokenizer import train_tokenizer
from cli_helpers import train_argv


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """train.txt = val.txt = the 300 sample poems, and a 500-token tokenizer in tok/."""
    root = tmp_path_factory.mktemp("corpus")
    shutil.copy(SAMPLE, root / "train.txt")
    shutil.copy(SAMPLE, root / "val.txt")
    train_tokenizer(str(SAMPLE), str(root / "tok"), vocab_size=500)
    return root


@pytest.fixture(scope="session")
def finished_run(corpus, tmp_path_factory):
    """The test preset with --steps 2 (a checkpoint at each step, final/ exported)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    train.main(train_argv(corpus, out, "--steps", 2, "--save-every", 1))
    return out


@pytest.fixture
def earlier_run(finished_run, tmp_path):
    """A copy of the finished run for one test to point commands at."""
    return shutil.copytree(finished_run, tmp_path / "run")
