""""Try your own line" in Jupyter (intro, chapters 1, 4a, 6 and 7).

A text box and the chapter's controls recompute the chapter's picture with the Python
model. The HTML book's live panels (book/_ext/live_panels.py) do the same in the
browser; in the static book the cell shows its saved picture, for the chapter's line.

Every title says which text it shows, derived from the text itself (`text_name`), so
an edited line never keeps the chapter's title.
"""
from __future__ import annotations

import base64
import html

import torch

KNOWN_TEXTS = {  # a few texts the chapters use, by their titles
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。": "静夜思",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。": "春晓",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。": "登鹳雀楼",
    "终南阴岭秀，积雪浮云端。林表明霁色，城中增暮寒。": "终南望余雪",
}
LINE_MARKS = "，。？！；"  # a line of verse ends before one of these


def text_name(text: str, width: int = 6) -> str:
    """A short title for a text: its name if it is a known poem, else its first
    `width` characters in corner quotes, e.g. 「春眠不觉晓，…」 (chapter 4a's titles)."""
    text = text.strip()
    if text in KNOWN_TEXTS:
        return KNOWN_TEXTS[text]
    return "「" + text[:width] + ("…" if len(text) > width else "") + "」"


def encode_line(tokenizer, text: str, context: int) -> tuple[list[int], str]:
    """<|im_start|> and the text's ids, at most `context` in all, and a note for the
    reader ('' if none): a text longer than the model reads is said, never cut silently.
    """
    ids = [tokenizer.bos_token_id] + tokenizer.encode(text, add_special_tokens=False)
    note = ""
    if len(ids) > context:
        note = f"{len(ids)} tokens: only the first {context} are used"
        ids = ids[:context]
    return ids, note


def own_line(draw, text: str, controls: dict | None = None, caption: str = ""):
    """A text box prefilled with `text`, the chapter's `controls` ({name: ipywidget}),
    and under them what `draw(text, **values)` returns: PNG bytes (a picture) or a str
    (shown as text, never as HTML). Any change re-draws, in a live kernel; a ValueError
    from `draw` is shown as its message."""
    import ipywidgets as widgets
    controls = controls or {}
    box = widgets.Textarea(value=text, description="your line", rows=2,
                           continuous_update=False,
                           style={"description_width": "initial"},
                           layout=widgets.Layout(width="95%"))
    picture = widgets.Image(format="png")
    words = widgets.HTML()
    message = widgets.HTML()
    first = {}

    def update(*_):
        try:
            values = {name: c.value for name, c in controls.items()}
            result = draw(box.value, **values)
            message.value = ""
        except ValueError as err:
            message.value = f'<span style="color:#a33">{html.escape(str(err))}</span>'
            return
        if isinstance(result, bytes):
            picture.value, picture.layout.display, words.value = result, None, ""
        else:
            picture.layout.display = "none"
            words.value = f'<pre style="font-size:1.05em">{html.escape(result)}</pre>'
        first.setdefault("result", result)

    box.observe(update, names="value")
    for c in controls.values():
        c.observe(update, names="value")
    update()
    style = "font-size:0.9em;color:#444"
    note = widgets.HTML(f'<div style="{style}">{html.escape(caption)}</div>')
    controls_row = widgets.HBox(list(controls.values()))
    children = [box, controls_row, message, picture, words, note]
    return _own_line_class()(children, first.get("result", ""))


def _own_line_class():
    """A VBox whose display also carries its first picture (or text) and a summary."""
    import ipywidgets as widgets

    class OwnLine(widgets.VBox):
        def __init__(self, children, fallback):
            super().__init__(children)
            self._fallback = fallback

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            if isinstance(self._fallback, bytes):
                bundle["image/png"] = base64.b64encode(self._fallback).decode("ascii")
                bundle["text/plain"] = ("[try your own line: run the cell, then edit "
                                        "the line in its box]")
            else:
                bundle["text/plain"] = self._fallback
            return bundle

    return OwnLine


# --- the chapters' pictures for any line ----------------------------------------------

@torch.no_grad()
def write_poem(model, tokenizer, prompt: str = "", temperature: float = 0.8,
               top_p: float = 0.9, seed: int = 0, max_new_tokens: int = 64) -> str:
    """The introduction's poem: `prompt` (empty: the start token alone) continued by
    seeded sampling, one line per printed line."""
    if not 0 < top_p <= 1 or temperature <= 0:
        raise ValueError("temperature must be > 0 and top-p in (0, 1]")
    room = model.config.max_position_embeddings - max_new_tokens
    ids, note = encode_line(tokenizer, prompt, room)
    out = model.generate(torch.tensor([ids]), do_sample=True, temperature=temperature,
                         top_p=top_p, max_new_tokens=max_new_tokens,
                         generator=torch.Generator().manual_seed(seed))  # [1, S + new]
    poem = tokenizer.decode(out[0], skip_special_tokens=True)
    lines = poem.replace("，", "，\n").replace("。", "。\n")
    return lines + (f"\n({note})" if note else "")


@torch.no_grad()
def stage_picture(model, tokenizer, text: str, stage: str = "after block 3") -> bytes:
    """Chapter 1's picture for any line: one stage of the forward pass (the embedding,
    after each block, the final norm) on the scale of the largest value over the stages,
    or the next-token guesses (stage 'next-token guesses')."""
    import matplotlib.pyplot as plt

    from .viz import (figure_png, forward_stages, stage_figure, token_labels,
                      top_tokens, top_tokens_figure)
    if not text.strip():
        raise ValueError("the box is empty: type a line")
    ids, note = encode_line(tokenizer, text, 24)  # 24 rows read in a 7-inch figure
    x = torch.tensor([ids], device=next(model.parameters()).device)  # [1, S]
    stages = forward_stages(model, x)
    hidden = stages[1:-1]
    blocks = [f"after block {i}" for i in range(model.config.num_hidden_layers)]
    names = ["embedding"] + blocks + ["final norm"]
    if stage not in names + ["next-token guesses"]:
        raise ValueError(f"no stage {stage!r}")
    rows = token_labels(tokenizer, ids)
    suffix = f" ({note})" if note else ""
    if stage == "next-token guesses":
        probs, top = top_tokens(stages[-1][1][0], k=5)  # [S, 5] each
        texts = [[tokenizer.decode([i]) for i in row] for row in top.tolist()]
        title = f"{text_name(text)}: the 5 likeliest next tokens{suffix}"
        fig = top_tokens_figure(probs, texts, rows, title)
    else:
        vmax = max(t.abs().max().item() for _, t in hidden)
        tensor = hidden[names.index(stage)][1]  # [1, S, hidden]
        fig = stage_figure(f"{text_name(text)}, {stage}{suffix}", tensor, rows, vmax)
        fig.set_figheight(max(2.5, 0.25 * len(ids) + 1))
    png = figure_png(fig, dpi=100)
    plt.close(fig)
    return png


@torch.no_grad()
def head_picture(model, tokenizer, text: str, layer: int = 1, head: int = 0) -> bytes:
    """Chapter 4a's picture for any line: one head's attention probabilities, tokens on
    both axes, 0 to 1, titled with the line and the head."""
    from .attention_lab import heatmap_frames
    if not text.strip():
        raise ValueError("the box is empty: type a line")
    ids, note = encode_line(tokenizer, text, 48)  # 48 labels still read on each axis
    x = torch.tensor([ids], device=next(model.parameters()).device)  # [1, S]
    attentions = model(x, output_attentions=True).attentions  # L x [1, H, S, S]
    probs = attentions[layer][0, head].float().cpu()  # [S, S]
    bos = tokenizer.bos_token_id
    tokens = ["<s>" if i == bos else tokenizer.decode([i]) for i in ids]
    title = f"{text_name(text)}, layer {layer}, head {head}"
    title += f"\n({note})" if note else ""
    size = max(4.9, 0.16 * len(ids) + 2.5)
    return heatmap_frames([probs], tokens, [title], figsize=(size + 0.4, size))[0]


@torch.no_grad()
def routing_picture(model, tokenizer, text: str, layer: int = 0) -> bytes:
    """Chapter 6's picture for any line: the poetry-moe expert each token goes to in one
    layer (the chapter's colours), the router's probability for it under the token, and
    each expert's share of the line's tokens (left)."""
    import math

    import matplotlib.pyplot as plt

    from .moe_lab import line_routing, routing_figure
    from .probes import router_load
    from .viz import figure_png
    if not text.strip():
        raise ValueError("the box is empty: type a line")
    ids, note = encode_line(tokenizer, text, 48)  # 48 boxes, 14 to a row, still read
    x = torch.tensor([ids], device=next(model.parameters()).device)  # [1, S]
    experts, probs = line_routing(model, x)  # [layers][S], [layers, S, E]
    chosen = torch.tensor(experts[layer])  # [S]
    shares = router_load(chosen.view(-1, 1), probs.shape[-1])  # [E]
    winning = probs[layer].gather(-1, chosen.view(-1, 1).to(probs.device))[:, 0]  # [S]
    texts = [tokenizer.decode([i]) for i in ids]
    texts = [t if t.isprintable() and "\ufffd" not in t else "?" for t in texts]
    title = f"{text_name(text)}, layer {layer}" + (f"\n({note})" if note else "")
    fig = routing_figure(layer, shares, texts, experts[layer], title_right=title,
                         ymax=max(0.4, math.ceil(10 * shares.max().item()) / 10 + 0.1),
                         probs=winning.tolist(), max_columns=14,
                         title_left=f"layer {layer}: the line's {len(ids)} tokens")
    png = figure_png(fig, dpi=90)
    plt.close(fig)
    return png


EVERY_POINT = "top guess, every block"


@torch.no_grad()
def lens_picture(model, tokenizer, text: str, read: str = EVERY_POINT) -> bytes:
    """Chapter 7's picture for any line: the logit lens's top guess after each block
    (`read` = EVERY_POINT) or the three likeliest at one point ('embedding', 'after
    block 0', ...), red frames where a line of the text ends."""
    import matplotlib.pyplot as plt

    from .probes import record_residual_stream
    from .residual_lab import (lens_figure, lens_labels, lens_top, logit_lens,
                               token_text)
    from .viz import figure_png
    ids, note = encode_line(tokenizer, text, 25)  # 24 columns in a 7.5-inch grid
    if len(ids) < 2:
        raise ValueError("the box is empty: type a line")
    points = lens_labels(model.config.num_hidden_layers)
    if read not in [EVERY_POINT] + points:
        raise ValueError(f"no point {read!r}")
    x = torch.tensor([ids], device=next(model.parameters()).device)  # [1, S]
    with record_residual_stream(model) as stream:
        model(x)
    probs, top = lens_top(logit_lens(model, stream)[:, 0])  # [points, S - 1, 3] each
    guesses = [[[token_text(tokenizer, i) for i in at] for at in point]
               for point in top.tolist()]
    inputs = [token_text(tokenizer, i) for i in ids]
    actual = inputs[2:] + [""]  # what comes next in the line; unknown after its end
    ends = [j for j, a in enumerate(actual) if a and a in LINE_MARKS]
    name = text_name(text) + (f" ({note})" if note else "")
    point = None if read == EVERY_POINT else points.index(read)
    fig = lens_figure(name, probs, guesses, points, inputs[1:], actual=actual,
                      highlight=ends, point=point)
    png = figure_png(fig, dpi=90)
    plt.close(fig)
    return png
