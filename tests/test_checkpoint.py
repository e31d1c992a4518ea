import pytest
import torch

from model_helpers import tiny_config, tiny_model
from minimind.checkpoint import CheckpointError, load_pretrained, load_pth, write_manifest


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
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        load_pretrained(str(tmp_path))


def test_unknown_name():
    with pytest.raises(CheckpointError, match="no checkpoint folder 'poetry-huge'"):
        load_pretrained("poetry-huge")
