import torch

from model_helpers import tiny_model
from minimind.lab.probes import record_residual_stream, rms, router_choices, router_load


@torch.no_grad()
def test_router_choices_are_what_the_moe_layer_computes():
    model = tiny_model(use_moe=True)
    ids = torch.randint(0, 320, (2, 9))
    with record_residual_stream(model) as stream:
        out = model(ids, output_router_logits=True)
    assert len(out.router_logits) == 2 and out.router_logits[0].shape == (18, 4)
    layer = model.model.layers[0]
    x = layer.post_attention_layernorm(stream[0]["after_attention"]).view(-1, 64)  # what the router read
    probs, choices = router_choices(out.router_logits[0], k := model.config.num_experts_per_tok)
    # exact: x is the block's own sum (a + b == b + a in floats) through the same norm, and the gate and softmax
    # run on the same [18, 64] shape: the same kernels on the same numbers
    assert torch.equal(probs, torch.softmax(layer.mlp.gate(x), -1))
    # the layer's output is the renormalised top-k mixture of exactly these experts (it routes this same x, so
    # its choices are these; the least top-2 router lead is 2.9e-3 anyway)
    weights = probs.gather(-1, choices)
    weights = weights / weights.sum(-1, keepdim=True)
    mixture = sum(weights[:, j:j + 1] * torch.stack([layer.mlp.experts[e](x[n]) for n, e in enumerate(choices[:, j])])
                  for j in range(k))
    # atol 1e-5: token by token here, batched in the layer: float32 sums of outputs ~2.4 round apart (measured
    # 9.5e-7, 8.3e-7 on the default kernels)
    assert torch.allclose(layer.mlp(x.view(2, 9, 64))[0].view(-1, 64), mixture, rtol=0, atol=1e-5)
    load = router_load(choices, 4)
    # 4 shares n / 18, each rounded to float32 (half an ulp, <= 3e-8), summed: a few ulp of 1 at most (measured 0)
    assert torch.isclose(load.sum(), torch.tensor(1.0), rtol=0, atol=1e-6)
    assert load.shape == (4,)
    assert all(not m._forward_hooks for m in model.modules())


def test_residual_stream_adds_up():
    model = tiny_model()
    ids = torch.randint(0, 320, (1, 6))
    with record_residual_stream(model) as stream, torch.no_grad():
        model(ids)
        layer = model.model.layers[0]
        h = stream[0]["after_attention"]
        expected = h + layer.mlp(layer.post_attention_layernorm(h))
    # exact: the block's own operations on the same tensors and shapes (its h is attention out + input, the
    # recorded one input + attention out: float addition commutes exactly)
    assert torch.equal(stream[0]["output"], expected)
    assert torch.equal(stream[1]["input"], stream[0]["output"])  # passed on: exact
    assert rms(stream[1]["output"]).shape == (1, 6)
