"""What the appendix on training measures: the corpus funnel, the tokenizer's merges, the logs, and the memory and
compute a training run needs.

Pure functions return numbers or lists; the appendix only prints and draws them.
"""
import csv
import json
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import torch

from ..model import MiniMindForCausalLM
from ..training.data import clean_poem, is_regulated
from ..training.train import batches

GIB = 2 ** 30  # memory in GiB (MiB = 2**20 elsewhere in the book)

# Real items of npm chinese-poetry@2.0.1 (package/dist/..., MIT), copied verbatim, in the order the corpus build
# reads them (files by number, items by index): each shows one thing the cleaning does.
RAW_EXAMPLES = [
    {"source": "quantangshi/poet.tang.0.json", "index": 20, "author": "太宗皇帝", "title": "於北平作",
     "paragraphs": ["翠野駐戎軒，盧龍轉征斾。", "遙山麗如綺，長流縈似帶。", "海氣百重樓，巖松千丈蓋。"]},
    {"source": "quantangshi/poet.tang.0.json", "index": 272, "author": "上官昭容", "title": "駕幸新豐溫泉宮獻詩三首 一",
     "paragraphs": ["三冬季月景[龍]年，萬乘觀風出灞川。", "遙看電躍龍爲馬，回矚霜原玉作田。"]},
    {"source": "quantangshi/poet.tang.7000.json", "index": 917, "author": "孟浩然", "title": "春曉",
     "paragraphs": ["春眠不覺曉，處處聞啼鳥。", "夜來風雨聲，花落知多少。"]},
    {"source": "quantangshi/poet.tang.8000.json", "index": 118, "author": "李白", "title": "靜夜思",
     "paragraphs": ["牀前看月光，疑是地上霜。", "舉頭望山月，低頭思故鄉。"]},
    {"source": "quantangshi/poet.tang.8000.json", "index": 178, "author": "李白", "title": "秋浦歌十七首 十一",
     "paragraphs": ["邏人（一作「叉」）橫鳥道，江祖出魚梁。", "水急客舟（一作「行」）疾，山花拂面香。"]},
    {"source": "quantangshi/poet.tang.10000.json", "index": 26, "author": "朱斌", "title": "登樓",
     "paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"]},
    {"source": "quantangshi/poet.tang.13000.json", "index": 378, "author": "王之渙", "title": "登鸛雀樓",
     "paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"]},
    {"source": "quantangshi/poet.tang.50000.json", "index": 181, "author": "高適", "title": "閨情 四",
     "paragraphs": ["自處長信宮，每向孤燈泣。", "閨門鎮不開，夢從何處入。", "。"]},
    {"source": "quantangshi/poet.tang.50000.json", "index": 193, "author": "樂仲卿", "title": "詠螢",
     "paragraphs": ["□□光華淺，摶風羽翼徽。", "不能欺暗室，所以帶明飛。", "。"]},
]

# corpus_funnel over all 57,607 items of the package's quantangshi/poet.tang.*.json, in build order, with
# opencc t2s (tests/lab/test_training_lab.py recomputes it when data/package/dist is present):
#   npm pack chinese-poetry@2.0.1 && mkdir -p data && tar xzf chinese-poetry-2.0.1.tgz -C data
TANG_FUNNEL = {"raw items": 57607, "empty": 4, "damaged": 1339, "duplicate": 619, "not regulated": 17414,
               "kept": 38231, "kept, ending in 。。": 1633}


def classify_items(paragraph_lists, to_simplified) -> list[tuple[str, str | None]]:
    """(verdict, cleaned text) per item, in order, with the corpus build's rules: 'empty', 'damaged', 'duplicate'
    (same text as an earlier kept poem), 'not regulated', or 'kept'."""
    seen, out = set(), []
    for paragraphs in paragraph_lists:
        text = clean_poem(paragraphs, to_simplified)
        if text is None:
            verdict = "damaged" if "".join(paragraphs).strip() else "empty"
        elif text in seen:
            verdict = "duplicate"
        elif not is_regulated(text):
            verdict = "not regulated"
        else:
            verdict = "kept"
            seen.add(text)
        out.append((verdict, text))
    return out


def corpus_funnel(paragraph_lists, to_simplified) -> dict:
    """Counts of each verdict of classify_items, in the keys of TANG_FUNNEL."""
    items = list(paragraph_lists)
    verdicts = classify_items(items, to_simplified)
    counts = Counter(v for v, _ in verdicts)
    funnel = {"raw items": len(items)}
    funnel.update({k: counts.get(k, 0) for k in ("empty", "damaged", "duplicate", "not regulated", "kept")})
    funnel["kept, ending in 。。"] = sum(v == "kept" and t.endswith("。。") for v, t in verdicts)
    return funnel


def token_text(tokenizer, token: str) -> str:
    """A byte-level BPE token ('æĺİæľĪ') as the text it stands for ('明月'); '\ufffd' marks partial characters."""
    return tokenizer.convert_tokens_to_string([token])


def is_whole_text(text: str) -> bool:
    return "\ufffd" not in text


def vocab_kinds(tokenizer) -> Counter:
    """How many vocabulary entries are special tokens, pieces of a character (bytes), one character, or more."""
    special = set(tokenizer.all_special_tokens) | set(tokenizer.added_tokens_encoder)
    kinds = Counter()
    for token in tokenizer.get_vocab():
        if token in special:
            kinds["special"] += 1
            continue
        text = token_text(tokenizer, token)
        kinds["piece of a character" if not is_whole_text(text) else
              "one character" if len(text) == 1 else "several characters"] += 1
    return kinds


def merges(tokenizer_json) -> list[tuple[str, str]]:
    """The BPE merge list of a tokenizer.json, in the order training learned it (rank 0 first)."""
    raw = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in raw]


def word_merges(tokenizer, merge_list) -> list[tuple[int, str, str, str]]:
    """(rank, left, right, joined) for each merge that joins whole characters into a word, as text."""
    out = []
    for rank, (left, right) in enumerate(merge_list):
        a, b = token_text(tokenizer, left), token_text(tokenizer, right)
        if is_whole_text(a) and is_whole_text(b):
            out.append((rank, a, b, a + b))
    return out


def read_log(path) -> dict[str, list]:
    """train.py's train_log.csv as columns: step, lr, train_loss, aux_loss, tokens_per_s; val_step/val_loss only
    where an evaluation ran."""
    rows = list(csv.DictReader(open(path, encoding="utf-8")))
    log = {k: [float(r[k]) for r in rows] for k in ("lr", "train_loss", "aux_loss", "tokens_per_s")}
    log["step"] = [int(r["step"]) for r in rows]
    log["val_step"] = [int(r["step"]) for r in rows if r["val_loss"]]
    log["val_loss"] = [float(r["val_loss"]) for r in rows if r["val_loss"]]
    return log


def read_bench(path) -> dict[str, dict[str, list]]:
    """bench/results/<experiment>.csv as {variant: {'val_step': [...], 'val_loss': [...]}}."""
    out = {}
    for row in csv.DictReader(open(path, encoding="utf-8")):
        curve = out.setdefault(row["variant"], {"val_step": [], "val_loss": []})
        if row["val_loss"]:
            curve["val_step"].append(int(row["step"]))
            curve["val_loss"].append(float(row["val_loss"]))
    return out


def running_mean(values, window: int) -> list[float]:
    """Mean of the last `window` values at each step (fewer at the start): a smoothed training curve."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def wall_minutes(log, tokens_per_step: int) -> float:
    """Training time from the log: each row's tokens_per_s was measured over that step (evaluation included)."""
    return sum(tokens_per_step / t for t in log["tokens_per_s"]) / 60


def training_state_bytes(model, optimizer) -> dict[str, int]:
    """Bytes of the weights, their gradients and the optimizer's state tensors, as allocated now."""
    params = list(model.parameters())
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return {"weights": sum(p.numel() * p.element_size() for p in params),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
            "optimizer": sum(t.numel() * t.element_size() for t in state)}


def saved_tensors(config, batch: int, seq: int, bf16_autocast: bool = True, seed: int = 0) -> list[tuple]:
    """(shape, dtype, bytes) of each tensor autograd keeps for the backward pass of one training forward, measured
    on the CPU with uninitialised weights: each storage counted once (a view counts its whole storage), the
    parameters themselves not counted, in the order they were saved."""
    torch.manual_seed(seed)
    with torch.device("meta"):  # the weights' values do not matter here: skip initialising them
        model = MiniMindForCausalLM(config)
    model = model.to_empty(device="cpu")
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and storage.data_ptr() not in kept:
            kept[storage.data_ptr()] = (tuple(t.shape), t.dtype, storage.nbytes())
        return t

    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16_autocast else nullcontext():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(ids, labels=ids)
    return list(kept.values())


def saved_activation_bytes(config, batch: int, seq: int, bf16_autocast: bool = True, seed: int = 0) -> int:
    """Bytes autograd keeps for the backward pass of one training forward (see saved_tensors)."""
    return sum(b for *_, b in saved_tensors(config, batch, seq, bf16_autocast, seed))


def activation_model(config, seqs=(32, 64), bf16_autocast: bool = True) -> dict[str, float]:
    """Fit saved-activation bytes = layers * (per_layer_token * tokens + per_layer_fixed)
    + rest_token * tokens + rest_fixed, from four measurements (1 and 2 layers, two lengths, batch 1)."""
    m = {(layers, s): saved_activation_bytes(_with_layers(config, layers), 1, s, bf16_autocast)
         for layers in (1, 2) for s in seqs}
    (s0, s1), per = seqs, {}
    layer = {s: m[(2, s)] - m[(1, s)] for s in seqs}
    rest = {s: 2 * m[(1, s)] - m[(2, s)] for s in seqs}
    per["per_layer_token"] = (layer[s1] - layer[s0]) / (s1 - s0)
    per["per_layer_fixed"] = layer[s0] - per["per_layer_token"] * s0
    per["rest_token"] = (rest[s1] - rest[s0]) / (s1 - s0)
    per["rest_fixed"] = rest[s0] - per["rest_token"] * s0
    return per


def _with_layers(config, layers):
    from copy import deepcopy
    config = deepcopy(config)
    config.num_hidden_layers = layers
    return config


def predict_activation_bytes(fit: dict, layers: int, tokens: int) -> float:
    """Saved activations for `tokens` tokens per step (batch x seq) from an activation_model fit."""
    return layers * (fit["per_layer_token"] * tokens + fit["per_layer_fixed"]) + fit["rest_token"] * tokens \
        + fit["rest_fixed"]


class _EpochEnd(Exception):
    pass


def epoch_batches(n_rows: int, batch_size: int, seed: int, rank: int = 0, world: int = 1) -> list[list[int]]:
    """The row indices of each batch train.py's `batches` gives `rank` in its first epoch: the batches it yields
    before it draws the second epoch's permutation."""
    draws = 0
    randperm = torch.randperm

    def counting_randperm(*args, **kwargs):
        nonlocal draws
        draws += 1
        if draws == 2:
            raise _EpochEnd
        return randperm(*args, **kwargs)

    out = []
    stream = batches(torch.arange(n_rows).unsqueeze(1), batch_size, seed, rank, world)
    with mock.patch.object(torch, "randperm", counting_randperm):
        try:
            while True:
                out.append(next(stream).flatten().tolist())
        except _EpochEnd:
            return out


def steps_per_epoch(n_rows: int, batch_size: int, world: int = 1) -> int:
    """Optimizer steps in one epoch (on rank 0), counted from what `batches` yields."""
    return len(epoch_batches(n_rows, batch_size, seed=0, rank=0, world=world))


# Tokens of the Tang build's train.txt (37,414 poems, sha256 below) encoded with poetry-dense's tokenizer,
# each poem wrapped in <|im_start|> ... <|im_end|> as train.py packs it. Counted once on a rebuilt corpus;
# tests/lab/test_training_lab.py recounts it when data/poetry/train.txt is present. No poem is longer
# than 256 tokens, so packing into rows of seq_len keeps tokens // seq_len rows.
TANG_TRAIN_TOKENS = 1_544_516
TANG_TRAIN_SHA256 = "8f5aef5af7099f45103a4cee1a5bdb79dd65ffce19a80c166be5de4b06970fac"
# The same count for `data build ... --collections tang,song` (224,932 train poems, sha256 82c5145f...).
TANG_SONG_TRAIN_TOKENS = 9_872_825


def loss_drop(losses, boundary: int, width: int = 50) -> float:
    """Mean training loss of the `width` steps up to step `boundary` minus the mean of the `width`
    steps after it (`losses[i]` is the loss of step i + 1): the step down at an epoch start."""
    before, after = losses[boundary - width:boundary], losses[boundary:boundary + width]
    if len(before) < width or len(after) < width:
        raise ValueError(f"step {boundary}: needs {width} logged steps on each side")
    return sum(before) / width - sum(after) / width


def training_loop_figure(preset, vocab_size: int):
    """The appendix's mechanism diagram: one optimizer step of train.py, drawn from `preset`."""
    from .diagram import arrow, box, canvas, line, note
    b, s, v = preset.batch_size, preset.seq_len, vocab_size
    floor = preset.lr * preset.min_lr_ratio
    fig, ax = canvas(7, 3.6, title="One training step of train.py")
    w, h, top, low, xs = 22, 13, 31, 7, [1, 26, 51, 76]
    upper = [("batch\n" f"[{b}, {s}] token ids\nshuffled each epoch", "tensor"),
             ("forward\nMiniMind model\n" f"logits [{b},{s},{v}]", "attn"),
             ("shifted loss\npredict ids[:, 1:]\n" f"{b} × {s - 1} targets", "loss"),
             ("backward\nloss.backward()\nall gradients", "loss")]
    lower = [(xs[3], f"clip\ngradient norm\n≤ {preset.grad_clip}", "norm"),
             (xs[2], "AdamW step\nbetas 0.9, 0.95\n"
              f"decay {preset.weight_decay}: matrices", "ffn"),
             (xs[1], f"schedule\nlr of next step\nwarmup {preset.warmup},\n"
              f"cosine to {floor:.0e}", "router")]
    for x, (text, kind) in zip(xs, upper):
        box(ax, x, top, w, h, text, kind=kind)
    for x, text, kind in lower:
        box(ax, x, low, w, h, text, kind=kind)
    gap = 0.9  # keep arrow heads off the boxes' rounded edges
    for x in xs[:-1]:
        arrow(ax, (x + w + gap, top + h / 2), (x + 25 - gap, top + h / 2))
    arrow(ax, (xs[3] + w / 2, top - gap), (xs[3] + w / 2, low + h + gap))
    for x in xs[2:]:
        arrow(ax, (x - gap, low + h / 2), (x - 25 + w + gap, low + h / 2))
    corner = (xs[0] + w / 2, low + h / 2)
    line(ax, [(xs[1] - gap, low + h / 2), corner])
    arrow(ax, corner, (corner[0], top - gap))
    note(ax, xs[0], low - 1.5, f"next step ({preset.steps:,} in all)")
    note(ax, 50, 1.2, f"every {preset.eval_every} steps: held-out loss, log line, checkpoint",
         ha="center")
    return fig
