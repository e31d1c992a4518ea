"""Checkpoint checks that need no model class: folder, manifest, weights' names, shapes.

Used by `MiniMindForCausalLM.from_pretrained` and minimind.checkpoint's loaders; here,
model.py imports them without importing checkpoint.py, which builds models (chapter 8).
"""
import hashlib
from pathlib import Path

import torch

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
