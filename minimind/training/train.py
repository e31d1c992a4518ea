"""Train MiniMind on the poetry corpus (the appendix on training).

    python -m minimind.training.train --preset tiny-dense --data data/poetry --tokenizer runs/tokenizer --out runs/poetry-dense
    torchrun --nproc_per_node 2 -m minimind.training.train ...        # data parallel (gloo on CPU, nccl on CUDA)

AdamW with warmup and cosine decay (weight decay on matrices only, not on norm gains or biases), gradient
clipping, bf16 autocast on a GPU that supports it (fp32 on CPU), a checkpoint every `--save-every` steps
(`--resume` continues from it), a CSV loss log and a loss-curve PNG. `--tokenizer` takes a folder or the name
of a shipped checkpoint (`poetry-dense`).

The parts, in the order a step uses them: `setup` (process group, data, model, optimizer, resume),
`train_step` (forward, backward, clip, AdamW), `held_out_loss` (evaluation), `save_checkpoint` /
`load_checkpoint`, `log_step`; `train` is the loop that calls them.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import pickle
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.distributed as dist

from ..checkpoint import CheckpointError, check_state_dict
from ..cli import Parser, UserError, output_folder, refuse_earlier_work, tokenizer_from
from ..cli import user_errors
from ..config import MiniMindConfig
from ..loss import mean_loss
from ..model import MiniMindForCausalLM
from .data import encode_poems, enough_rows, load_poems, pack
from .device import available, pick_device, pick_dtype


@dataclass
class Preset:
    model: dict
    steps: int
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    save_every: int = 250


TINY = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=2048)
PRESETS = {
    "tiny-dense": Preset(model=TINY, steps=3000),
    # Experts 768 wide (not the default 832) keep the bf16 checkpoint under 25 MB.
    "tiny-moe": Preset(model={**TINY, "use_moe": True, "moe_intermediate_size": 768}, steps=3000),
    "minimind-3": Preset(model={}, steps=20000, batch_size=32, seq_len=512, lr=1e-3, warmup=500, eval_every=1000,
                         save_every=1000),
    "test": Preset(model=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              max_position_embeddings=512), steps=20, batch_size=4, seq_len=64, warmup=2,
                   eval_every=10, save_every=10),
}


RUN_FILES = ("checkpoint.pt", "train_log.csv", "loss_curve.png", "final")  # in OUT/
SPECIAL = ("<|im_start|>", "<|im_end|>")  # each poem is wrapped in them


def learning_rate(step: int, p: Preset) -> float:
    """Linear warmup to p.lr, then cosine decay to p.lr * p.min_lr_ratio at p.steps."""
    if step < p.warmup:
        return p.lr * (step + 1) / p.warmup
    progress = min(1.0, (step - p.warmup) / max(1, p.steps - p.warmup))
    return p.lr * (p.min_lr_ratio + (1 - p.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def seed_everything(seed: int):
    random.seed(seed)
    torch.manual_seed(seed)


def batches(rows: torch.Tensor, batch_size: int, seed: int, rank=0, world=1):
    """Endless stream of [batch_size, seq_len] batches; each epoch reshuffled, each rank its own share."""
    epoch = 0
    while True:
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed + epoch))[rank::world]
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield rows[order[i:i + batch_size]]
        epoch += 1


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on matrices (2-D and up), none on 1-D gains and biases."""
    params = [p for p in model.parameters() if p.requires_grad]  # a tied weight is listed once
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


@dataclass
class Run:
    """Everything `setup` prepares for the loop."""
    preset: Preset
    model: MiniMindForCausalLM
    ddp_model: torch.nn.Module  # the model itself, or its DistributedDataParallel wrapper
    optimizer: torch.optim.Optimizer
    tokenizer: object
    train_rows: torch.Tensor  # [N, seq_len] token ids
    val_rows: torch.Tensor
    device: torch.device
    rank: int
    world: int
    out: Path
    start_step: int = 0
    identity: dict = field(default_factory=dict)  # preset, steps, tokenizer: saved
    earlier: dict = field(default_factory=dict)  # the resumed checkpoint's identity

    @property
    def log_path(self):
        return self.out / "train_log.csv"

    @property
    def checkpoint_path(self):
        return self.out / "checkpoint.pt"


def preset_for(args) -> Preset:
    """The named preset with the command line's --steps and --save-every applied."""
    overrides = {"steps": args.steps, "save_every": args.save_every}
    return replace(PRESETS[args.preset], **{k: v for k, v in overrides.items() if v is not None})


def packed_rows(tokenizer, data_dir, split: str, seq_len: int) -> torch.Tensor:
    """DATA/split.txt as token rows [N, seq_len], each poem wrapped in <|im_start|> ... <|im_end|>."""
    return pack(encode_poems(tokenizer, load_poems(Path(data_dir, f"{split}.txt")), seq_len), seq_len)


def setup(args) -> Run:
    """Join the process group, seed, read and pack the data, build the model and its optimizer, resume."""
    check_args(args)
    preset = preset_for(args)
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = pick_device(args.device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    seed_everything(args.seed)
    tokenizer = training_tokenizer(args.tokenizer)
    train_rows, val_rows = data_rows(tokenizer, args.data, preset, world)
    model = MiniMindForCausalLM(MiniMindConfig(vocab_size=len(tokenizer), **preset.model)).to(device)
    optimizer = torch.optim.AdamW(param_groups(model, preset.weight_decay), lr=preset.lr, betas=(0.9, 0.95))
    ddp_model = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    run = Run(preset, model, ddp_model, optimizer, tokenizer, train_rows, val_rows, device, rank, world,
              Path(args.out), identity=identity(args, preset, tokenizer))
    run.out.mkdir(parents=True, exist_ok=True)
    if args.resume and run.checkpoint_path.exists():
        run.start_step = load_checkpoint(run)
        check_steps_left(run, args)
    elif rank == 0:
        run.log_path.write_text("step,lr,train_loss,aux_loss,val_loss,tokens_per_s\n")
    return run


def training_tokenizer(name):
    """--tokenizer's tokenizer; UserError if it does not load or lacks the markers."""
    tokenizer = tokenizer_from(name, "--tokenizer")
    missing = [token for token in SPECIAL if token not in tokenizer.get_vocab()]
    if missing:
        raise UserError(f"--tokenizer {name}: has no {missing[0]} token; train one "
                        "with python -m minimind.training.tokenizer train")
    return tokenizer


def identity(args, preset: Preset, tokenizer) -> dict:
    """What a resumed run must share with the checkpoint (saved with it)."""
    return {"preset": args.preset, "steps": preset.steps, "tokenizer": args.tokenizer,
            "tokenizer_sha256": fingerprint(tokenizer)}


def fingerprint(tokenizer) -> str:
    """sha256 of the vocabulary: the same tokens with the same ids, the same digest."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    return hashlib.sha256(vocab.encode()).hexdigest()


def data_rows(tokenizer, data_dir, p: Preset, world: int):
    """Packed train and val rows; UserError if train fills no batch, or val no row."""
    train_rows, val_rows = (packed_rows(tokenizer, data_dir, split, p.seq_len)
                            for split in ("train", "val"))
    per = f" per process ({world} processes)" if world > 1 else ""
    enough_rows(train_rows, p.batch_size * world, Path(data_dir, "train.txt"),
                f"one batch{per} of the preset's {p.batch_size} rows")
    enough_rows(val_rows, 1, Path(data_dir, "val.txt"), "the held-out loss")
    return train_rows, val_rows


def train_step(run: Run, batch: torch.Tensor, lr: float):
    """One optimizer step on `batch` [B, S]: next-token loss + MoE aux loss, backward, clip, AdamW. -> output."""
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    use_bf16 = pick_dtype(run.device) == torch.bfloat16
    with torch.autocast(run.device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext():
        output = run.ddp_model(batch, labels=batch)
        loss = output.loss  # the next-token loss plus the MoE aux loss, added by the model
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.preset.grad_clip)
    run.optimizer.step()
    return output


def held_out_loss(model, rows: torch.Tensor, batch_size: int) -> float:
    """Mean next-token loss (nats/token) over `rows`, in eval mode (no dropout, no aux loss)."""
    model.eval()
    loss = mean_loss(model, rows, batch_size)
    model.train()
    return loss


def save_checkpoint(run: Run, step: int):
    """Weights, optimizer moments, step and RNG state: all `--resume` needs to continue the same run."""
    torch.save({"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(), "step": step,
                "rng": torch.get_rng_state(), "run": run.identity}, run.checkpoint_path)
    plot_loss_curve(run.log_path, run.out / "loss_curve.png")


def load_checkpoint(run: Run) -> int:
    """Restore what `save_checkpoint` wrote; returns the step to continue from."""
    state = read_checkpoint(run.checkpoint_path, run.device)
    run.earlier = state.get("run", {})  # {}: saved before checkpoints recorded it
    check_same_run(run, state["model"])
    run.model.load_state_dict(state["model"])
    try:
        run.optimizer.load_state_dict(state["optimizer"])
    except ValueError as error:  # e.g. written before norm gains got their own no-decay group
        raise UserError(f"{run.checkpoint_path}: does not fit this optimizer "
                        f"({error}); start again with another --out") from None
    torch.set_rng_state(state["rng"])
    return state["step"]


def read_checkpoint(path: Path, device) -> dict:
    """torch.load(path); UserError if the file is damaged (e.g. cut short)."""
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise UserError(f"{path}: cannot be read ({error}); the file is damaged: "
                        "start again with another --out") from None


def check_same_run(run: Run, weights: dict):
    """UserError unless the checkpoint was written with this preset and tokenizer."""
    path, now, saved = run.checkpoint_path, run.identity, run.earlier
    other = "another --out"
    if saved.get("preset", now["preset"]) != now["preset"]:
        raise UserError(f"{path}: written by --preset {saved['preset']}, not "
                        f"{now['preset']}; resume with --preset {saved['preset']}, "
                        f"or choose {other}")
    digest = now["tokenizer_sha256"]
    if saved.get("tokenizer_sha256", digest) != digest:
        raise UserError(f"--tokenizer {now['tokenizer']}: not the tokenizer {path} was "
                        f"trained with; resume with --tokenizer {saved['tokenizer']}, "
                        f"or choose {other}")
    try:
        check_state_dict(run.model, weights)
    except CheckpointError as error:
        raise UserError(f"{path}: does not fit --preset {now['preset']} ({error}); "
                        "resume with the preset it was written by, or choose "
                        f"{other}") from None


def check_steps_left(run: Run, args):
    """UserError if a resume would change the schedule unasked, or has nothing to do."""
    steps, done, path = run.preset.steps, run.start_step, run.checkpoint_path
    had = run.earlier.get("steps", steps)
    if args.steps is None and had != steps:
        raise UserError(f"{path}: its run has --steps {had}, not the preset's {steps}; "
                        f"pass --steps {had} to finish it, or more to train on")
    final = run.out / "final"
    if done >= steps and (final / "model.safetensors").exists():
        raise UserError(f"{path}: the run is at step {done} of {steps}, finished (its "
                        f"model is in {final}); pass a --steps above {done} to train "
                        "on, or choose another --out")
    if args.stop_at is not None and done >= args.stop_at:
        raise UserError(f"--stop-at {args.stop_at}: {path} is already at step {done}; "
                        "pass a later --stop-at")


def log_step(run: Run, step: int, lr: float, output, val_loss: str, tokens_per_s: float):
    with open(run.log_path, "a") as f:
        f.write(f"{step},{lr:.6g},{output.lm_loss.item():.4f},{output.aux_loss.item():.6f},{val_loss},"
                f"{tokens_per_s:.0f}\n")


def train(args) -> MiniMindForCausalLM:
    """The loop: setup, then per step the learning rate, a batch, train_step, evaluation, log and checkpoint."""
    from tqdm import tqdm
    run = setup(args)
    p = run.preset
    stream = batches(run.train_rows, p.batch_size, args.seed, run.rank, run.world)
    for _ in range(run.start_step):  # replay the data order so a resumed run sees the same batches
        next(stream)
    last_step = min(p.steps, args.stop_at or p.steps)
    bar = tqdm(range(run.start_step, last_step), disable=run.rank != 0 or args.no_progress, desc=args.preset)
    run.model.train()
    tick = time.time()
    for step in bar:
        lr = learning_rate(step, p)
        batch = next(stream).to(run.device)
        output = train_step(run, batch, lr)
        done, tokens_per_s, tick = step + 1, batch.numel() * run.world / (time.time() - tick), time.time()
        is_eval_step = done % p.eval_every == 0 or done == p.steps
        val_loss = f"{held_out_loss(run.model, run.val_rows, p.batch_size):.4f}" if is_eval_step else ""
        if run.rank == 0:
            log_step(run, done, lr, output, val_loss, tokens_per_s)
            bar.set_postfix(loss=f"{output.lm_loss.item():.3f}", val=val_loss or "-")
            if done % p.save_every == 0 or done == last_step:
                save_checkpoint(run, done)
    if run.rank == 0 and last_step == p.steps:
        export(run.model, run.tokenizer, run.out / "final", {
            "preset": args.preset, **asdict(p), "seed": args.seed, "world_size": run.world,
            "data_meta": read_meta(args.data)})
    if run.world > 1:
        dist.destroy_process_group()
    return run.model


def plot_loss_curve(log_csv: Path, png: Path):
    from matplotlib.figure import Figure  # no pyplot: a notebook that calls train() keeps its backend
    rows = list(csv.DictReader(open(log_csv)))
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.plot([int(r["step"]) for r in rows], [float(r["train_loss"]) for r in rows], lw=0.8, label="train")
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    if val:
        ax.plot(*zip(*val), "o-", label="validation")
    ax.set(xlabel="step", ylabel="loss (nats/token)", title=png.parent.name)
    ax.legend(), ax.grid(alpha=0.3)
    fig.tight_layout(), fig.savefig(png, dpi=100)


def read_meta(data_dir):
    path = Path(data_dir, "meta.json")
    return json.loads(path.read_text()) if path.exists() else None


def export(model, tokenizer, folder: Path, training: dict):
    """An HF-style folder: config.json, bf16 model.safetensors, tokenizer files, training.json."""
    folder.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(folder)
    model.to(torch.float32)
    tokenizer.save_pretrained(folder)
    (folder / "training.json").write_text(json.dumps(training, ensure_ascii=False, indent=2))
    for name in ("train_log.csv", "loss_curve.png"):
        if (folder.parent / name).exists():
            shutil.copy(folder.parent / name, folder / name)


def check_args(args):
    """Catch the usual mistakes before any work starts."""
    for option in ("steps", "stop_at", "save_every"):
        if getattr(args, option) is not None and getattr(args, option) <= 0:
            raise UserError(f"--{option.replace('_', '-')} {getattr(args, option)}: "
                            "must be a positive number of steps")
    if args.device:
        try:
            available(args.device)
        except ValueError as error:
            raise UserError(f"--device: {error}") from None
    for name in ("train.txt", "val.txt"):
        if not Path(args.data, name).is_file():
            raise UserError(f"--data {args.data}: no {name} there; build it with "
                            "python -m minimind.training.data build")
    check_out(args)


def check_out(args):
    """--out: a folder to write in, with no earlier run unless --resume continues it."""
    out = output_folder(args.out, "--out")
    if not args.resume:
        refuse_earlier_work(out, RUN_FILES, "an earlier run",
                            "continue it with --resume, or choose another --out")
    elif not (out / "checkpoint.pt").exists():
        refuse_earlier_work(out, RUN_FILES, "an earlier run but no checkpoint.pt to "
                            "--resume from", "choose another --out")


def build_parser():
    parser = Parser(prog="python -m minimind.training.train", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--data", required=True, help="folder with train.txt and val.txt")
    parser.add_argument("--tokenizer", required=True, help="folder with tokenizer.json, or a shipped checkpoint name")
    parser.add_argument("--out", required=True, help="a new folder (an earlier run "
                        "there is refused unless --resume continues it)")
    parser.add_argument("--steps", type=int, help="override the preset's number of steps")
    parser.add_argument("--save-every", type=int, help="checkpoint every N steps (default: the preset's)")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--resume", action="store_true", help="continue from "
                        "OUT/checkpoint.pt if present (same preset and tokenizer)")
    parser.add_argument("--stop-at", type=int, help="stop after this step, keeping the full schedule (resume later)")
    parser.add_argument("--device", help="cuda / mps / cpu (default: best available)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    with user_errors():
        return train(args)


if __name__ == "__main__":
    main()
