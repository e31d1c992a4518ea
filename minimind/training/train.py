"""Train MiniMind on the poetry corpus (chapter 11).

    python -m minimind.training.train --preset tiny-dense --data data/poetry --tokenizer runs/tokenizer --out runs/poetry-dense
    torchrun --nproc_per_node 2 -m minimind.training.train ...        # data parallel (gloo on CPU, nccl on CUDA)

AdamW with warmup and cosine decay, gradient clipping, bf16 autocast on a GPU that supports it (fp32 on CPU),
a checkpoint every `--save-every` steps (`--resume` continues from it), a CSV loss log and a loss-curve PNG.
"""
import argparse
import csv
import json
import math
import os
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

from ..config import MiniMindConfig
from .data import encode_poems, load_poems, pack
from ..lab.device import pick_device, pick_dtype
from ..loss import mean_loss
from ..model import MiniMindForCausalLM


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


def evaluate(model, rows: torch.Tensor, batch_size: int) -> float:
    """Mean next-token loss (nats/token) over `rows`, in eval mode (no dropout)."""
    model.eval()
    loss = mean_loss(model, rows, batch_size)
    model.train()
    return loss


def plot_loss_curve(log_csv: Path, png: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(log_csv)))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([int(r["step"]) for r in rows], [float(r["train_loss"]) for r in rows], lw=0.8, label="train")
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    if val:
        ax.plot(*zip(*val), "o-", label="validation")
    ax.set(xlabel="step", ylabel="loss (nats/token)", title=png.parent.name)
    ax.legend(), ax.grid(alpha=0.3)
    fig.tight_layout(), fig.savefig(png, dpi=100), plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--data", required=True, help="folder with train.txt and val.txt")
    parser.add_argument("--tokenizer", required=True, help="folder with tokenizer.json")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, help="override the preset's number of steps")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if present")
    parser.add_argument("--stop-at", type=int, help="stop after this step, keeping the full schedule (resume later)")
    parser.add_argument("--device", help="cuda / mps / cpu (default: best available)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    return train(args)


def train(args):
    from transformers import AutoTokenizer
    from tqdm import tqdm

    preset = PRESETS[args.preset] if args.steps is None else replace(PRESETS[args.preset], steps=args.steps)
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = pick_device(args.device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    seed_everything(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = MiniMindConfig(vocab_size=len(tokenizer), **preset.model)
    train_rows = pack(encode_poems(tokenizer, load_poems(Path(args.data, "train.txt")), preset.seq_len),
                      preset.seq_len)
    val_rows = pack(encode_poems(tokenizer, load_poems(Path(args.data, "val.txt")), preset.seq_len),
                    preset.seq_len)
    model = MiniMindForCausalLM(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=preset.lr, betas=(0.9, 0.95),
                                  weight_decay=preset.weight_decay)
    start_step, log_path, ckpt_path = 0, out / "train_log.csv", out / "checkpoint.pt"
    if args.resume and ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=False)
        model.load_state_dict(state["model"]), optimizer.load_state_dict(state["optimizer"])
        start_step = state["step"]
        torch.set_rng_state(state["rng"])
    elif rank == 0:
        log_path.write_text("step,lr,train_loss,aux_loss,val_loss,tokens_per_s\n")
    ddp_model = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    amp = pick_dtype(device) == torch.bfloat16
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if amp else nullcontext()

    stream = batches(train_rows, preset.batch_size, args.seed, rank, world)
    for _ in range(start_step):  # replay the data order so a resumed run sees the same batches
        next(stream)
    last_step = min(preset.steps, args.stop_at or preset.steps)
    bar = tqdm(range(start_step, last_step), disable=rank != 0 or args.no_progress, desc=args.preset)
    model.train()
    tick = time.time()
    for step in bar:
        lr = learning_rate(step, preset)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = next(stream).to(device)
        with autocast:
            output = ddp_model(batch, labels=batch)
            loss = output.loss + output.aux_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), preset.grad_clip)
        optimizer.step()
        done = step + 1
        tokens_per_s = batch.numel() * world / (time.time() - tick)
        tick = time.time()
        val_loss = ""
        if done % preset.eval_every == 0 or done == preset.steps:
            val_loss = f"{evaluate(model, val_rows, preset.batch_size):.4f}"
        if rank == 0:
            with open(log_path, "a") as f:
                f.write(f"{done},{lr:.6g},{output.loss.item():.4f},{output.aux_loss.item():.6f},{val_loss},"
                        f"{tokens_per_s:.0f}\n")
            bar.set_postfix(loss=f"{output.loss.item():.3f}", val=val_loss or "-")
            if done % preset.save_every == 0 or done == last_step:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done,
                            "rng": torch.get_rng_state()}, ckpt_path)
                plot_loss_curve(log_path, out / "loss_curve.png")
    if rank == 0 and last_step == preset.steps:
        export(model, tokenizer, out / "final", {"preset": args.preset, **asdict(preset), "seed": args.seed,
                                                 "world_size": world, "data_meta": read_meta(args.data)})
    if world > 1:
        dist.destroy_process_group()
    return model


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


if __name__ == "__main__":
    main()
