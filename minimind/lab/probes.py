"""Instrumentation for the chapters: router choices, and the residual stream recorded with forward hooks.

Attention probabilities and router logits come from the model's outputs (`output_attentions=True`,
`output_router_logits=True`); hooks only read, and are removed when the `with` block ends.
"""
from contextlib import contextmanager

import torch

# Chapter 6 imports the router probes from here; training, which may not import
# the lab, owns them.
from ..training.evaluate import router_choices, router_load  # noqa: F401


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
            stream[i]["after_attention"] = stream[i]["input"] + output[0].detach()  # output = (out, kv, probs)

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
