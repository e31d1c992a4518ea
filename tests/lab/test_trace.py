import torch

from model_helpers import tiny_model
from minimind.lab.trace import format_trace, trace_shapes


def test_trace_of_prefill_and_cached_step():
    model = tiny_model()
    ids = torch.randint(0, 320, (2, 5))
    rows = {r.name: r for r in trace_shapes(model, ids)}
    assert rows["model.embed_tokens"].outputs == "[2, 5, 64]"
    assert rows["model.layers.0.self_attn.k_proj"].outputs == "[2, 5, 32]"
    assert rows["model.layers.1.self_attn.q_norm"].inputs == "[2, 5, 4, 16]"
    assert rows["lm_head"].outputs == "[2, 5, 320]"
    past = model(ids[:, :3], use_cache=True).past_key_values
    step = {r.name: r for r in trace_shapes(model, ids[:, 3:4], past_key_values=past, use_cache=True)}
    assert step["model.layers.0.self_attn"].outputs == "([2, 1, 64], ([2, 4, 2, 16], [2, 4, 2, 16]))"
    assert "dropout" not in format_trace(list(rows.values()))


def test_hooks_are_removed():
    model = tiny_model()
    trace_shapes(model, torch.zeros(1, 2, dtype=torch.long))
    assert all(not m._forward_hooks for m in model.modules())
