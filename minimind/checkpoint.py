"""Loading weights: raw MiniMind `.pth` state dicts, HF-style folders, and the book's shipped checkpoints."""
import json

import torch
from transformers import GenerationConfig

from .checkpoint_checks import (MANIFEST, SHIPPED, CheckpointError, check_loading_info,  # noqa: F401
                                check_state_dict, check_tie, checkpoint_folder, raise_on_problems,
                                sha256, verify_manifest, write_manifest)
from .config import MiniMindConfig
from .model import MiniMindForCausalLM


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
