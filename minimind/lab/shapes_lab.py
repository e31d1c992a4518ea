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


SHAPE_NUDGES = {  # one pointer per key, in the diagram's words (no sizes: the answer)
    "embedding": "the embedding gives every token one row of its table",
    "q_heads": "the split keeps [B, S] in front: the last axis becomes (heads, size)",
    "k_heads": "keys and values have their own head count in the config",
    "scores": "after transpose(1, 2) the heads come second; queries meet all keys",
    "merged": "the merged width is what the heads add up to, not always hidden_size",
    "ffn_hidden": "gate_proj widens to the config's own feed-forward width",
    "logits": "the head gives one score per vocabulary entry",
}


def explain_shapes(got, expected) -> str | None:
    """Chapter 1's exercise feedback: the first named shape that differs, which axis,
    and a pointer for that key (SHAPE_NUDGES), never the package's value."""
    if not isinstance(got, dict):
        return f"the answer should be a dict with the keys {', '.join(SHAPE_KEYS)}"
    missing = [k for k in SHAPE_KEYS if k not in got]
    if missing:
        return f"the dict has no entry {missing[0]!r}"
    for key in SHAPE_KEYS:
        mine, theirs = list(got[key]), expected[key]
        if len(mine) != len(theirs):
            return (f"{key!r}: you give {len(mine)} axes, the package's tensor has "
                    f"{len(theirs)} ({SHAPE_NUDGES[key]})")
        for axis, (a, b) in enumerate(zip(mine, theirs), 1):
            if a != b:
                return (f"{key!r}: your axis {axis} of {len(mine)} is {a}, which is "
                        f"too {'large' if a > b else 'small'} ({SHAPE_NUDGES[key]})")
    return None


def param_gap(config, gap: int) -> str | None:
    """Chapter 1, Exercise 4: a parameter count off by `gap` (yours - the package's),
    named in the model's terms where the gap is one whole piece of it
    ("one V × d matrix too many")."""
    d, L, D = config.hidden_size, config.num_hidden_layers, config.head_dim
    H, H_kv = config.num_attention_heads, config.num_key_value_heads
    V = config.vocab_size
    ffn = config.moe_intermediate_size if config.use_moe else config.intermediate_size
    pieces = [  # (size, what it is): the first the gap is a whole multiple of names it
        (V * d, "V × d matrix (the embedding table, or an untied head)"),
        (L * d * H * D, "d × (heads × head_dim) matrix per block (q_proj or o_proj)"),
        (L * d * H_kv * D, "d × (KV heads × head_dim) matrix per block (k or v)"),
        (L * d * ffn, "d × feed-forward-width matrix per block (gate, up or down)"),
        (L * d * config.num_experts, "router (d × num_experts) in every block"),
        (L * D, "head_dim-sized QK-Norm scale in every block"),
        (L * d, "d-sized RMSNorm scale in every block"),
        (d, "d-sized scale (the final RMSNorm)"),
    ]
    for size, what in pieces:
        count, rest = divmod(abs(gap), size)
        if gap and not rest and count <= 3:
            many = f"{count} × " if count > 1 else "one "
            side = "many" if gap > 0 else "few"
            return f"your count is off by exactly {many}{what}: too {side}"
    return None


class _Merged(Exception):
    """Stops Attention.forward once o_proj's input (the merged heads) is known."""


@torch.no_grad()
def attention_merge(out: torch.Tensor) -> torch.Tensor:
    """out [B, H, S, D] merged into [B, S, H * D] by Attention.forward's own merge line
    (chapter 1, Exercise 6): a small Attention with H heads of D runs with `out` as its
    attention result, and the input of its o_proj is returned."""
    import minimind
    from minimind.rope import precompute_freqs_cis
    B, H, S, D = out.shape
    config = minimind.MiniMindConfig(hidden_size=H, num_attention_heads=H,
                                     num_key_value_heads=H, head_dim=D)
    attn = minimind.attention.Attention(config).eval()
    attn.fused_attention = lambda *args: out  # [B, H, S, D], in whatever layout it has
    attn.explicit_attention = lambda *args: (out, None)
    seen = {}

    def stop(module, args):
        seen["merged"] = args[0]  # [B, S, H * D]
        raise _Merged

    handle = attn.o_proj.register_forward_pre_hook(stop)
    cos, sin = (t[:S].to(out.dtype) for t in precompute_freqs_cis(D, S))  # [S, D]
    try:
        attn(torch.zeros(B, S, H, dtype=out.dtype), (cos, sin))
    except _Merged:
        pass
    finally:
        handle.remove()
    return seen["merged"]


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

    Each poem runs on its own after <|im_start|>, so its first line has no earlier
    line to learn from. The poems run as one batch, padded at the end: attention is
    causal, so the padding after a poem changes none of its positions.
    """
    device = next(model.parameters()).device
    punctuation, found = _punctuation_ids(tokenizer), []
    rows = [[model.config.bos_token_id] + tokenizer.encode(p, add_special_tokens=False)
            for p in poems]
    width = max(len(r) for r in rows)
    pad = model.config.eos_token_id
    batch = [r + [pad] * (width - len(r)) for r in rows]
    logits = model(torch.tensor(batch, device=device)).logits.float()  # [N, S, V]
    p_end = logits[..., punctuation].logsumexp(-1) - logits.logsumexp(-1)  # log, [N, S]
    p_end = p_end.exp()
    for ids, p_row in zip(rows, p_end.tolist()):
        pieces = ["\n"] + [tokenizer.decode([i]) for i in ids[1:]]  # begin: line 1
        line = 0
        for count, p in zip(characters_since_break(pieces), p_row):
            line += count == 0  # a break (or the begin token): a new line starts
            if count == after:
                found.append((line, p))
    return found


def _punctuation_ids(tokenizer) -> list[int]:
    return [tokenizer.encode(mark, add_special_tokens=False)[0] for mark in PUNCTUATION]


def shared_palette(pngs: list[bytes], colors: int = 64) -> list[bytes]:
    """A widget's frames with at most `colors` colours, all from ONE palette (chapter
    1's stages): a colour two frames share stays the same pixel, so a shared colour bar
    reads alike in every frame (a palette per frame, `viz.palette_png`, shifts it)."""
    import io

    from PIL import Image
    images = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs]
    width, height = max(i.width for i in images), sum(i.height for i in images)
    sheet = Image.new("RGB", (width, height))
    top = 0
    for image in images:  # every frame on one sheet: one palette made from all of them
        sheet.paste(image, (0, top))
        top += image.height
    palette = sheet.quantize(colors=colors)
    out = []
    for image in images:
        buffer = io.BytesIO()
        flat = image.quantize(palette=palette, dither=Image.Dither.NONE)
        flat.save(buffer, format="PNG", optimize=True)
        out.append(buffer.getvalue())
    return out


# --- the stage widget, drawn for each edition (issue #23) -----------------------------

STAGE_ZH = {  # English (a regex) -> Chinese, for the texts of viz's stage/guess figures
    r"^embedding \((\S+)\)": r"嵌入（\1）",
    r"^after block (\d+) \((\S+) output\)": r"第 \1 块之后（\2 的输出）",
    r"^final norm": "最终归一化层",
    r"^feature \((.*)\)$": r"特征（\1）",
    r"^value \(symmetric log\)$": "数值（对称对数刻度）",
    r"^RMS \(log scale\)$": "RMS（对数刻度）",
    r"^RMS per token$": "每个 token 的 RMS",
    r"^guess (\d+)$": r"第 \1 个猜测",
    r"^probability$": "概率",
    r"^lm_head: logits (.*) → the (\d+) likeliest next tokens$":
        r"lm_head：logits \1 → 最可能的 \2 个下一个 token",
}


def stage_figures(stages, names, tokenizer, glosses=None, zh=False) -> list:
    """Chapter 1's stage widget as matplotlib figures: one per stage from the embedding
    to the final norm (`stages` from viz.forward_stages, `names` one per such stage), on
    one colour scale, then the five likeliest next tokens. Rows: the tokens, with
    `glosses` ({"床": "bed"}). zh: the Chinese edition's (issue #23): no glosses,
    Chinese titles and axis titles (STAGE_ZH)."""
    from .viz import stage_figure, token_labels, top_tokens, top_tokens_figure
    (_, ids), hidden, (_, logits) = stages[0], stages[1:-1], stages[-1]
    rows = token_labels(tokenizer, ids[0], None if zh else glosses)
    vmax = max(t.abs().max().item() for _, t in hidden)
    titles = [name if label == name else f"{name} ({label})"  # "final norm" stays alone
              for name, (label, _) in zip(names, hidden)]
    figures = [stage_figure(title, t, rows, vmax)
               for title, (_, t) in zip(titles, hidden)]
    probs, next_ids = top_tokens(logits[0], k=5)
    texts = [[tokenizer.decode([i]) for i in row] for row in next_ids.tolist()]
    title = f"lm_head: logits {list(logits.shape)} → the 5 likeliest next tokens"
    figures.append(top_tokens_figure(probs, texts, rows, title))
    if zh:
        for fig in figures:
            _to_chinese(fig)
    return figures


def _to_chinese(fig):
    """Every text of `fig` through STAGE_ZH, in place: titles, labels, named ticks."""
    import re

    from matplotlib.text import Text

    def chinese(text):
        for english, zh in STAGE_ZH.items():
            text = re.sub(english, zh, text)
        return text

    for text in fig.findobj(Text):
        text.set_text(chinese(text.get_text()))
    for axis in (axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)):
        ticks = axis.get_ticklabels()  # named ticks ("guess 1"): redrawn from strings
        names = [chinese(t.get_text()) for t in ticks]
        if names != [t.get_text() for t in ticks]:
            axis.set_ticks(axis.get_ticklocs(), names, size=ticks[0].get_fontsize())


def stage_frames(stages, names, tokenizer, glosses=None, zh=False) -> list[bytes]:
    """stage_figures as the widget's PNG frames: the stages on one palette (their colour
    bar reads alike), the guesses on their own 0..1 scale (chapter 1)."""
    from .viz import figure_png, palette_png
    *figures, guesses = stage_figures(stages, names, tokenizer, glosses, zh)
    frames = shared_palette([figure_png(f, dpi=100) for f in figures], 64)
    return frames + [palette_png(figure_png(guesses, dpi=100), 64)]
