"""Shape tracing: the input and output shape of every module a forward pass calls (chapter 1)."""
from dataclasses import dataclass

import torch


@dataclass
class ShapeRow:
    name: str  # dotted module path, e.g. "model.layers.0.self_attn.q_proj"
    kind: str  # class name
    inputs: str
    outputs: str


def describe(x) -> str:
    """Shapes of tensors inside (nested) tuples/lists, e.g. "[2, 5, 768]" or "([2, 8, 4, 96], [2, 8, 4, 96])"."""
    if torch.is_tensor(x):
        return str(list(x.shape))
    if isinstance(x, (tuple, list)):
        parts = [describe(v) for v in x]
        parts = [p for p in parts if p]
        return "(" + ", ".join(parts) + ")" if len(parts) > 1 else (parts[0] if parts else "")
    if hasattr(x, "hidden_states"):  # the model's output objects: logits, else the final hidden states
        return describe(x.logits if getattr(x, "logits", None) is not None else x.hidden_states)
    return ""


@torch.no_grad()
def trace_shapes(model, input_ids, max_depth: int | None = None, **forward_kwargs) -> list[ShapeRow]:
    """Run model(input_ids, **forward_kwargs) and return one row per module call, in call order.

    max_depth limits how deep the dotted names go (1: "model", 2: "model.layers", ...).
    """
    rows, handles = [], []

    def record(name):
        def hook(module, args, kwargs, output):
            rows.append(ShapeRow(name, type(module).__name__, describe(args[:1] or list(kwargs.values())[:1]),
                                 describe(output)))
        return hook

    for name, module in model.named_modules():
        depth = name.count(".") + 1
        if name and (max_depth is None or depth <= max_depth):
            handles.append(module.register_forward_hook(record(name), with_kwargs=True))
    try:
        model(input_ids, **forward_kwargs)
    finally:
        for h in handles:
            h.remove()
    return rows


def format_trace(rows: list[ShapeRow], skip=("dropout", "act_fn")) -> str:
    """A fixed-width table of the trace, leaving out modules that never change a shape."""
    rows = [r for r in rows if not r.name.endswith(skip)]
    width = max(len(r.name) for r in rows)
    lines = [f"{'module':<{width}}  {'input':<16}  output"]
    lines += [f"{r.name:<{width}}  {r.inputs:<16}  {r.outputs}" for r in rows]
    return "\n".join(lines)
