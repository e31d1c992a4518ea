import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

from model_helpers import TINY, tiny_config, tiny_model
from minimind import MiniMindConfig, MiniMindForCausalLM


def test_head_is_tied_to_embedding():
    model = tiny_model()
    assert model.lm_head.weight is model.model.embed_tokens.weight


@torch.no_grad()
def test_logits_to_keep(ids):
    model = tiny_model()
    full = model(ids).logits
    # the head on one row instead of all: the same products, blocked differently by the GEMM
    torch.testing.assert_close(model(ids, logits_to_keep=1).logits, full[:, -1:], atol=1e-5, rtol=1e-5)
    assert model(ids, logits_to_keep=0).logits.shape == full.shape


def test_shifted_loss_and_ignore_index(ids):
    model = tiny_model()
    labels = ids.clone()
    labels[:, :5] = -100
    out = model(ids, labels=labels)
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, TINY["vocab_size"]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
    # the same cross-entropy on the same logits; the package may sum in another order
    torch.testing.assert_close(out.loss, expected, atol=0, rtol=1e-6)
    assert out.aux_loss == 0 and out.hidden_states.shape == (2, 11, 64)


def test_moe_aux_loss_only_in_training(ids):
    model = tiny_model(use_moe=True)
    assert model(ids).aux_loss == 0
    model.train()
    aux = model(ids).aux_loss
    # E * sum(load * mean prob) * coef is at least coef per layer (equality when perfectly balanced)
    assert aux >= 2 * 5e-4 - 1e-9 and aux.requires_grad


def test_registered_with_auto_classes(tmp_path):
    config = AutoConfig.for_model("minimind", **TINY)
    assert isinstance(AutoModelForCausalLM.from_config(config), MiniMindForCausalLM)


SCRIPT = """
import sys, torch, minimind
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval().requires_grad_(False)
assert model.lm_head.weight is model.model.embed_tokens.weight, "tie lost"
ids = torch.load(sys.argv[2])
torch.save(model(ids).logits, sys.argv[3])
"""


@pytest.mark.slow
@pytest.mark.parametrize("use_moe", [False, True])
@torch.no_grad()
def test_save_and_load_in_a_fresh_process(tmp_path, ids, use_moe):
    model = tiny_model(use_moe=use_moe)
    model.save_pretrained(tmp_path / "model")
    torch.save(ids, tmp_path / "ids.pt")
    subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "model"), str(tmp_path / "ids.pt"),
                    str(tmp_path / "logits.pt")], check=True, capture_output=True)
    reloaded, original = torch.load(tmp_path / "logits.pt"), model(ids).logits
    if not use_moe:
        assert torch.equal(reloaded, original)
    else:  # expert batches are gathered into fresh buffers; float sums may differ in the last bit
        assert (reloaded - original).abs().max() <= 1e-5


@pytest.mark.parametrize("make_ids, message", [
    (lambda: torch.tensor([[1, 2, 320]]), r"token ids \[320\] are outside the vocabulary \[0, 320\)"),
    (lambda: torch.tensor([[-1, 2]]), r"token ids \[-1\] are outside"),
    (lambda: torch.tensor([1, 2, 3]), r"must be a 2-D tensor \[batch, seq_len\].*\(3,\)"),
    (lambda: torch.zeros(1, 300, dtype=torch.long), "reaches position 300 .* max_position_embeddings is 256"),
])
def test_bad_input_ids_are_named(make_ids, message):
    with pytest.raises(ValueError, match=message):
        tiny_model()(make_ids())


def test_float_ids_rejected():
    with pytest.raises(TypeError, match="integer token ids"):
        tiny_model()(torch.zeros(1, 3))


def test_cache_counts_toward_max_positions():
    model = tiny_model()
    out = model(torch.zeros(1, 250, dtype=torch.long), use_cache=True)
    with pytest.raises(ValueError, match=r"reaches position 257 \(250 cached \+ 7 new\)"):
        model(torch.zeros(1, 7, dtype=torch.long), past_key_values=out.past_key_values)


@pytest.mark.parametrize("use_moe", [False, True])
@torch.no_grad()
def test_filled_dynamic_cache_equals_the_full_forward(ids, use_moe):
    model = tiny_model(use_moe=use_moe)
    full = model(ids).logits
    cache = DynamicCache()
    prefill = model(ids[:, :7], past_key_values=cache, use_cache=True)
    assert prefill.past_key_values is cache and cache.get_seq_length() == 7  # filled in place, as in transformers
    steps = [model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits for t in range(7, 11)]
    delta = (torch.cat([prefill.logits, *steps], 1) - full).abs().max()
    assert delta <= 1e-5, f"max |Δlogits| = {delta:.2e}"


def test_a_wrong_cache_is_a_clear_error(ids):
    with pytest.raises(TypeError, match=r"past_key_values must be None, a list of 2 \(key, value\) pairs or a "
                                        r"transformers Cache, got str"):
        tiny_model()(ids, past_key_values="cache")
    with pytest.raises(TypeError, match="got list of length 1"):
        tiny_model()(ids, past_key_values=[None])


def test_wrong_attention_mask_shape(ids):
    with pytest.raises(ValueError, match=r"attention_mask must be \[batch, cached \+ new tokens\] = \[2, 11\]"):
        tiny_model()(ids, attention_mask=torch.ones(2, 10))


def test_default_model_size():
    with torch.device("meta"):
        model = MiniMindForCausalLM(MiniMindConfig())
    assert sum(p.numel() for p in model.parameters()) == 63_912_192


@pytest.mark.parametrize("positions, message", [
    (torch.arange(11), r"position_ids must be ints \[2 or 1, 11\], got \[11\]"),
    (torch.zeros(2, 10, dtype=torch.long), r"\[2 or 1, 11\], got \[2, 10\]"),
    (torch.zeros(3, 11, dtype=torch.long), r"\[2 or 1, 11\], got \[3, 11\]"),
    (torch.zeros(2, 11), r"must be ints \[2 or 1, 11\], got \[2, 11\]"),
    (torch.arange(11)[None] + 250, "span 250..260 but max_position_embeddings is 256"),
    (torch.arange(11)[None] - 1, "position_ids span -1..9"),
])
def test_bad_position_ids_are_named(ids, positions, message):
    with pytest.raises(ValueError, match=message):
        tiny_model()(ids, position_ids=positions)


def test_unimplemented_arguments_are_named(ids):
    model = tiny_model()
    with pytest.raises(TypeError, match="not implement inputs_embeds, token_type_ids"):
        model(ids, inputs_embeds=torch.zeros(2, 11, 64), token_type_ids=ids)
    with pytest.raises(TypeError, match="does not implement return_dict"):
        model(ids, return_dict=False)
    assert model(ids, return_dict=True).logits.shape == (2, 11, 320)  # a no-op



def test_moe_loss_includes_the_aux_loss_in_training(ids):
    model = tiny_model(use_moe=True, num_experts_per_tok=2).train()  # both terms real
    out = model(ids, labels=ids)
    assert out.aux_loss > 0 and out.loss == out.lm_loss + out.aux_loss  # exact: the sum
    gate = model.model.layers[0].mlp.gate.weight
    lm_grad, aux_grad = (torch.autograd.grad(loss, gate, retain_graph=True)[0]
                         for loss in (out.lm_loss, out.aux_loss))
    out.loss.backward()  # what Trainer or a hand-written loop does with out.loss
    # the sum's gradient is the sum of the gradients, to fp32 rounding of entries ~1e-2
    torch.testing.assert_close(gate.grad, lm_grad + aux_grad, rtol=1e-5, atol=1e-7)
    assert aux_grad.abs().max() > 100 * 1e-7  # the aux term is far above that tolerance
    model.eval()
    out = model(ids, labels=ids)
    assert out.aux_loss == 0 and torch.equal(out.loss, out.lm_loss)  # x + 0.0 is x
