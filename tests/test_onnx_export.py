"""minimind/lab/browser_export.py: the ONNX graphs of the live panels, run by Python onnxruntime, against the
torch model they were exported from (MiniMindForCausalLM with output_attentions / hidden states / router logits).

Bounds from the issue: logits <= 1e-4, attention probabilities <= 1e-5, router choices identical; the KV-cache
path gives the same logits as a full forward, and its greedy continuation equals `model.generate`'s.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from minimind.checkpoint import load_pretrained, load_tokenizer  # noqa: E402
from minimind.lab import browser_export  # noqa: E402

pytestmark = pytest.mark.slow  # exporting both checkpoints takes ~40 s on 2 busy cores

PROMPTS = ["床前明月光，", "月", "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
           "Hello, 世界 123 🌙\t<|im_end|>"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("live")
    manifest = browser_export.export_shipped(out, log=lambda *_: None)
    return out, manifest


def run(session, config, ids, past=None):
    past = past if past is not None else browser_export.empty_past(config)
    feeds = {"input_ids": np.asarray([ids], dtype=np.int64)}
    feeds.update({n: np.asarray(p, dtype=np.float32) for n, p in zip(browser_export.past_names(config), past)})
    names = browser_export.output_names(config)
    return dict(zip(names, session.run(None, feeds)))


def torch_reference(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True,
                     output_router_logits=True)


def session(out, name):
    return ort.InferenceSession(str(out / f"{name}.onnx"), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", browser_export.SHIPPED_NAMES)
def test_graph_equals_the_torch_model(exported, name):
    out, _ = exported
    model, tok = load_pretrained(name), load_tokenizer(name)
    sess = session(out, name)
    context = model.config.max_position_embeddings
    rng = np.random.default_rng(0)
    full = [int(i) for i in rng.integers(3, model.config.vocab_size, context)]  # the model's full context
    for ids in [tok(p)["input_ids"] for p in PROMPTS] + [full]:
        got, ref = run(sess, model.config, ids), torch_reference(model, ids)
        assert np.abs(got["logits"] - ref.logits.numpy()).max() <= 1e-4, (name, len(ids))
        with torch.no_grad():  # the default (fused attention) path too
            plain = model(torch.tensor([ids])).logits.numpy()
        assert np.abs(got["logits"] - plain).max() <= 1e-4
        attn = np.stack([a[0].numpy() for a in ref.attentions])
        assert got["attentions"].shape == attn.shape and np.abs(got["attentions"] - attn).max() <= 1e-5
        # residual stream: embeddings, then each block (the model's last hidden state is after the final norm)
        hidden = torch.cat(ref.hidden_states[:-1], 0).numpy()
        assert np.abs(got["hidden"][:-1] - hidden).max() <= 1e-4
        final = model.model.norm(torch.from_numpy(got["hidden"][-1:])).detach().numpy()
        assert np.abs(final - ref.hidden_states[-1].numpy()).max() <= 1e-4
        assert np.array_equal(got["lens_ids"][-1, :, 0], ref.logits[0].argmax(-1).numpy())
        if model.config.use_moe:
            probs = np.stack([torch.softmax(r.float(), -1).numpy() for r in ref.router_logits])
            assert np.abs(got["router_probs"] - probs).max() <= 1e-5
            choice = np.stack([torch.topk(torch.from_numpy(p), model.config.num_experts_per_tok).indices.numpy()
                               for p in probs])
            assert np.array_equal(got["router_choice"], choice)


@pytest.mark.parametrize("name", browser_export.SHIPPED_NAMES)
def test_cached_greedy_decoding_equals_generate(exported, name):
    """What the page does: the prompt once, then one token at a time with the cache."""
    out, _ = exported
    model, tok = load_pretrained(name), load_tokenizer(name)
    sess = session(out, name)
    config = model.config
    prompt = tok("床前明月光，")["input_ids"]
    expected = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=32)[0, len(prompt):].tolist()
    result, fed = run(sess, config, prompt), list(prompt)
    tokens = []
    for _ in range(32):
        tokens.append(int(result["logits"][0, -1].argmax()))
        if tokens[-1] == config.eos_token_id:
            break
        past = [result[n] for n in browser_export.output_names(config) if n.startswith("present_")]
        result = run(sess, config, [tokens[-1]], past)
        fed.append(tokens[-1])
    assert tokens == expected
    # the last cached step equals a fresh full forward over the whole line
    full = run(sess, config, fed)
    assert np.abs(full["logits"][0, -1] - result["logits"][0, -1]).max() <= 1e-4
    assert np.abs(full["attentions"][:, :, -1:] - result["attentions"]).max() <= 1e-5


def test_weights_stored_as_bfloat16_unchanged(exported):
    """bfloat16 storage of the bfloat16-trained weights rounds nothing; the files fit the page budget."""
    out, manifest = exported
    for name, info in manifest.items():
        proto = onnx.load(str(out / info["file"]))
        model = load_pretrained(name)
        n_model = sum(p.numel() for p in model.parameters())
        weights = [i for i in proto.graph.initializer if "freqs" not in i.name]  # the RoPE tables are not weights
        bf16 = [i for i in weights if i.data_type == onnx.TensorProto.BFLOAT16]
        assert all(i.data_type == onnx.TensorProto.FLOAT and np.prod(i.dims) < 1024 for i in weights
                   if i.data_type != onnx.TensorProto.BFLOAT16)  # only the small norm gains stay float32
        params = sum(int(np.prod(i.dims)) for i in weights if np.prod(i.dims) > 1)
        assert params == n_model, (name, params, n_model)  # every weight once: the head stays tied
        assert sum(int(np.prod(i.dims)) for i in bf16) > 0.99 * n_model
        assert info["bytes"] < 2.2 * n_model + 3e6
    assert manifest["poetry-dense"]["bytes"] < 12e6 and manifest["poetry-moe"]["bytes"] < 26e6


def test_a_second_export_is_served_from_the_cache(tmp_path, exported):
    out, manifest = exported
    cache = tmp_path / "cache"
    name = "poetry-dense"
    cache.mkdir()
    (cache / f"{name}-{manifest[name]['digest']}.onnx").write_bytes((out / f"{name}.onnx").read_bytes())
    logged = []
    browser_export.export_shipped(tmp_path / "o", [name], cache_dir=cache, log=logged.append)
    assert logged == [] and (tmp_path / "o" / f"{name}.onnx").read_bytes() == (out / f"{name}.onnx").read_bytes()
