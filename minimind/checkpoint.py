"""Loading weights: raw MiniMind `.pth` state dicts, HF-style folders, and the book's shipped checkpoints."""
import hashlib
import json
from pathlib import Path

import torch
from transformers import GenerationConfig

from .config import MiniMindConfig
from .model import MiniMindForCausalLM

SHIPPED = Path(__file__).parent / "checkpoints"  # poetry-dense/, poetry-moe/
MANIFEST = "SHA256SUMS"


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model, or a shipped file that is missing or corrupt."""


def check_state_dict(model, state_dict: dict):
    """Raise CheckpointError naming missing, unexpected and mis-shaped keys (lm_head may be left to the tie)."""
    expected = model.state_dict()
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    misshaped = [f"{k}: checkpoint {list(state_dict[k].shape)} vs model {list(expected[k].shape)}"
                 for k in sorted(set(expected) & set(state_dict)) if state_dict[k].shape != expected[k].shape]
    raise_on_problems(set(expected) - set(state_dict) - tied, set(state_dict) - set(expected), misshaped)
    check_tie(state_dict, tied)


def check_tie(state_dict: dict, tied: set):
    """A tied model holds one matrix: refuse a checkpoint whose head and embedding differ (saved untied, chapter 8)."""
    head, embed = state_dict.get("lm_head.weight"), state_dict.get("model.embed_tokens.weight")
    if tied and head is not None and embed is not None and head.shape == embed.shape and not torch.equal(head, embed):
        gap = (head.float() - embed.float()).abs().max().item()
        raise CheckpointError(f"the checkpoint's lm_head.weight differs from model.embed_tokens.weight (max |Δ| "
                              f"{gap:.3g}): it was saved untied, but this model ties them; load it into a config "
                              "with tie_word_embeddings=False")


def check_loading_info(info: dict):
    """The same check on what transformers' from_pretrained reports (output_loading_info=True)."""
    misshaped = [f"{k}: checkpoint {list(ckpt)} vs model {list(model)}" for k, ckpt, model in info["mismatched_keys"]]
    raise_on_problems(info["missing_keys"], info["unexpected_keys"], sorted(misshaped))


def raise_on_problems(missing, unexpected, misshaped: list):
    problems = [f"{label} ({len(keys)}): {', '.join(keys[:6])}{' ...' if len(keys) > 6 else ''}"
                for label, keys in [("missing keys", sorted(missing)), ("unexpected keys", sorted(unexpected)),
                                    ("mis-shaped keys", misshaped)] if keys]
    if problems:
        raise CheckpointError("checkpoint does not match the model config: " + "; ".join(problems))


def load_state_dict_strict(model, state_dict: dict):
    """Copy `state_dict` into `model` after checking every key and shape; keeps the embedding/head tie."""
    check_state_dict(model, state_dict)
    model.load_state_dict(state_dict, strict=False)  # strict=False only for a tied lm_head left out
    return model


def load_pth(path, config: MiniMindConfig | None = None, device=None, dtype=torch.float32):
    """A raw MiniMind `.pth` (a state dict saved by torch.save) into MiniMindForCausalLM(config)."""
    state_dict = torch.load(path, map_location="cpu", weights_only=True)
    model = MiniMindForCausalLM(config or MiniMindConfig())
    return load_state_dict_strict(model, state_dict).to(device=device, dtype=dtype).eval()


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_manifest(folder):
    """Record the sha256 of every file in `folder` (run once when a checkpoint is published)."""
    folder = Path(folder)
    lines = [f"{sha256(p)}  {p.name}" for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n")


def verify_manifest(folder: Path):
    manifest = folder / MANIFEST
    if not manifest.exists():
        return
    for line in manifest.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        if not (folder / name).exists():
            raise CheckpointError(f"{folder / name} is missing; restore it from git (git checkout -- {folder})")
        if sha256(folder / name) != digest:
            raise CheckpointError(f"{folder / name} is corrupt (sha256 differs from {MANIFEST}); "
                                  "restore it from git, or retrain with the command in the README")


def checkpoint_folder(name_or_path) -> Path:
    """A shipped checkpoint's folder by name ("poetry-dense"), else an existing folder; never a hub lookup."""
    folder = SHIPPED / str(name_or_path) if (SHIPPED / str(name_or_path)).is_dir() else Path(name_or_path)
    if not folder.is_dir():
        shipped = sorted(p.name for p in SHIPPED.iterdir()) if SHIPPED.is_dir() else []
        raise CheckpointError(f"no checkpoint folder {str(name_or_path)!r}; shipped checkpoints: {shipped} "
                              "(minimind never downloads: fetch a hub model first, e.g. with "
                              "huggingface_hub.snapshot_download, and pass its folder)")
    return folder


def load_pretrained(name_or_path: str, device=None, dtype=torch.float32) -> MiniMindForCausalLM:
    """A shipped checkpoint by name ("poetry-dense", "poetry-moe") or any HF-style MiniMind folder.

    Verifies SHA256SUMS when present, checks every weight's name and shape, reads generation_config.json.
    """
    from safetensors.torch import load_file
    folder = checkpoint_folder(name_or_path)
    verify_manifest(folder)
    for needed in ("config.json", "model.safetensors"):
        if not (folder / needed).exists():
            raise CheckpointError(f"{folder} has no {needed}")
    config = MiniMindConfig(**json.loads((folder / "config.json").read_text()))
    model = MiniMindForCausalLM(config)
    load_state_dict_strict(model, load_file(folder / "model.safetensors"))
    if (folder / "generation_config.json").exists():
        model.generation_config = GenerationConfig.from_pretrained(folder, local_files_only=True)
    return model.to(device=device, dtype=dtype).eval()


def load_tokenizer(name_or_path: str):
    """The tokenizer saved next to a checkpoint (a local folder only)."""
    from transformers import AutoTokenizer
    folder = checkpoint_folder(name_or_path)
    if not any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise CheckpointError(f"{folder} has no tokenizer (tokenizer.json / tokenizer_config.json)")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
