"""Parameter accounting: where the 63.9M parameters live, and total vs active for MoE (chapter 1)."""
import re

COMPONENTS = [  # (component, regex on the parameter name), first match wins
    ("embedding (tied with lm_head)", r"embed_tokens|lm_head"),
    ("attention q/o projections", r"self_attn\.(q|o)_proj"),
    ("attention k/v projections", r"self_attn\.(k|v)_proj"),
    ("QK-Norm", r"self_attn\.(q|k)_norm"),
    ("block RMSNorms", r"input_layernorm|post_attention_layernorm"),
    ("MoE router", r"mlp\.gate\.weight"),
    ("feed-forward (SwiGLU)", r"mlp\.(experts\.\d+\.)?(gate|up|down)_proj"),
    ("final RMSNorm", r"^model\.norm\."),
]


def unique_parameters(model):
    """(name, parameter) pairs, each Parameter object once: a tied weight is counted a single time."""
    return list(model.named_parameters(remove_duplicate=True))


def component_of(name: str) -> str:
    for component, pattern in COMPONENTS:
        if re.search(pattern, name):
            return component
    raise KeyError(f"no component matches parameter {name}")


def parameter_table(model) -> dict[str, int]:
    """Parameter count per component, in the order of COMPONENTS (components absent from the model omitted)."""
    counts = {}
    for name, p in unique_parameters(model):
        counts[component_of(name)] = counts.get(component_of(name), 0) + p.numel()
    return {c: counts[c] for c, _ in COMPONENTS if c in counts}


def count_parameters(model) -> dict[str, int]:
    """Total parameters, and active ones: those a single token passes through (top-k of the experts)."""
    config = model.config
    total = sum(p.numel() for _, p in unique_parameters(model))
    experts = sum(p.numel() for n, p in unique_parameters(model) if ".experts." in n)
    active = total - experts
    if experts:
        active += experts * config.num_experts_per_tok // config.num_experts
    return {"total": total, "active": active}


def parameter_bytes(model, dtype_bytes: int) -> int:
    """Memory for the weights alone at a given element size (4 for fp32, 2 for bf16)."""
    return count_parameters(model)["total"] * dtype_bytes
