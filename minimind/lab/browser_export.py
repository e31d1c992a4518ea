"""The shipped checkpoints as ONNX graphs for the live panels of the HTML book (book/_ext/live_panels.py).

One graph per checkpoint, with a KV-cache: token ids [1, S] and the cached keys/values of P earlier
positions in (P = 0 for a fresh line), and out what the book's pictures show:
- `logits` [1, S, vocab];
- `attentions` [L, H, S, P + S]: every layer's attention probabilities (chapter 4a);
- `hidden` [L + 1, S, hidden]: the residual stream, the embeddings then after each block (chapters 1, 7);
- `lens_ids` / `lens_probs` [L, S, 5]: the logit lens, the final norm and head applied after each block,
  top 5 (chapter 7);
- `router_probs` [L, S, E] and `router_choice` [L, S, k] for poetry-moe (chapter 6);
- `present_key_i` / `present_value_i` [1, P + S, n_kv, D]: the cache for the next step.

The graph reuses the package's own modules (norms, attention, SwiGLU); only the MoE layer is written
again, densely: every expert on every token, weighted by the router's top-k weights scattered into a
[tokens, experts] matrix, which gives the same output as minimind.moe's loop without its data-dependent
`if mask.any()` (which a trace would bake in). The weights are stored as bfloat16, the precision they
were trained and shipped in, so nothing is rounded, and cast to float32 once in the graph.

    python -m minimind.lab.browser_export OUT_DIR [poetry-dense poetry-moe]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

LENS_TOP = 5
SHIPPED_NAMES = ("poetry-dense", "poetry-moe")


class DenseMoE(nn.Module):
    """minimind.moe.MOEFeedForward without data-dependent branches: all experts, top-k weights scattered."""

    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def forward(self, x_flat):
        """x [N, hidden] -> (y [N, hidden], router probs [N, E], choices [N, k])."""
        router_logits = self.moe.gate(x_flat)  # [N, E]
        topk_weight, topk_idx = self.moe.route(router_logits)  # [N, k] each
        weights = torch.zeros_like(router_logits).scatter(1, topk_idx, topk_weight)  # [N, E], 0 off the top-k
        y = torch.zeros_like(x_flat)
        for i, expert in enumerate(self.moe.experts):
            y = y + expert(x_flat) * weights[:, i:i + 1]
        probs = F.softmax(router_logits.float(), dim=-1)
        return y, probs, topk_idx


class BrowserGraph(nn.Module):
    """MiniMindForCausalLM's forward (batch 1, eval) returning every tensor the live panels draw."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config
        self.moe = nn.ModuleList([DenseMoE(b.mlp) for b in model.model.layers]) if model.config.use_moe else None

    def forward(self, input_ids, *past):
        inner = self.model.model
        seq_len = input_ids.shape[1]
        start = past[0].shape[1]  # cached positions
        h = inner.embed_tokens(input_ids)  # [1, S, hidden]
        cos = inner.freqs_cos[start:start + seq_len]
        sin = inner.freqs_sin[start:start + seq_len]
        hidden, attentions, presents, router_probs, router_choice = [h], [], [], [], []
        for i, layer in enumerate(inner.layers):
            attn_out, present, probs = layer.self_attn(
                layer.input_layernorm(h), (cos, sin), (past[2 * i], past[2 * i + 1]), True, None, True)
            h = h + attn_out
            x = layer.post_attention_layernorm(h)
            if self.moe is None:
                h = h + layer.mlp(x)
            else:
                y, p, choice = self.moe[i](x.view(seq_len, -1))
                h = h + y.view(1, seq_len, -1)
                router_probs.append(p), router_choice.append(choice)
            hidden.append(h), attentions.append(probs[0]), presents.extend(present)
        logits = self.model.lm_head(inner.norm(h))  # [1, S, vocab]
        lens = F.softmax(self.model.lm_head(inner.norm(torch.cat(hidden[1:], 0))).float(), dim=-1)  # [L, S, V]
        lens_probs, lens_ids = torch.topk(lens, LENS_TOP, dim=-1)
        outputs = [logits, torch.stack(attentions), torch.cat(hidden, 0), lens_ids, lens_probs]
        if self.moe is not None:
            outputs += [torch.stack(router_probs), torch.stack(router_choice)]
        return tuple(outputs + presents)


def output_names(config) -> list[str]:
    names = ["logits", "attentions", "hidden", "lens_ids", "lens_probs"]
    if config.use_moe:
        names += ["router_probs", "router_choice"]
    for i in range(config.num_hidden_layers):
        names += [f"present_key_{i}", f"present_value_{i}"]
    return names


def past_names(config) -> list[str]:
    return [f"past_{kind}_{i}" for i in range(config.num_hidden_layers) for kind in ("key", "value")]


def empty_past(config, length: int = 0) -> list[torch.Tensor]:
    shape = (1, length, config.num_key_value_heads, config.head_dim)
    return [torch.zeros(shape) for _ in range(2 * config.num_hidden_layers)]


def export(model, path: Path) -> Path:
    """torch.onnx.export of BrowserGraph(model) (the TorchScript tracer, no constant folding: folding would
    untie the head from the embedding), then the weights stored as bfloat16."""
    import onnx
    config = model.config
    graph = BrowserGraph(model.float().eval())
    ids = torch.tensor([[1, 5, 9, 12]])
    past = empty_past(config, 3)
    dynamic = {"input_ids": {1: "seq"}}
    dynamic.update({name: {1: "past"} for name in past_names(config)})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, (ids, *past), str(path), input_names=["input_ids", *past_names(config)],
                          output_names=output_names(config), dynamic_axes=dynamic, opset_version=17,
                          do_constant_folding=False, dynamo=False)
    proto = onnx.load(str(path))
    store_bfloat16(proto)
    onnx.save(proto, str(path))
    return path


def store_bfloat16(proto) -> int:
    """Float32 initializers that are exactly bfloat16 values become bfloat16 + one Cast: half the bytes,
    the same numbers. Returns the number of converted tensors."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    graph = proto.graph
    casts, kept = [], []
    converted = 0
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or np.prod(init.dims) < 1024:
            kept.append(init)
            continue
        values = numpy_helper.to_array(init)
        bits = values.view(np.uint32)
        if np.any(bits & 0xFFFF):  # not a bfloat16 value: keep it in float32
            kept.append(init)
            continue
        stored = numpy_helper.from_array((bits >> 16).astype(np.uint16), init.name + "_bf16")
        stored.data_type = TensorProto.BFLOAT16
        kept.append(stored)
        casts.append(helper.make_node("Cast", [stored.name], [init.name], to=TensorProto.FLOAT,
                                      name=f"cast_{init.name}"))
        converted += 1
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return converted


def source_digest(name: str) -> str:
    """What an exported file depends on: the checkpoint's weights and config, this module, torch."""
    from minimind.checkpoint_checks import checkpoint_folder
    folder = checkpoint_folder(name)
    h = hashlib.sha256()
    for part in ((folder / "SHA256SUMS").read_bytes() if (folder / "SHA256SUMS").exists()
                 else (folder / "model.safetensors").read_bytes(),
                 Path(__file__).read_bytes(), torch.__version__.encode()):
        h.update(part)
    return h.hexdigest()[:16]


def model_info(model) -> dict:
    c = model.config
    return {"layers": c.num_hidden_layers, "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads,
            "head_dim": c.head_dim, "hidden": c.hidden_size, "vocab": c.vocab_size,
            "context": c.max_position_embeddings, "moe": bool(c.use_moe),
            "experts": c.num_experts if c.use_moe else 0, "top_k": c.num_experts_per_tok if c.use_moe else 0,
            "eos": c.eos_token_id, "bos": c.bos_token_id, "lens_top": LENS_TOP,
            "outputs": output_names(c), "past": past_names(c)}


def export_shipped(out_dir: Path, names=SHIPPED_NAMES, cache_dir: Path | None = None, log=print) -> dict:
    """Each shipped checkpoint as OUT/NAME.onnx, its tokenizer as OUT/tokenizer.json, and OUT/models.json.
    With cache_dir, a graph whose checkpoint and exporter are unchanged is copied instead of re-exported."""
    from minimind.checkpoint import load_pretrained
    from minimind.checkpoint_checks import checkpoint_folder
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name in names:
        digest = source_digest(name)
        target = out_dir / f"{name}.onnx"
        cached = Path(cache_dir) / f"{name}-{digest}.onnx" if cache_dir else None
        model = load_pretrained(name)
        if cached is not None and cached.exists():
            shutil.copyfile(cached, target)
        else:
            log(f"exporting {name} to ONNX")
            export(model, target)
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                for old in cached.parent.glob(f"{name}-*.onnx"):
                    old.unlink()
                shutil.copyfile(target, cached)
        manifest[name] = {**model_info(model), "file": target.name, "bytes": target.stat().st_size,
                          "digest": digest}
    folder = checkpoint_folder(names[0])
    shutil.copyfile(folder / "tokenizer.json", out_dir / "tokenizer.json")
    shutil.copyfile(folder / "tokenizer_config.json", out_dir / "tokenizer_config.json")
    (out_dir / "models.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("names", nargs="*", default=list(SHIPPED_NAMES))
    args = parser.parse_args(argv)
    for name, info in export_shipped(args.out_dir, args.names).items():
        print(f"{name}: {args.out_dir / info['file']} ({info['bytes'] / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
