"""Instrumentation for the chapters: router choices and the residual stream, recorded with forward hooks.

Nothing here changes the model's arithmetic; hooks are removed when the `with` block ends.
Attention probabilities come from the model itself: `model(ids, output_attentions=True).attentions`.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .moe import MOEFeedForward


@dataclass
class Routing:
    """Per MoE layer: router probabilities [N, E] and chosen experts [N, k] for the N tokens seen."""
    probs: dict = field(default_factory=dict)
    choices: dict = field(default_factory=dict)


@contextmanager
def record_routing(model):
    """with record_routing(model) as routing: model(ids) -> routing.probs[layer], routing.choices[layer]."""
    routing, handles = Routing(), []
    for layer in model.model.layers:
        if isinstance(layer.mlp, MOEFeedForward):
            def hook(gate, args, logits, i=layer.layer_id, k=layer.mlp.config.num_experts_per_tok):
                probs = F.softmax(logits.detach().float(), dim=-1)  # [N, E], as the router computes it
                routing.probs[i] = probs
                routing.choices[i] = probs.topk(k, dim=-1).indices
            handles.append(layer.mlp.gate.register_forward_hook(hook))
    try:
        yield routing
    finally:
        for h in handles:
            h.remove()


def router_load(choices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Share of routed (token, slot) pairs that each expert receives: [E], sums to 1."""
    return torch.bincount(choices.flatten(), minlength=num_experts).float() / choices.numel()


@contextmanager
def record_residual_stream(model):
    """Per layer: the residual stream entering the block, after attention is added, and leaving it.

    with record_residual_stream(model) as stream: model(ids) -> stream[i]["input" | "after_attention" | "output"]
    """
    stream, handles = {}, []
    for layer in model.model.layers:
        i = layer.layer_id

        def before(block, args, i=i):
            stream[i] = {"input": args[0].detach()}

        def after_attention(attn, args, output, i=i):
            stream[i]["after_attention"] = stream[i]["input"] + output[0].detach()

        def after(block, args, output, i=i):
            stream[i]["output"] = output[0].detach()

        handles += [layer.register_forward_pre_hook(before), layer.self_attn.register_forward_hook(after_attention),
                    layer.register_forward_hook(after)]
    try:
        yield stream
    finally:
        for h in handles:
            h.remove()


def rms(x: torch.Tensor) -> torch.Tensor:
    """Root-mean-square over the last dimension: one number per token."""
    return x.float().pow(2).mean(-1).sqrt()
