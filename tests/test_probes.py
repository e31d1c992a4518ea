import torch

from model_helpers import tiny_model
from minimind.probes import record_residual_stream, record_routing, rms, router_load


def test_routing_record_matches_the_moe_layer():
    model = tiny_model(use_moe=True)
    ids = torch.randint(0, 320, (2, 9))
    with record_routing(model) as routing:
        model(ids)
    assert sorted(routing.probs) == [0, 1] and routing.probs[0].shape == (18, 4)
    load = router_load(routing.choices[0], 4)
    assert torch.isclose(load.sum(), torch.tensor(1.0)) and load.shape == (4,)
    assert all(not m._forward_hooks for m in model.modules())


def test_residual_stream_adds_up():
    model = tiny_model()
    ids = torch.randint(0, 320, (1, 6))
    with record_residual_stream(model) as stream, torch.no_grad():
        model(ids)
        layer = model.model.layers[0]
        h = stream[0]["after_attention"]
        expected = h + layer.mlp(layer.post_attention_layernorm(h))
    assert torch.allclose(stream[0]["output"], expected, atol=1e-6)
    assert torch.equal(stream[1]["input"], stream[0]["output"])
    assert rms(stream[1]["output"]).shape == (1, 6)
