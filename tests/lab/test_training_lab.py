"""minimind/lab/training_lab.py: the numbers behind the appendix on training."""
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch

import minimind
from minimind.lab.training_lab import (RAW_EXAMPLES, TANG_FUNNEL, activation_model, classify_items, corpus_funnel,
                                       merges, predict_activation_bytes, epoch_batches, read_bench, read_log,
                                       running_mean, saved_activation_bytes, saved_tensors, steps_per_epoch, token_text,
                                       training_state_bytes, vocab_kinds, wall_minutes, word_merges)
from minimind.training.train import param_groups
from model_helpers import tiny_config, tiny_model

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "minimind" / "checkpoints" / "poetry-dense"
DIST = ROOT / "data" / "package" / "dist"


def identity(text):
    return text


def test_classify_items_follows_the_build_rules_in_order():
    items = [["牀前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"],
             ["牀前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"],
             ["□□□□□，疑是地上霜。"], [], ["長短句，參差不齊也。"],
             ["白日（一作「月」）依山盡，黃河入海流。", "欲窮千里目，更上一層樓。", "。"]]
    verdicts = [v for v, _ in classify_items(items, identity)]
    assert verdicts == ["kept", "duplicate", "damaged", "empty", "not regulated", "kept"]
    assert classify_items(items, identity)[-1][1] == "白日依山盡，黃河入海流。欲窮千里目，更上一層樓。。"
    funnel = corpus_funnel(iter(items), identity)
    assert funnel == {"raw items": 6, "empty": 1, "damaged": 1, "duplicate": 1, "not regulated": 1, "kept": 2,
                      "kept, ending in 。。": 1}
    assert list(funnel) == list(TANG_FUNNEL)


def test_raw_examples_cover_every_verdict_and_the_funnel_adds_up():
    opencc = pytest.importorskip("opencc")
    verdicts = classify_items([e["paragraphs"] for e in RAW_EXAMPLES], opencc.OpenCC("t2s").convert)
    assert {v for v, _ in verdicts} == {"kept", "duplicate", "damaged", "not regulated"}
    assert dict(zip([e["title"] for e in RAW_EXAMPLES], [t for _, t in verdicts]))["靜夜思"] == \
        "床前看月光，疑是地上霜。举头望山月，低头思故乡。"
    f = TANG_FUNNEL
    assert f["raw items"] == sum(f[k] for k in ("empty", "damaged", "duplicate", "not regulated", "kept"))


def package_dist(tmp_path) -> Path:
    """data/package/dist as the README's corpus step makes it, else the same npm package fetched into tmp_path."""
    if DIST.is_dir():
        return DIST
    if shutil.which("npm") is None:
        pytest.skip("needs the npm package chinese-poetry@2.0.1 (data/package/dist) or npm to fetch it")
    subprocess.run(["npm", "pack", "chinese-poetry@2.0.1", "--silent"], cwd=tmp_path, check=True,
                   stdout=subprocess.DEVNULL)
    with tarfile.open(tmp_path / "chinese-poetry-2.0.1.tgz") as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "package" / "dist"


@pytest.mark.slow
def test_tang_funnel_recomputed_from_the_package(tmp_path):
    opencc = pytest.importorskip("opencc")
    from minimind.training.data import read_collection
    dist = package_dist(tmp_path)
    assert corpus_funnel(read_collection(dist, "tang"), opencc.OpenCC("t2s").convert) == TANG_FUNNEL


def test_tokenizer_merges_and_vocabulary_kinds():
    tok = minimind.load_tokenizer("poetry-dense")
    merge_list = merges(CHECKPOINT / "tokenizer.json")
    assert len(merge_list) + 256 + 36 == len(tok) == 6400
    assert token_text(tok, tok.tokenize("明月")[0]) == "明月"
    words = word_merges(tok, merge_list)
    assert "明月" in [w for *_, w in words] and all(len(w) >= 2 for *_, w in words)
    kinds = vocab_kinds(tok)
    assert sum(kinds.values()) == len(tok) and kinds["special"] == 36 and kinds["piece of a character"] > 0


def test_read_log_and_wall_minutes(tmp_path):
    path = tmp_path / "train_log.csv"
    path.write_text("step,lr,train_loss,aux_loss,val_loss,tokens_per_s\n1,0.1,8.0,0.0,,100\n2,0.2,7.0,0.0,7.5,200\n")
    log = read_log(path)
    assert log["step"] == [1, 2] and log["train_loss"] == [8.0, 7.0] and log["val_step"] == [2]
    # exact: 600 / 100 + 600 / 200 = 9.0 exactly, then the same division by 60
    assert log["val_loss"] == [7.5] and wall_minutes(log, 600) == (6 + 3) / 60
    shipped = read_log(CHECKPOINT / "train_log.csv")
    assert len(shipped["step"]) == 3000 and shipped["val_step"][-1] == 3000


def test_read_bench_keeps_only_evaluations():
    curves = read_bench(ROOT / "bench" / "results" / "weight_decay_1d.csv")
    assert set(curves) == {"decay_matrices_only", "decay_all"}
    # exact: float() of the committed CSV text, rounded
    assert curves["decay_all"]["val_step"][-1] == 200 and round(curves["decay_all"]["val_loss"][-1], 3) == 6.343


def test_running_mean():
    assert running_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]  # exact: sums of small integers


def test_training_state_bytes_is_sixteen_bytes_per_parameter_for_fp32_adamw():
    model = tiny_model().train()
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    ids = torch.randint(0, 320, (2, 8))
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    n = sum(p.numel() for p in model.parameters())
    assert training_state_bytes(model, optimizer) == {"weights": 4 * n, "gradients": 4 * n, "optimizer": 8 * n}


def test_saved_activations_grow_linearly_and_the_fit_predicts_them():
    config = tiny_config(num_hidden_layers=1)
    a, b = (saved_activation_bytes(config, 1, s, bf16_autocast=False) for s in (16, 32))
    assert 0 < a < b
    fit = activation_model(tiny_config(), seqs=(16, 32), bf16_autocast=False)
    assert fit["per_layer_token"] > 0
    measured = saved_activation_bytes(tiny_config(num_hidden_layers=3), 2, 24, bf16_autocast=False)
    # not rounding (integer bytes): a fit linear in tokens and layers, off by the few tensors that are not (0.08%)
    assert predict_activation_bytes(fit, 3, 48) == pytest.approx(measured, rel=0.02)


def test_epoch_batches_split_an_epoch_between_ranks():
    r0, r1 = epoch_batches(10, 2, 0, 0, 2), epoch_batches(10, 2, 0, 1, 2)
    flat0, flat1 = sum(r0, []), sum(r1, [])
    assert len(r0) == len(r1) == 2 and not set(flat0) & set(flat1)  # disjoint; each rank drops its tail row
    assert len(set(flat0) | set(flat1)) == 8


def test_epoch_batches_stops_at_the_epoch_boundary_on_every_rank():
    for world in (1, 2, 3):
        for rank in range(world):
            got = epoch_batches(23, 3, 5, rank, world)
            share = len(range(rank, 23, world))
            assert len(got) == share // 3 and len({i for b in got for i in b}) == 3 * (share // 3)


def test_steps_per_epoch_counts_what_batches_yields():
    assert steps_per_epoch(10, 4) == 2            # the tail of 2 rows is dropped
    assert steps_per_epoch(10, 4, world=2) == 1   # each rank sees 5 rows
    assert steps_per_epoch(8, 4) == 2 and steps_per_epoch(3, 4) == 0


def test_saved_tensors_lists_what_autocast_keeps():
    config = tiny_config(num_hidden_layers=1)
    fp32 = saved_tensors(config, 1, 16, bf16_autocast=False)
    bf16 = saved_tensors(config, 1, 16, bf16_autocast=True)
    assert {d for _, d, _ in fp32} <= {torch.float32, torch.int64}
    assert torch.bfloat16 in {d for _, d, _ in bf16}
    assert saved_activation_bytes(config, 1, 16, bf16_autocast=False) == sum(b for *_, b in fp32)


def test_loss_drop_compares_the_steps_before_and_after_a_boundary():
    from minimind.lab.training_lab import loss_drop
    losses = [5.0] * 4 + [4.0] * 4  # steps 1-4 at 5, steps 5-8 at 4: the drop after step 4
    assert loss_drop(losses, 4, width=2) == 1.0  # exact: means of equal small numbers
    assert loss_drop(losses, 6, width=2) == 0.0
    with pytest.raises(ValueError):
        loss_drop(losses, 7, width=2)


def test_training_loop_figure_draws_the_preset():
    import matplotlib
    matplotlib.use("Agg")
    from minimind.lab.training_lab import training_loop_figure
    from minimind.training.train import PRESETS
    fig = training_loop_figure(PRESETS["tiny-dense"], 6400)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "[8, 256] token ids" in texts and "AdamW" in texts and "3,000 in all" in texts
    assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 9


@pytest.mark.slow
def test_tang_train_tokens_recounted_from_the_corpus(tmp_path):
    """The appendix's 754 steps per epoch: the Tang split's tokens, from data/poetry (the appendix's
    corpus step) or from the npm package built here the same way."""
    import hashlib
    from minimind.lab.training_lab import TANG_TRAIN_SHA256, TANG_TRAIN_TOKENS
    from minimind.training.data import build, encode_poems, load_poems
    path = ROOT / "data" / "poetry" / "train.txt"
    if not path.is_file():
        build(str(package_dist(tmp_path)), str(tmp_path / "poetry"))
        path = tmp_path / "poetry" / "train.txt"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == TANG_TRAIN_SHA256
    tok = minimind.load_tokenizer("poetry-dense")
    sequences = encode_poems(tok, load_poems(path), 256)
    assert max(map(len, sequences)) < 256  # nothing truncated: rows = tokens // seq_len
    assert sum(map(len, sequences)) == TANG_TRAIN_TOKENS


def test_exercise_four_reference_is_train_step_and_names_each_mistake():
    from minimind.lab import training_lab as lab
    for optimizer in lab.STEP_LRS:
        expected = lab.package_weights_after_steps(optimizer)
        assert torch.equal(expected, lab.package_weights_after_steps(optimizer))  # deterministic
        for step_fn, message in lab.STEP_MISTAKES:  # each mistake moves the weights, and is named
            got = lab.weights_after_steps(step_fn, optimizer)
            assert not torch.allclose(got, expected, atol=1e-6, rtol=1e-5)
            assert lab.train_step_miss(got, expected) == message


def test_heldout_turn_finds_the_lowest_evaluation_and_the_rise():
    from minimind.lab.training_lab import heldout_turn
    log = {"val_step": [10, 20, 30], "val_loss": [7.5, 7.0, 7.25]}
    assert heldout_turn(log) == (20, 0.25)
    assert heldout_turn({"val_step": [10, 20], "val_loss": [7.5, 7.0]}) == (20, 0.0)


@pytest.mark.slow
def test_activation_fit_predicts_the_real_row_of_minimind_3():
    # the appendix holds out 3 layers x 128 tokens (cheap); this is the row it extrapolates to,
    # 8 layers x 512 tokens: one forward of several seconds. Linear in layers and tokens, so the
    # fit should be exact up to allocator rounding: 0.1% leaves room for a different CPU kernel.
    config = minimind.MiniMindConfig(vocab_size=6400)
    fit = activation_model(config, seqs=(32, 64))
    measured = saved_activation_bytes(config, 1, 512)
    assert abs(measured / predict_activation_bytes(fit, 8, 512) - 1) < 1e-3
