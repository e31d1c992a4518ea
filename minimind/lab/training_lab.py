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


# --- the appendix's exercises: references, explanations and hints (kept out of the check cells) -----------

def package_lr(step, peak, warmup, total, min_ratio) -> float:
    """Exercise 1's reference: train.py's `learning_rate` for a preset with these numbers."""
    from ..training.train import Preset, learning_rate
    preset = Preset(model={}, steps=total, lr=peak, warmup=warmup, min_lr_ratio=min_ratio)
    return learning_rate(step, preset)


EX1_HINTS = [
    "Two phases: compare your rate with the package's at step 0, at the last warmup "
    "step and at the last step. Which phase is off?",
    "Warmup counts from step + 1 (step 0 is not zero); after warmup, progress is "
    "clamped at 1, so steps past the end stay at the floor.",
    "After warmup the rate is the floor plus the cosine's share of the distance from the "
    "floor to the peak; the cosine's argument runs from 0 to pi as progress goes 0 to 1.",
]


def package_training_state_bytes(config) -> int:
    """Exercise 2's reference: bytes of a real model's fp32 training state after one AdamW step."""
    from ..training.train import param_groups
    torch.manual_seed(0)
    model = MiniMindForCausalLM(config)
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    ids = torch.randint(0, config.vocab_size, (1, 8))
    out = model(ids, labels=ids)
    (out.loss + out.aux_loss).backward()
    optimizer.step()
    return sum(training_state_bytes(model, optimizer).values())


def state_miss(got, expected):
    """Exercise 2: the miss in bytes per parameter, never the answer itself."""
    if not isinstance(got, (int, float)):
        return None
    per_parameter = got / (expected / 16)
    if per_parameter == round(per_parameter):
        return f"you count {per_parameter:.0f} bytes per parameter"
    return "your parameter count is not the model's: is a tied matrix counted twice?"


EX2_HINTS = [
    "Besides the weight itself, what does training keep for every parameter until the "
    "next step? Name all of it before you count bytes.",
    "The gradient, and AdamW's two moments (a mean and a mean of squares), all "
    "float32 like the weight. Count parameters with model.parameters().",
    "Count the float32 tensors of the same shape as a weight that exist after "
    "optimizer.step(); a tied matrix is one parameter, listed once.",
]


def epoch_miss(got, expected):
    """Exercise 3: how many steps too many or too few."""
    if isinstance(got, (int, float)) and got > expected:
        return f"you count {got - expected} step(s) more than batches yields"
    if isinstance(got, (int, float)) and got < expected:
        return f"you count {expected - got} step(s) fewer than batches yields"
    return None


EX3_HINTS = [
    "Count rank 0's rows first, then the whole batches that fit in them.",
    "Rank 0 takes rows 0, world, 2·world, …: how many is that when n_rows does not "
    "divide by world? And an incomplete last batch is dropped.",
    "Rank 0's share rounds up (it gets the extra row of an odd split); the number of "
    "batches rounds down.",
]


# Exercise 4: one optimizer step, checked on a small MiniMind (64 wide, 2 layers, 320 tokens)
# over three steps with a changing learning rate. The optimizers start at lr 0.5 so that a
# step that never sets the rate shows at once.
STEP_LRS = {"AdamW": (3e-3, 2e-3, 1e-3), "SGD": (0.3, 0.2, 0.1)}


def step_setup(optimizer: str, seed: int = 0):
    """(model, optimizer, batches [3, 4, 16]) for Exercise 4, the same on every call."""
    from ..config import MiniMindConfig
    from ..training.train import param_groups
    torch.manual_seed(seed)
    config = MiniMindConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=320)
    model = MiniMindForCausalLM(config)
    groups = param_groups(model, 0.1)
    if optimizer == "AdamW":
        opt = torch.optim.AdamW(groups, lr=0.5, betas=(0.9, 0.95))
    else:
        opt = torch.optim.SGD(groups, lr=0.5, momentum=0.9)
    return model, opt, torch.randint(0, config.vocab_size, (3, 4, 16))


def weights_after_steps(step_fn, optimizer: str) -> torch.Tensor:
    """All weights, flattened, after three `step_fn(model, opt, batch, lr)` calls (Exercise 4)."""
    model, opt, steps = step_setup(optimizer)
    model.train()
    for batch, lr in zip(steps, STEP_LRS[optimizer]):
        step_fn(model, opt, batch, lr)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def package_train_step(model, opt, batch, lr):
    """train.py's own `train_step` on a bare model and optimizer (one process, CPU, clip 1.0)."""
    from types import SimpleNamespace
    from ..training.train import train_step
    run = SimpleNamespace(model=model, ddp_model=model, optimizer=opt,
                          device=torch.device("cpu"), preset=SimpleNamespace(grad_clip=1.0))
    return train_step(run, batch, lr)


def package_weights_after_steps(optimizer: str) -> torch.Tensor:
    """Exercise 4's reference: the weights after three of train.py's steps."""
    return weights_after_steps(package_train_step, optimizer)


def _set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


def _step_without_zero_grad(model, opt, batch, lr):
    _set_lr(opt, lr)
    model(batch, labels=batch).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def _step_clip_after(model, opt, batch, lr):
    _set_lr(opt, lr)
    opt.zero_grad()
    model(batch, labels=batch).loss.backward()
    opt.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def _step_without_lr(model, opt, batch, lr):
    opt.zero_grad()
    model(batch, labels=batch).loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


STEP_MISTAKES = [
    (_step_without_zero_grad, "your weights are those of a step that never zeroes the "
     "gradients: backward adds to .grad, so each step used the sum of all earlier gradients"),
    (_step_clip_after, "your weights are those of a step that clips after opt.step(): the "
     "update used the unclipped gradients (clipping must come between backward and step)"),
    (_step_without_lr, "your weights are those of a step that never sets the learning rate: "
     "the optimizer kept the rate it was built with (0.5), not the schedule's lr"),
]


def train_step_miss(got, expected):
    """Exercise 4: name the common mistake whose weights `got` are, or None."""
    if not torch.is_tensor(got) or got.shape != expected.shape:
        return None
    for optimizer in STEP_LRS:
        if not torch.equal(package_weights_after_steps(optimizer), expected):
            continue
        start = torch.cat([p.detach().flatten() for p in step_setup(optimizer)[0].parameters()])
        if torch.equal(got, start):
            return "your step did not change the weights: is opt.step() called?"
        for step_fn, message in STEP_MISTAKES:
            if torch.allclose(got, weights_after_steps(step_fn, optimizer), atol=1e-6, rtol=1e-5):
                return message
    return None


EX4_HINTS = [
    "A step has six parts: set the rate, clear old gradients, compute the loss, backward, "
    "clip, step. Which is missing or out of order?",
    "The learning rate is a key of every dict in opt.param_groups; clearing is "
    "opt.zero_grad(); clipping is torch.nn.utils.clip_grad_norm_ on model.parameters().",
    "Order: rates, zero_grad, loss = model(batch, labels=batch).loss, backward, clip to "
    "1.0, opt.step(). Return nothing in particular.",
]


def heldout_turn(log) -> tuple[int, float]:
    """Exercise 5's reference: (step of the lowest held-out loss, how far the last held-out loss
    is above it in nats) from a train_log read by `read_log`; None for anything else (a stub)."""
    if not isinstance(log, dict):
        return None
    best_loss, best_step = min(zip(log["val_loss"], log["val_step"]))
    return best_step, round(log["val_loss"][-1] - best_loss, 4)


def turn_miss(got, expected):
    """Exercise 5: which of the two numbers is off, in the exercise's words."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return "heldout_turn should return two numbers: (step, rise)"
    if got[0] != expected[0]:
        return (f"your step ({got[0]}) is not the evaluation with the lowest held-out loss "
                "(val_step and val_loss are parallel lists)")
    if got[1] != expected[1]:
        return ("your step is right, but the rise is not the last held-out loss minus the "
                "lowest one, in nats, rounded to 4 digits")
    return None


EX5_HINTS = [
    "read_log gives the evaluations as two lists of the same length: val_step and "
    "val_loss. Which evaluation is the lowest, and where is the last one?",
    "Pair them up with zip, take the lowest loss with its step, then compare the last "
    "held-out loss with that lowest one.",
    "min over zip(val_loss, val_step) gives the lowest loss and its step together; the "
    "rise is the last val_loss minus that loss, rounded to 4 digits.",
]


def _cases():
    from .checker import Case
    return Case


EX1_CASES = [_cases()(0, 3e-3, 100, 3000, 0.1, hint="step 0: the warmup counts from step + 1"),
             (99, 3e-3, 100, 3000, 0.1), (100, 3e-3, 100, 3000, 0.1),
             (1550, 3e-3, 100, 3000, 0.1), (2999, 3e-3, 100, 3000, 0.1),
             _cases()(5000, 3e-3, 100, 3000, 0.1, hint="past the last step: the floor"),
             (0, 1e-3, 500, 20000, 0.1), (12345, 1e-3, 500, 20000, 0.1),
             (10, 1e-2, 20, 200, 0.0)]


def ex2_cases():
    """Exercise 2's configs: tied, untied (with its own hint) and MoE."""
    from ..config import MiniMindConfig
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=320)
    return [(MiniMindConfig(**small),),
            _cases()(MiniMindConfig(**small, tie_word_embeddings=False),
                     hint="untied: the head is a second matrix"),
            (MiniMindConfig(**small, use_moe=True, num_experts=4, moe_intermediate_size=96),)]


EX3_CASES = [(6055, 8, 1), (270, 4, 1),
             _cases()(10, 4, 1, hint="10 rows in batches of 4: the tail"),
             (11, 2, 2), _cases()(9, 4, 2, hint="9 rows on 2 ranks: rank 0 gets the extra row"),
             _cases()(3, 4, 1, hint="fewer rows than one batch"), (6055, 8, 4)]

EX4_CASES = [("AdamW",), _cases()("SGD", hint="plain SGD with momentum: a gradient's size "
                                         "shows directly in the step")]
