"""Chapter 1: the shapes of one forward pass, and where the trained model expects a line to end.

`forward_shapes` is the package's answer to chapter 1's "trace the shapes by hand" exercise; the
line-end probes measure what the poetry model knows about line length (5- or 7-character verse).
"""
from __future__ import annotations

import torch

from .viz import characters_since_break

PUNCTUATION = "，。？"  # the marks that end a line in the poetry data


@torch.no_grad()
def forward_shapes(config, batch: int, seq: int) -> dict[str, list[int]]:
    """Shapes at seven points of one forward pass of MiniMindForCausalLM(config), run on the meta device.

    Keys: embedding, q_heads, k_heads, scores, merged, ffn_hidden, logits (block 0 for the inner ones).
    A dense config only (the MoE router picks experts by value, which the meta device has none of).
    """
    import minimind
    if config.use_moe:
        raise ValueError("forward_shapes traces a dense config (use_moe=False)")
    with torch.device("meta"):  # shapes without memory: any config, instantly
        model = minimind.MiniMindForCausalLM(config).eval()
    ids = torch.zeros(batch, seq, dtype=torch.long)  # real ids (the model checks their range) [B, S]
    block, seen = model.model.layers[0], {}

    def grab(key, take_input):
        def hook(module, args, output):
            seen[key] = list((args[0] if take_input else output).shape)
        return hook

    attn = block.self_attn
    points = [(model.model.embed_tokens, "embedding", False), (attn.q_norm, "q_heads", True),
              (attn.k_norm, "k_heads", True), (attn.o_proj, "merged", True),
              (block.mlp.gate_proj, "ffn_hidden", False)]
    handles = [m.register_forward_hook(grab(key, inp)) for m, key, inp in points]
    try:
        out = model(ids, output_attentions=True)  # the explicit path: it returns the probabilities
    finally:
        for h in handles:
            h.remove()
    seen["scores"] = list(out.attentions[0].shape)  # [B, H, S, S]
    seen["logits"] = list(out.logits.shape)  # [B, S, V]
    return {key: seen[key] for key in SHAPE_KEYS}


SHAPE_KEYS = ["embedding", "q_heads", "k_heads", "scores", "merged", "ffn_hidden", "logits"]


def explain_shapes(got, expected) -> str | None:
    """Chapter 1's exercise feedback: the first named shape that differs, and which axis, never its value."""
    if not isinstance(got, dict):
        return f"the answer should be a dict with the keys {', '.join(SHAPE_KEYS)}"
    missing = [k for k in SHAPE_KEYS if k not in got]
    if missing:
        return f"the dict has no entry {missing[0]!r}"
    for key in SHAPE_KEYS:
        mine, theirs = list(got[key]), expected[key]
        if len(mine) != len(theirs):
            return f"{key!r}: you give {len(mine)} axes, the package's tensor has {len(theirs)}"
        for axis, (a, b) in enumerate(zip(mine, theirs), 1):
            if a != b:
                return (f"{key!r}: your axis {axis} of {len(mine)} is {a}, which is "
                        f"too {'large' if a > b else 'small'}")
    return None


@torch.no_grad()
def line_end_probability(model, tokenizer, prompt: str) -> float:
    """P(the next token is ， 。 or ？) after <|im_start|> + prompt, from the trained `model` (chapter 1)."""
    ids = [model.config.bos_token_id] + tokenizer.encode(prompt, add_special_tokens=False)
    device = next(model.parameters()).device
    probs = model(torch.tensor([ids], device=device)).logits[0, -1].float().softmax(-1)  # [V]
    return probs[_punctuation_ids(tokenizer)].sum().item()


@torch.no_grad()
def line_end_by_line(model, tokenizer, poems, after: int = 5) -> list[tuple[int, float]]:
    """(line number from 1, P(line end next)) wherever a line has read exactly `after` characters.

    Each poem runs on its own after <|im_start|>, so its first line has no earlier line to learn from.
    """
    device = next(model.parameters()).device
    punctuation, found = _punctuation_ids(tokenizer), []
    for poem in poems:
        ids = [model.config.bos_token_id] + tokenizer.encode(poem, add_special_tokens=False)
        logits = model(torch.tensor([ids], device=device)).logits[0]  # [S, V]
        p_end = logits.float().softmax(-1)[:, punctuation].sum(-1).tolist()  # [S]
        pieces = ["\n"] + [tokenizer.decode([i]) for i in ids[1:]]  # the begin token opens line 1
        line = 0
        for count, p in zip(characters_since_break(pieces), p_end):
            line += count == 0  # a break (or the begin token): the next characters are a new line
            if count == after:
                found.append((line, p))
    return found


def _punctuation_ids(tokenizer) -> list[int]:
    return [tokenizer.encode(mark, add_special_tokens=False)[0] for mark in PUNCTUATION]
