"""Short training comparisons of MiniMind against its variants on the poetry data (chapters 5-8).

Regenerate every file in bench/results/ (18 training runs, 56 minutes on one thread of a 2-core CPU shared with
other jobs, 2-6 minutes per run):

    npm pack chinese-poetry@2.0.1 && mkdir -p data && tar xzf chinese-poetry-2.0.1.tgz -C data
    python -m minimind.training.data build data/package/dist data/poetry
    OMP_NUM_THREADS=1 python bench/train_variants.py --data data/poetry

(or name some experiments: `... train_variants.py swiglu_vs_gelu tied_vs_untied`). The committed files came from
that command before `pre_vs_post_norm_lr1e-3` and `seed_noise` existed, then one run naming each of those two;
every JSON records its command. A run is deterministic on one CPU thread: `seed_noise`'s seed1337 run repeats
the baseline of the first invocation bit for bit. The data is the Tang regulated
verse split the shipped checkpoints were trained on (train.txt sha256 8f5aef5a…); the tokenizer is the shipped
`minimind/checkpoints/poetry-dense` one, so no tokenizer is trained here.

Every variant is trained the same short way: a 128-wide, 4-layer model (4 query / 2 KV heads of 32, SwiGLU
384 wide, vocab 6400), 200 steps of 16 x 64 tokens (205k tokens, a seventh of an epoch), AdamW (betas
0.9/0.95, weight decay 0.1 on matrices only), linear warmup for 20 steps then cosine decay to 10%, gradient
clipping at 1.0, fp32, seed 1337 for both the initial weights and the batch order. Validation loss is measured
every 40 steps on the same 128 held-out rows of 64 tokens (8,192 tokens from val.txt). That is short: the
curves compare how fast the variants start to learn, not where they end up.

Experiments (variants from `minimind.lab.variants`, MoE options from the config):

- `swiglu_vs_gelu` (ch. 5): MiniMind's SwiGLU vs a GELU MLP 576 wide, both 147,456 parameters per block;
- `moe_router` (ch. 6): 4 experts of 384, top-1 with norm_topk_prob=True and router_aux_loss_coef 0, 5e-4
  (MiniMind's), 1e-2, 1e-1; top-2 and top-1 without renormalisation, both at 5e-4;
- `pre_vs_post_norm` (ch. 7): Pre-Norm vs Post-Norm (no final norm) at peak learning rates 3e-3 and 1e-2,
  and `pre_vs_post_norm_lr1e-3` the same pair at 1e-3 (a separate file: it was added after the first two);
- `tied_vs_untied` (ch. 8): the embedding shared with the LM head, or a separate head (+819,200 parameters);
- `weight_decay_1d` (training hygiene): weight decay on matrices only (the recipe above) vs on every parameter,
  RMSNorm and QK-Norm gains included (what train.py did before); the JSON adds each run's mean norm gain;
- `seed_noise`: MiniMind itself with seeds 1337, 1 and 2 (initial weights and batch order), the yardstick
  for every difference above: a gap smaller than the spread between seeds is not a result.

Output, per experiment: `bench/results/<experiment>.csv`, long format, one row per variant and step:
`variant,step,tokens,lr,train_loss,val_loss` (val_loss blank between evaluations; train_loss is the next-token
loss alone). MoE experiments add `aux_loss` (what was added to the training loss: coef x the sum over layers of
the load-balancing loss), `balance_loss` (that loss unscaled, mean over layers; it equals num_experts_per_tok,
1.0 for top-1 and 2.0 for top-2, when loads and mean router probabilities are perfectly even) and
`share_l{layer}_e{expert}` (the share of the training batch's token-to-expert assignments each expert received
at that step). `bench/results/<experiment>.json`: each variant's config, parameter counts (total / active),
steps, seed, learning rate and wall time. Runs that are identical across experiments (MiniMind at 3e-3 is the
baseline of three) are trained once and copied.
"""
import argparse
import csv
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minimind import MiniMindConfig, MiniMindForCausalLM  # noqa: E402
from minimind.checkpoint import load_tokenizer  # noqa: E402
from minimind.lab.params import count_parameters  # noqa: E402
from minimind.lab.variants import gelu_mlp_model, post_norm_model, untied_model  # noqa: E402
from minimind.loss import mean_loss  # noqa: E402
from minimind.moe import load_balancing_loss  # noqa: E402
from minimind.training.data import encode_poems, load_poems, pack  # noqa: E402
from minimind.training.train import Preset, batches, learning_rate, param_groups  # noqa: E402

MODEL = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=384, max_position_embeddings=512)
MOE = dict(use_moe=True, num_experts=4, moe_intermediate_size=384, num_experts_per_tok=1, norm_topk_prob=True)
SCHEDULE = Preset(model=MODEL, steps=200, batch_size=16, seq_len=64, lr=3e-3, min_lr_ratio=0.1, warmup=20,
                  weight_decay=0.1, grad_clip=1.0, eval_every=40, save_every=0)
SEED, VAL_ROWS = 1337, 128
BUILDERS = {"minimind": MiniMindForCausalLM, "gelu_mlp": gelu_mlp_model, "post_norm": post_norm_model,
            "untied": untied_model}


@dataclass
class Variant:
    name: str
    builder: str = "minimind"
    config: dict = field(default_factory=dict)
    lr: float = SCHEDULE.lr
    decay_1d: bool = False  # True: weight decay on every parameter, norm gains included (the old recipe)
    seed: int = SEED  # initial weights and batch order

    def key(self):
        return self.builder, json.dumps(self.config, sort_keys=True), self.lr, self.decay_1d, self.seed


EXPERIMENTS = {
    "swiglu_vs_gelu": [Variant("swiglu"), Variant("gelu", "gelu_mlp")],
    "weight_decay_1d": [Variant("decay_matrices_only"), Variant("decay_all", decay_1d=True)],
    "tied_vs_untied": [Variant("tied"), Variant("untied", "untied")],
    "moe_router": [
        Variant("top1_coef0", config={**MOE, "router_aux_loss_coef": 0.0}),
        Variant("top1_coef5e-4", config={**MOE, "router_aux_loss_coef": 5e-4}),
        Variant("top1_coef1e-2", config={**MOE, "router_aux_loss_coef": 1e-2}),
        Variant("top1_coef1e-1", config={**MOE, "router_aux_loss_coef": 1e-1}),
        Variant("top2_coef5e-4", config={**MOE, "router_aux_loss_coef": 5e-4, "num_experts_per_tok": 2}),
        Variant("top1_nonorm_coef5e-4", config={**MOE, "router_aux_loss_coef": 5e-4, "norm_topk_prob": False}),
    ],
    "pre_vs_post_norm": [Variant("pre_lr3e-3"), Variant("post_lr3e-3", "post_norm"),
                         Variant("pre_lr1e-2", lr=1e-2), Variant("post_lr1e-2", "post_norm", lr=1e-2)],
    "pre_vs_post_norm_lr1e-3": [Variant("pre_lr1e-3", lr=1e-3), Variant("post_lr1e-3", "post_norm", lr=1e-3)],
    "seed_noise": [Variant(f"seed{seed}", seed=seed) for seed in (SEED, 1, 2)],
}


def load_rows(data_dir, tokenizer, seq_len):
    train = pack(encode_poems(tokenizer, load_poems(Path(data_dir, "train.txt")), seq_len), seq_len)
    val = pack(encode_poems(tokenizer, load_poems(Path(data_dir, "val.txt")), seq_len), seq_len)[:VAL_ROWS]
    return train, val


def expert_shares(router_logits, num_experts, top_k):
    """Per layer, the share of this batch's token-to-expert assignments each expert got: [layers, experts]."""
    shares = []
    for logits in router_logits:
        chosen = torch.topk(F.softmax(logits.float(), -1), top_k, dim=-1).indices.flatten()
        shares.append(torch.bincount(chosen, minlength=num_experts).float() / chosen.numel())
    return torch.stack(shares)


def train_variant(variant: Variant, train_rows, val_rows, vocab_size, log=print):
    """Train one variant with SCHEDULE; returns (rows for the CSV, summary for the JSON)."""
    schedule = Preset(**{**SCHEDULE.__dict__, "lr": variant.lr})
    config = MiniMindConfig(vocab_size=vocab_size, **{**MODEL, **variant.config})
    torch.manual_seed(variant.seed)
    model = BUILDERS[variant.builder](config).train()
    groups = model.parameters() if variant.decay_1d else param_groups(model, schedule.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=schedule.lr, betas=(0.9, 0.95), weight_decay=schedule.weight_decay)
    stream = batches(train_rows, schedule.batch_size, variant.seed)
    moe = config.use_moe
    rows, start = [], time.time()
    for step in range(schedule.steps):
        lr = learning_rate(step, schedule)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = next(stream)
        out = model(batch, labels=batch, output_router_logits=moe)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()  # with labels, out.loss already holds the MoE aux loss
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
        optimizer.step()
        done = step + 1
        row = {"variant": variant.name, "step": done, "tokens": done * batch.numel(), "lr": f"{lr:.6g}",
               "train_loss": f"{out.lm_loss.item():.4f}", "val_loss": ""}
        if done % schedule.eval_every == 0 or done == schedule.steps:
            model.eval()
            row["val_loss"] = f"{mean_loss(model, val_rows, schedule.batch_size):.4f}"
            model.train()
            log(f"{variant.name:>22} step {done:4d}  train {out.lm_loss.item():.3f}  val {row['val_loss']}  "
                f"{(time.time() - start) / done:.2f} s/step")
        if moe:
            with torch.no_grad():
                row["aux_loss"] = f"{out.aux_loss.item():.6f}"
                balance = [load_balancing_loss(r, config.num_experts, config.num_experts_per_tok).item()
                           for r in out.router_logits]
                row["balance_loss"] = f"{sum(balance) / len(balance):.4f}"
                for layer, shares in enumerate(expert_shares(out.router_logits, config.num_experts,
                                                             config.num_experts_per_tok).tolist()):
                    for expert, share in enumerate(shares):
                        row[f"share_l{layer}_e{expert}"] = f"{share:.4f}"
        rows.append(row)
    counts = count_parameters(model)
    gains = [p for n, p in model.named_parameters() if p.dim() == 1]
    summary = {"builder": variant.builder, "config_overrides": variant.config, "decay_1d": variant.decay_1d,
               "config": {k: v for k, v in model.config.to_dict().items() if not k.startswith("_")},
               "parameters_total": counts["total"], "parameters_active": counts["active"],
               "steps": schedule.steps, "tokens": rows[-1]["tokens"], "seed": variant.seed, "lr": variant.lr,
               "final_val_loss": float(rows[-1]["val_loss"]), "wall_time_s": round(time.time() - start, 1),
               "mean_norm_gain": round(torch.cat([g.detach() for g in gains]).mean().item(), 4)}
    return rows, summary


def write_results(out_dir: Path, experiment, rows, summaries, meta):
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    with open(out_dir / f"{experiment}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader(), writer.writerows(rows)
    (out_dir / f"{experiment}.json").write_text(
        json.dumps({**meta, "experiment": experiment, "variants": summaries}, ensure_ascii=False, indent=1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                        help=f"any of {', '.join(EXPERIMENTS)} (default: all, in that order)")
    parser.add_argument("--data", default="data/poetry", help="folder with train.txt and val.txt")
    parser.add_argument("--tokenizer", default="poetry-dense", help="a shipped checkpoint name or a folder")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown:
        parser.error(f"unknown experiment {unknown[0]!r}; choose from {', '.join(EXPERIMENTS)}")
    if not Path(args.data, "train.txt").exists():
        parser.exit(2, f"error: no {Path(args.data, 'train.txt')}: build the corpus first (see the docstring)\n")
    tokenizer = load_tokenizer(args.tokenizer)
    train_rows, val_rows = load_rows(args.data, tokenizer, SCHEDULE.seq_len)
    data_meta = json.loads(Path(args.data, "meta.json").read_text()) if Path(args.data, "meta.json").exists() else None
    meta = {"command": "OMP_NUM_THREADS=1 python bench/train_variants.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "schedule": {k: v for k, v in SCHEDULE.__dict__.items() if k not in ("model", "save_every")},
            "optimizer": "AdamW betas (0.9, 0.95), weight decay on parameters with dim >= 2 only",
            "val_tokens": val_rows.numel(), "train_rows": len(train_rows), "data": data_meta,
            "tokenizer": args.tokenizer, "torch": torch.__version__, "threads": torch.get_num_threads()}
    print(f"{len(train_rows)} training rows, {val_rows.numel()} validation tokens, {torch.get_num_threads()} thread(s)",
          flush=True)
    done = {}
    for experiment in args.experiments or list(EXPERIMENTS):
        rows, summaries = [], {}
        for variant in EXPERIMENTS[experiment]:
            if variant.key() not in done:
                done[variant.key()] = train_variant(variant, train_rows, val_rows, len(tokenizer),
                                                    log=lambda s: print(s, flush=True))
            variant_rows, summary = done[variant.key()]
            rows += [{**r, "variant": variant.name} for r in variant_rows]
            summaries[variant.name] = summary
            write_results(Path(args.out), experiment, rows, summaries, meta)  # after each variant: progress is kept
        print(f"wrote {experiment}: " + ", ".join(f"{n} {s['final_val_loss']:.3f}" for n, s in summaries.items()),
              flush=True)


if __name__ == "__main__":
    main()
