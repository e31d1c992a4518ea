import ast
import time
from pathlib import Path

import pytest
import torch

import minimind
from model_helpers import tiny_config, tiny_model
from minimind import MiniMindForCausalLM
from minimind.checkpoint import CheckpointError, load_pretrained, load_pth, load_tokenizer, write_manifest


@torch.no_grad()
def test_raw_minimind_pth_loads(tmp_path, ids):
    model = tiny_model()
    torch.save({k: v.half() for k, v in model.state_dict().items()}, tmp_path / "pretrain_64.pth")  # as MiniMind saves
    loaded = load_pth(tmp_path / "pretrain_64.pth", tiny_config())
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert (loaded(ids).logits - model(ids).logits).abs().max() < 0.05  # fp16 rounding only


def test_pth_with_wrong_keys_names_them(tmp_path):
    state = tiny_model().state_dict()
    state["model.layers.0.self_attn.wq.weight"] = state.pop("model.layers.0.self_attn.q_proj.weight")
    state["model.layers.1.mlp.up_proj.weight"] = torch.zeros(3, 3)
    torch.save(state, tmp_path / "bad.pth")
    with pytest.raises(CheckpointError) as error:
        load_pth(tmp_path / "bad.pth", tiny_config())
    message = str(error.value)
    assert "missing keys (1): model.layers.0.self_attn.q_proj.weight" in message
    assert "unexpected keys (1): model.layers.0.self_attn.wq.weight" in message
    assert "model.layers.1.mlp.up_proj.weight: checkpoint [3, 3] vs model [256, 64]" in message


def test_config_mismatch_is_reported(tmp_path):
    torch.save(tiny_model().state_dict(), tmp_path / "m.pth")
    with pytest.raises(CheckpointError, match="mis-shaped keys"):
        load_pth(tmp_path / "m.pth", tiny_config(hidden_size=128))


@torch.no_grad()
def test_folder_with_manifest(tmp_path, ids):
    model = tiny_model(use_moe=True)
    model.save_pretrained(tmp_path)
    write_manifest(tmp_path)
    assert torch.allclose(load_pretrained(str(tmp_path))(ids).logits, model(ids).logits, atol=1e-6)
    data = bytearray((tmp_path / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):
        load_pretrained(str(tmp_path))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):
        MiniMindForCausalLM.from_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        load_pretrained(str(tmp_path))


def test_unknown_name():
    with pytest.raises(CheckpointError, match="no checkpoint folder 'poetry-huge'"):
        load_pretrained("poetry-huge")


def corrupt_weights(folder, drop=None, add=None, reshape=None):
    """Rewrite folder/model.safetensors without `drop`, with an extra `add` and `reshape` made [3, 3]."""
    from safetensors.torch import load_file, save_file
    state = load_file(folder / "model.safetensors")
    for key in [drop] if drop else []:
        state.pop(key)
    if add:
        state[add] = torch.zeros(2)
    if reshape:
        state[reshape] = torch.zeros(3, 3)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def test_from_pretrained_names_missing_unexpected_and_misshaped_keys(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    corrupt_weights(tmp_path, drop="model.layers.0.self_attn.q_proj.weight", add="model.extra.weight",
                    reshape="model.layers.1.mlp.up_proj.weight")
    with pytest.raises(CheckpointError) as error:
        MiniMindForCausalLM.from_pretrained(tmp_path)
    message = str(error.value)
    assert "missing keys (1): model.layers.0.self_attn.q_proj.weight" in message
    assert "unexpected keys (1): model.extra.weight" in message
    assert "model.layers.1.mlp.up_proj.weight: checkpoint [3, 3] vs model [256, 64]" in message


def test_from_pretrained_needs_an_untied_head(tmp_path):
    tiny_model(tie_word_embeddings=False).save_pretrained(tmp_path)
    MiniMindForCausalLM.from_pretrained(tmp_path)  # complete: loads
    corrupt_weights(tmp_path, drop="lm_head.weight")
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): lm_head.weight"):
        MiniMindForCausalLM.from_pretrained(tmp_path)


@torch.no_grad()
def test_from_pretrained_loads_shipped_names_and_saved_folders(tmp_path, ids):
    shipped = MiniMindForCausalLM.from_pretrained("poetry-moe", dtype=torch.float32).eval()  # tied head absent
    assert torch.equal(shipped(ids).logits, load_pretrained("poetry-moe")(ids).logits)
    model = tiny_model()
    model.save_pretrained(tmp_path)
    loaded, info = MiniMindForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert torch.equal(loaded(ids).logits, model(ids).logits) and not any(info["missing_keys"])


@pytest.mark.parametrize("load", [load_pretrained, load_tokenizer, MiniMindForCausalLM.from_pretrained])
@pytest.mark.parametrize("path", ["nope", "/no/such/folder", "someone/some-model"])
def test_a_missing_path_fails_at_once_without_the_hub(load, path):
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=f"no checkpoint folder '{path}'; shipped checkpoints: "
                                              r"\['poetry-dense', 'poetry-moe'\]"):
        load(path)
    assert time.perf_counter() - start < 1.0


def test_a_folder_without_a_tokenizer(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="has no tokenizer"):
        load_tokenizer(str(tmp_path))


@pytest.mark.parametrize("name", ["poetry-dense", "poetry-moe"])
def test_shipped_generation_config_matches_the_tokenizer(name):
    config, tokenizer = load_pretrained(name).generation_config, load_tokenizer(name)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 0)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 0)
    assert MiniMindForCausalLM.from_pretrained(name).generation_config.pad_token_id == 0


def test_an_untied_checkpoint_does_not_load_into_a_tied_model(tmp_path):
    untied = tiny_model(tie_word_embeddings=False)
    state = untied.state_dict()
    assert not torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    torch.save(state, tmp_path / "untied.pth")
    with pytest.raises(CheckpointError, match="saved untied"):
        load_pth(tmp_path / "untied.pth", tiny_config())
    assert load_pth(tmp_path / "untied.pth", tiny_config(tie_word_embeddings=False)) is not None
    tied = tiny_model().state_dict()  # a tied model's state dict holds the same matrix twice: it loads
    torch.save(tied, tmp_path / "tied.pth")
    assert load_pth(tmp_path / "tied.pth", tiny_config()) is not None


@pytest.mark.parametrize("module", ["model", "checkpoint_checks"])
def test_model_and_checkpoint_do_not_import_each_other(module):
    """checkpoint.py builds models; from_pretrained needs only checkpoint_checks."""
    tree = ast.parse((Path(minimind.__file__).parent / f"{module}.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"checkpoint", "model"}, imported
