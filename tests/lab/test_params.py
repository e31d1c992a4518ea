import torch

from minimind import MiniMindConfig, MiniMindForCausalLM
from minimind.lab.params import count_parameters, parameter_bytes, parameter_table


def meta_model(**kwargs):
    with torch.device("meta"):
        return MiniMindForCausalLM(MiniMindConfig(**kwargs))


def test_dense_63_9m():
    model = meta_model()
    table = parameter_table(model)
    assert count_parameters(model) == {"total": 63_912_192, "active": 63_912_192}
    assert sum(table.values()) == 63_912_192
    assert table["embedding (tied with lm_head)"] == 6400 * 768
    assert table["feed-forward (SwiGLU)"] == 8 * 3 * 768 * 2432
    assert parameter_bytes(model, 2) == 2 * 63_912_192


def test_moe_198m_total_64m_active():
    counts = count_parameters(meta_model(use_moe=True))
    assert round(counts["total"] / 1e6) == 198 and round(counts["active"] / 1e6) == 64
    assert counts["active"] - 63_912_192 == 8 * 4 * 768  # only the routers are extra for one token
