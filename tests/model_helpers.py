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


# fp32 logits (|logit| < 5) of one model computed two ways, e.g. ours in one forward vs the Qwen3 twin's cached
# generate: measured 2.4e-6 to 5.1e-6 over 8 seeds on the AVX2 and default kernels
LOGIT_TOL = 1e-5


@torch.no_grad()
def path_logits(model, seqs, prompt_len, attention_mask=None):
    """[B, new, vocab] fp32: one full forward's logits at each step that chose a token of seqs[:, prompt_len:]."""
    mask = attention_mask
    if mask is not None:  # generate extends the mask with ones for every new token
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], seqs.shape[1] - 1 - mask.shape[1])], -1)
    return model(seqs[:, :-1], attention_mask=mask).logits[:, prompt_len - 1:].float()


def assert_clear_greedy_path(model, seqs, prompt_len, attention_mask=None, eos=(), min_new_tokens=0,
                             tol=LOGIT_TOL):
    """Every greedy token of seqs is the full forward's argmax by a top-2 lead above 100 * tol; returns the least lead.

    Greedy tokens from logits computed another way (a cache, other kernels, the transformers twin) can then be
    compared exactly: logits that agree to tol cannot flip such a choice, so a different token is a bug, not
    rounding. A near-tie fails here, loudly, instead of making the exact comparison depend on the CPU.
    Steps after a row's EOS (padding, not chosen) are skipped; EOS is banned before min_new_tokens, as in generate.
    """
    logits, new = path_logits(model, seqs, prompt_len, attention_mask), seqs[:, prompt_len:]
    chosen = torch.ones_like(new, dtype=torch.bool)
    if eos:
        is_eos = torch.isin(new, torch.tensor(list(eos), device=new.device))
        chosen = is_eos.long().cumsum(-1) - is_eos.long() == 0  # no EOS before this step
        logits[:, :min_new_tokens, list(eos)] = float("-inf")
    top2 = logits.topk(2, -1).values
    lead = (top2[..., 0] - top2[..., 1]).masked_fill(~chosen, float("inf"))
    row, step = divmod(int(lead.argmin()), lead.shape[1])
    least = float(lead[row, step])
    assert least > 100 * tol, (
        f"row {row}, step {step}: the top-2 logits lead by only {least:.1e}, under 100 x {tol:.0e}; rounding on "
        "another kernel path could flip this greedy token: pick another seed or prompt for an exact comparison")
    argmax = logits.argmax(-1)
    assert torch.equal(new[chosen], argmax[chosen]), "a greedy token is not the argmax of the full forward's logits"
    return least
