"""Numerics as in transformers' Qwen3 family: the loss and the MoE router in float32 under bf16."""
import torch
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

from minimind import MiniMindForCausalLM
from minimind.lab.moe_lab import router_inputs
from model_helpers import random_ids, tiny_model


def shipped(name):
    return MiniMindForCausalLM.from_pretrained(name, dtype=torch.bfloat16).eval()


@torch.no_grad()
def test_bf16_loss_is_the_fp32_cross_entropy_of_its_logits():
    model = shipped("poetry-dense")
    ids = random_ids(2, 64, seed=7) + 3  # ids 3..322 of the 6400-token vocabulary
    out = model(ids, labels=ids)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    expected = ForCausalLMLoss(out.logits, ids, model.config.vocab_size)
    # the same fp32 per-token losses, summed in a different order (HF keeps the last position)
    torch.testing.assert_close(out.loss, expected, rtol=1e-6, atol=0)


def test_num_items_in_batch_as_in_transformers(ids):
    model = tiny_model()
    labels = ids.clone()
    labels[0, :6] = -100
    n = torch.tensor(31)  # Trainer's count over a whole accumulated batch, not just this one
    out = model(ids, labels=labels, num_items_in_batch=n)
    expected = ForCausalLMLoss(out.logits, labels, model.config.vocab_size, num_items_in_batch=n)
    # fp32 sums of the same per-token losses, in a different order
    torch.testing.assert_close(out.loss, expected, rtol=1e-6, atol=0)


@torch.no_grad()
def test_bf16_routing_is_qwen3_moe_routing():
    model = shipped("poetry-moe")
    ids = random_ids(4, 128, seed=8) + 3
    _, inputs = router_inputs(model, ids)  # each MoE layer's input [N, hidden], bf16
    for layer, x in zip(model.model.layers, inputs):
        reference = Qwen3MoeTopKRouter(model.config).to(torch.bfloat16)
        reference.weight.copy_(layer.mlp.gate.weight)
        logits, weights, experts = reference(x)
        ours_weights, ours_experts = layer.mlp.route(layer.mlp.gate(x))
        # exact: the same fp32 softmax, top-k and renormalisation on the same bf16 logits
        assert torch.equal(ours_experts, experts) and torch.equal(ours_weights, weights)
        assert ours_weights.dtype == torch.bfloat16


def test_float64_routing_stays_float64():
    # fp32 is a floor, not a cap: chapter 6 recomputes a layer in float64 to tell rounding from
    # signal, which a router pinned to float32 would defeat
    model = tiny_model(use_moe=True).double()
    logits = torch.randn(16, model.config.num_experts, dtype=torch.float64, requires_grad=True)
    weights, _ = model.model.layers[0].mlp.route(logits)
    assert weights.dtype == torch.float64
    expert_out = torch.randn(16, 1, dtype=torch.float64)
    (weights * expert_out).sum().backward()
    # top-1 renormalised: w = p / p, so d w / d logits vanishes up to float64 rounding
    assert logits.grad.abs().max() < 1e-12
