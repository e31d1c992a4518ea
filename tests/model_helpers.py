"""Shared test helpers: tiny configs and random weights large enough that differences show."""
import torch

from minimind import MiniMindConfig, MiniMindForCausalLM

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=320,
            max_position_embeddings=256)


def tiny_config(**overrides) -> MiniMindConfig:
    return MiniMindConfig(**{**TINY, **overrides})


@torch.no_grad()
def randomize_(model, seed=0):
    """Weights ~ N(0, 1/fan_in) and norm gains ~ 1 + N(0, 0.1^2): logits of order 1, not 1e-3."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
        else:
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def tiny_model(seed=0, **overrides) -> MiniMindForCausalLM:
    torch.manual_seed(seed)
    return randomize_(MiniMindForCausalLM(tiny_config(**overrides)), seed).eval()


def random_ids(batch=2, seq_len=11, seed=1):
    return torch.randint(0, TINY["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(seed))
