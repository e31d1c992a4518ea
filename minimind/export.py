"""Export a MiniMind checkpoint as a stock transformers Qwen3 folder: no custom code needed to load or serve it.

    python -m minimind.export poetry-dense exported/poetry-dense     # or poetry-moe, or any MiniMind folder

MiniMind is Qwen3's architecture (GQA, QK-Norm, RoPE or YaRN, SwiGLU or top-k MoE, tied embeddings), so the
export is a renaming: the config maps field by field, dense weights keep their names, and only the MoE experts
change layout (MiniMind keeps one SwiGLU module per expert; transformers stacks each layer's experts into two
tensors). The folder loads with `AutoModelForCausalLM.from_pretrained(OUT)` as Qwen3ForCausalLM (dense) or
Qwen3MoeForCausalLM (MoE), tokenizer included, with the same logits.
"""
import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from .checkpoint import load_pretrained
from .cli import (Parser, UserError, fail, model_from, output_folder, source_folder,
                  tokenizer_from, user_errors)
from .config import MiniMindConfig
from .model import MiniMindForCausalLM

# The two implementations add in different orders (MoE: experts stacked), so fp32
# logits agree up to rounding: 0 to 5.7e-6 on the shipped checkpoints, depending on
# the CPU's kernels. A real mistake (a swapped weight, a wrong RoPE) moves them >= 0.1.
ROUNDING_BOUND = 1e-4


class ExportError(UserError, ValueError):
    """An export that cannot be written (the output folder is taken or read-only)."""


def rope_parameters(config: MiniMindConfig) -> dict:
    """MiniMind's rope_theta and YaRN switch as transformers' `rope_parameters`."""
    if config.yarn is None:
        return {"rope_type": "default", "rope_theta": config.rope_theta}
    keys = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor")
    return {"rope_type": "yarn", "rope_theta": config.rope_theta, **{k: config.yarn[k] for k in keys}}


def qwen3_config(config: MiniMindConfig, pad_token_id=None) -> Qwen3Config | Qwen3MoeConfig:
    """The same model described as a Qwen3Config (dense) or Qwen3MoeConfig (every layer an MoE layer)."""
    c = config
    shared = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                  num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                  head_dim=c.head_dim, hidden_act=c.hidden_act, max_position_embeddings=c.max_position_embeddings,
                  rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=c.tie_word_embeddings,
                  rope_parameters=rope_parameters(c), attention_dropout=c.dropout, bos_token_id=c.bos_token_id,
                  eos_token_id=c.eos_token_id, pad_token_id=pad_token_id)
    if not c.use_moe:
        return Qwen3Config(intermediate_size=c.intermediate_size, **shared)
    return Qwen3MoeConfig(intermediate_size=c.intermediate_size, moe_intermediate_size=c.moe_intermediate_size,
                          num_experts=c.num_experts, num_experts_per_tok=c.num_experts_per_tok,
                          norm_topk_prob=c.norm_topk_prob, router_aux_loss_coef=c.router_aux_loss_coef,
                          decoder_sparse_step=1, mlp_only_layers=[], **shared)


def qwen3_state_dict(model: MiniMindForCausalLM) -> dict:
    """MiniMind's weights under transformers' Qwen3 names: the same names, MoE experts stacked per layer."""
    state = {name: w for name, w in model.state_dict().items() if ".mlp.experts." not in name}
    for i, layer in enumerate(model.model.layers):
        if model.config.use_moe:  # [E, 2 * I, hidden] (gate rows, then up rows) and [E, hidden, I]
            experts = layer.mlp.experts
            state[f"model.layers.{i}.mlp.experts.gate_up_proj"] = torch.stack(
                [torch.cat([e.gate_proj.weight, e.up_proj.weight]) for e in experts])
            state[f"model.layers.{i}.mlp.experts.down_proj"] = torch.stack([e.down_proj.weight for e in experts])
    return state


def to_qwen3(model: MiniMindForCausalLM, pad_token_id=None) -> Qwen3ForCausalLM | Qwen3MoeForCausalLM:
    """An in-memory transformers twin with MiniMind's weights (every key must fit: strict loading)."""
    config = qwen3_config(model.config, pad_token_id)
    cls = Qwen3MoeForCausalLM if model.config.use_moe else Qwen3ForCausalLM
    twin = cls(config).to(model.device)
    twin.load_state_dict(qwen3_state_dict(model), strict=True)
    twin.generation_config.update(**model.generation_config.to_diff_dict())
    return twin.eval()


def export(src, out, dtype=None) -> Path:
    """Write `src` (a shipped name or a MiniMind folder) to `out` as a Qwen3 folder; returns `out`.

    dtype: the weights' dtype on disk; by default the one the source config records (bfloat16 for the shipped
    checkpoints), else float32. The tokenizer is saved alongside when the source has one.
    """
    out = check_out(out)
    model = model_from(src)
    tokenizer = tokenizer_from(src) if has_tokenizer(src) else None
    dtype = dtype or getattr(model.config, "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    pad = model.generation_config.pad_token_id
    pad = tokenizer.pad_token_id if pad is None and tokenizer is not None else pad
    to_qwen3(model, pad).to(dtype).save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def check_out(out) -> Path:
    """`out` as a new or empty folder this user can write: exports never overwrite."""
    out = Path(out)
    if out.is_file():
        raise ExportError(f"{out}: is a file, not a folder; choose a new folder")
    if out.is_dir() and any(out.iterdir()):
        held = ", ".join(sorted(p.name for p in out.iterdir())[:4])
        raise ExportError(f"{out}: exists and is not empty ({held}); "
                          "choose a new folder")
    try:
        return output_folder(out, "")
    except UserError as error:
        raise ExportError(str(error)) from None


def has_tokenizer(src) -> bool:
    folder = source_folder(src)
    return any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json"))


@torch.no_grad()
def max_logit_difference(src, out, seq_len=64, seed=0) -> float:
    """max |Δlogits| in fp32 between MiniMind on `src` and stock transformers on the exported `out`."""
    ours = load_pretrained(src)
    theirs = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.randint(0, ours.config.vocab_size, (2, seq_len), generator=torch.Generator().manual_seed(seed))
    return (ours(ids).logits - theirs(ids).logits).abs().max().item()


def main(argv=None):
    parser = Parser(prog="python -m minimind.export", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", help="a shipped checkpoint name (poetry-dense, "
                        "poetry-moe) or a MiniMind folder")
    parser.add_argument("out", help="a new folder for the Qwen3 export")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                        help="weights on disk (default: the source's dtype)")
    args = parser.parse_args(argv)
    with user_errors():
        out = export(args.src, args.out, args.dtype)
    print(f"wrote {out}: {verdict(args.src, out)}")


def verdict(src, out) -> str:
    """The architecture and the logits check in words; exit 1 if the logits differ."""
    delta = max_logit_difference(src, out)
    check = "max |Δlogits| vs MiniMind (fp32, 2 x 64 random tokens)"
    bound = f"{ROUNDING_BOUND:.0e}".replace("e-0", "e-")  # 1e-4
    if delta > ROUNDING_BOUND:
        fail(f"{out}: {check} = {delta:.1e}, above the {bound} of float32 rounding: "
             "the export does not reproduce the model; please report it", status=1)
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    tokenizer = "included" if has_tokenizer(src) else "absent"
    return (f"{architecture}, tokenizer {tokenizer}, {check} ≤ {bound}: "
            "equal up to float32 rounding")


if __name__ == "__main__":
    main()
