"""The book's widget toolkit: pure functions compute what a picture shows; a widget only switches frames.

Pattern: precompute N PNG frames with matplotlib, put them in an ipywidgets Stack, and jslink a slider to the
Stack's selected_index. The browser switches frames itself, so the widget stays interactive in the static HTML
book, where no Python runs. In a live kernel `on_change` may recompute with the model.
"""
import io

import torch

from . import diagram
from .fonts import use_cjk_font  # noqa: F401  (chapters import it from here)


def figure_png(fig, dpi=80) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def palette_png(png: bytes, colors: int = 32) -> bytes:
    """The same picture with at most `colors` colours: a line plot's PNG shrinks about 4x (smaller book pages)."""
    from PIL import Image
    buffer = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=colors).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


READOUT_CSS = ("<style>.mm-player .widget-inline-hbox .widget-readout,"  # the slider's label: never cut
               ".mm-player .jupyter-widget-inline-hbox .jupyter-widget-readout"
               "{max-width:none;width:auto;min-width:4em;overflow:visible;white-space:nowrap}"
               # a picture drawn per edition: the page's language picks it (the Chinese
               # build writes <html lang="zh-CN">; Jupyter shows the English one)
               ".mm-zh{display:none}html[lang^=zh] .mm-en{display:none!important}"
               "html[lang^=zh] .mm-zh{display:flex!important}"
               "html[lang^=zh] img.mm-zh{display:block!important}</style>")


def frame_player(frames: list[bytes], labels, description="", caption=None, start=0, on_change=None,
                 width=None, zh_frames=None):
    """A slider jslinked to a Stack of PNG frames: interactive in Jupyter and in the static HTML book.

    `labels` are the real quantities the frames show (positions, temperatures, "layer 2, head 5");
    the slider reads them, never a frame number, in a readout as wide as the longest. `caption` is
    one line under the picture saying what to watch for. `on_change(index)` (optional) runs only in
    a live kernel, e.g. to print a recomputed value. Where no widget can be shown (a notebook not
    yet run or not trusted), Jupyter shows the start frame instead. `zh_frames` (optional): the
    same frames drawn for the Chinese edition (no English glosses, Chinese titles), shown on its
    pages instead (issue #23).
    """
    import ipywidgets as widgets
    if len(labels) != len(frames):
        raise ValueError(f"{len(frames)} frames but {len(labels)} labels: give one label per frame")
    layout = widgets.Layout(width=width) if width else widgets.Layout()
    if zh_frames is not None and len(zh_frames) != len(frames):
        raise ValueError(f"{len(frames)} frames but {len(zh_frames)} Chinese frames: draw each twice")
    images = [widgets.Image(value=png, format="png", layout=layout) for png in frames]
    stack = widgets.Stack(images, selected_index=start)
    slider = widgets.SelectionSlider(options=[(str(label), i) for i, label in enumerate(labels)],
                                     index=start, description=description, continuous_update=True,
                                     style={"description_width": "initial"},
                                     layout=widgets.Layout(width="95%"))
    link = widgets.jslink((slider, "index"), (stack, "selected_index"))
    stacks = [stack]
    if zh_frames is not None:
        zh_stack = widgets.Stack([widgets.Image(value=png, format="png", layout=layout)
                                  for png in zh_frames], selected_index=start)
        stack.add_class("mm-en"), zh_stack.add_class("mm-zh")
        zh_link = widgets.jslink((slider, "index"), (zh_stack, "selected_index"))
        stacks.append(zh_stack)
    if on_change is not None:
        slider.observe(lambda change: on_change(change["new"]), names="index")
    note = caption or ""
    children = [slider, *stacks, widgets.HTML(READOUT_CSS + (
        f'<div class="widget-caption" style="font-size:0.9em;color:#444">{note}</div>' if note
        else "<div></div>"))]
    player = _player_class()(children, fallback=frames[start], summary=f"{description} {labels[start]}")
    player.add_class("mm-player")
    player.link = link  # keep a handle: the front end runs it, tests inspect it
    if zh_frames is not None:
        player.zh_link = zh_link
    return player


def edition_text(translations: dict, text: str, zh=False, **values) -> str:
    """A figure string (a str.format template) for the English or the Chinese edition:
    `text` itself, or its entry in `translations`, filled with `values` (issue #23).
    A lab module binds its own table: `say = functools.partial(edition_text, ZH)`."""
    return (translations[text] if zh else text).format(**values)


def edition_figure(png: bytes, zh_png: bytes, width=None):
    """One figure drawn twice: `png` for the English pages (and Jupyter), `zh_png` for the
    Chinese edition's (no English glosses of characters, Chinese titles; issue #23). A
    widget, so that the page's language picks the picture in the static HTML book too."""
    import ipywidgets as widgets
    layout = widgets.Layout(width=width) if width else widgets.Layout()
    english = widgets.Image(value=png, format="png", layout=layout)
    chinese = widgets.Image(value=zh_png, format="png", layout=layout)
    english.add_class("mm-en"), chinese.add_class("mm-zh")
    box = _player_class()([english, chinese, widgets.HTML(READOUT_CSS + "<div></div>")],
                          fallback=png, summary="", text="[a figure, drawn for each edition]")
    box.add_class("mm-player")
    return box


def _player_class():
    """A VBox whose display also carries its start frame as a PNG and a one-line text."""
    import base64

    import ipywidgets as widgets

    class FramePlayer(widgets.VBox):
        def __init__(self, children, fallback: bytes, summary: str, text: str = ""):
            super().__init__(children)
            self._fallback = fallback
            self._text = text or (f"[interactive figure at {summary.strip()}: run the cell to "
                                  "move its slider]")

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            bundle["image/png"] = base64.b64encode(self._fallback).decode("ascii")
            bundle["text/plain"] = self._text
            return bundle

    return FramePlayer


# --- chapter 1: one batch through the model ---------------------------------------------------------------

@torch.no_grad()
def forward_stages(model, input_ids) -> list[tuple[str, torch.Tensor]]:
    """(label, tensor) at each stage of a forward pass: ids, embedding, each block's output, final norm, logits."""
    from .probes import record_residual_stream
    with record_residual_stream(model) as stream:
        out = model(input_ids)
    stages = [("input_ids", input_ids), ("embed_tokens", stream[0]["input"])]
    stages += [(f"layers.{i} output", stream[i]["output"]) for i in sorted(stream)]
    stages += [("final norm", out.hidden_states), ("lm_head logits", out.logits)]
    return stages


def architecture_figure(config, batch="B", seq="S"):
    """The model as a data-flow diagram annotated with the shapes and sizes of `config` (chapter 1, introduction).

    Drawn from the config's fields, so it stays true for any config (MoE included). 7 in wide, fonts >= 9 pt.
    """
    import matplotlib.pyplot as plt
    c = config
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # the diagram has no Chinese; DejaVu has · √ ᵀ
        fig, ax = plt.subplots(figsize=(7, 8.2))
        _draw_architecture(fig, ax, c, batch, seq)
    return fig


def _draw_architecture(fig, ax, c, batch, seq):
    from matplotlib.patches import FancyBboxPatch
    d, V, L, H, H_kv, D = (c.hidden_size, c.vocab_size, c.num_hidden_layers, c.num_attention_heads,
                          c.num_key_value_heads, c.head_dim)
    stream = f"[{batch}, {seq}, {d}]"
    ax.set(xlim=(0, 100), ylim=(0, 118)), ax.axis("off")
    x_stream = 22  # the residual stream runs down this line

    def box(x, y, w, h, text, kind, size=10, align="center"):
        diagram.box(ax, x, y, w, h, text, kind, size=size, align=align)

    def arrow(x0, y0, x1, y1):
        diagram.arrow(ax, (x0, y0), (x1, y1))

    def shape(y, text, x=x_stream + 1.5):
        diagram.shape(ax, x, y, text)

    # ids -> embedding
    ax.text(x_stream, 116, f"token ids  [{batch}, {seq}]  (integers < {V})", ha="center", va="center", fontsize=10)
    arrow(x_stream, 114, x_stream, 110.5)
    box(x_stream - 17, 104, 34, 6, f"embed_tokens\ntable {V} × {d}", "embed")
    arrow(x_stream, 103.5, x_stream, 95)
    shape(99, stream + "  residual stream")
    # the block, drawn once, repeated L times
    top, bottom = 94, 27
    ax.add_patch(FancyBboxPatch((2, bottom), 96, top - bottom, boxstyle="round,pad=0.4,rounding_size=2",
                                facecolor="none", edgecolor="#888888", lw=1.2, ls="--"))
    ax.text(97, top - 2.5, f"MiniMindBlock  × {L}\n(layers.0 … layers.{L - 1})", ha="right", va="top",
            fontsize=10, fontweight="bold", color="#444444")
    ax.plot([x_stream, x_stream], [95, 24], color="#333333", lw=2.2, zorder=0)
    x_branch = 40
    # attention half
    y_norm1, y_attn, y_add1 = 85, 62.5, 57
    ax.plot([x_stream, x_branch + 14], [y_norm1 + 6.5, y_norm1 + 6.5], color="#333333", lw=1.2)
    arrow(x_branch + 14, y_norm1 + 6.5, x_branch + 14, y_norm1 + 4.6)
    box(x_branch - 6, y_norm1, 40, 4.2, "input_layernorm (RMSNorm)", "norm", size=9.5)
    arrow(x_branch + 14, y_norm1 - 0.5, x_branch + 14, y_attn + 17.6)
    attn_text = (f"self_attn  (grouped-query attention)\n"
                 f"q_proj {d} → {H * D}, split: [{batch}, {seq}, {H}, {D}]\n"
                 f"k_proj, v_proj {d} → {H_kv * D}, split: [{batch}, {seq}, {H_kv}, {D}]\n"
                 f"QK-Norm, RoPE; each KV head serves {H // H_kv} query heads\n"
                 f"scores QKᵀ/√{D}: [{batch}, {H}, {seq}, {seq}]; softmax, then · V\n"
                 f"merge heads [{batch}, {seq}, {H * D}] → o_proj {H * D} → {d}")
    box(x_branch - 2, y_attn, 58, 17, attn_text, "attn", size=9.5, align="left")
    ax.plot([x_branch + 14, x_branch + 14], [y_attn - 0.5, y_add1], color="#333333", lw=1.2)
    arrow(x_branch + 14, y_add1, x_stream + 2.2, y_add1)
    diagram.node(ax, x_stream, y_add1)
    shape(y_add1 + 5, stream)
    # feed-forward half
    y_norm2, y_ffn, y_add2 = 47.5, 33.5, 29.5
    ax.plot([x_stream, x_branch + 14], [y_norm2 + 6, y_norm2 + 6], color="#333333", lw=1.2)
    arrow(x_branch + 14, y_norm2 + 6, x_branch + 14, y_norm2 + 4.6)
    box(x_branch - 6, y_norm2, 40, 4.2, "post_attention_layernorm (RMSNorm)", "norm", size=9.5)
    arrow(x_branch + 14, y_norm2 - 0.5, x_branch + 14, y_ffn + 8.6)
    ffn = (f"gate_proj, up_proj {d} → {c.intermediate_size}: [{batch}, {seq}, {c.intermediate_size}]\n"
           f"SiLU(gate) · up → down_proj {c.intermediate_size} → {d}")
    if c.use_moe:
        ffn = (f"router {d} → {c.num_experts}: top-{c.num_experts_per_tok} of {c.num_experts} experts, each:\n"
               f"gate, up {d} → {c.moe_intermediate_size}; down {c.moe_intermediate_size} → {d}")
        title = "mlp  (mixture of SwiGLU experts)"
    else:
        title = "mlp  (SwiGLU feed-forward)"
    box(x_branch - 2, y_ffn, 58, 8, title + "\n" + ffn, "ffn", size=9.5, align="left")
    ax.plot([x_branch + 14, x_branch + 14], [y_ffn - 0.5, y_add2], color="#333333", lw=1.2)
    arrow(x_branch + 14, y_add2, x_stream + 2.2, y_add2)
    diagram.node(ax, x_stream, y_add2)
    ax.text(x_stream - 2.5, 74, "residual stream:\neach half adds\nits update", ha="right", va="center",
            fontsize=9, color="#555555")
    # after the blocks
    shape(25, stream)
    arrow(x_stream, 24, x_stream, 21.2)
    box(x_stream - 17, 17, 34, 4.2, "norm  (final RMSNorm)", "norm", size=9.5)
    arrow(x_stream, 16.5, x_stream, 12.2)
    shape(14.5, stream)
    tied = "tied: the embedding's weight" if c.tie_word_embeddings else "its own weight"
    box(x_stream - 17, 6.5, 34, 5.5, f"lm_head  {d} → {V}\n({tied})", "embed", size=9.5)
    arrow(x_stream + 17.5, 9.2, x_stream + 30, 9.2)
    ax.text(x_stream + 31, 9.2, f"logits [{batch}, {seq}, {V}]", ha="left", va="center", fontsize=9.5,
            family="monospace", color="#1f4e8c")
    arrow(x_stream + 48, 7, x_stream + 48, 3.6)
    ax.text(x_stream + 48, 1.8, "shifted cross-entropy → loss [ ] (a scalar)", ha="center", va="center", fontsize=9.5)
    moe = f", {c.num_experts} experts" if c.use_moe else ""
    ax.set_title(f"MiniMind: hidden {d}, {L} blocks, {H} query / {H_kv} KV heads of {D}, vocab {V}{moe}",
                 fontsize=11)
    fig.tight_layout()


def token_labels(tokenizer, ids, glosses=None) -> list[str]:
    """Each id as its text, with an English gloss where one is given (e.g. {"月": "moon"}): row labels for figures."""
    glosses = glosses or {}
    texts = [tokenizer.decode([int(i)]) for i in ids]
    return [f"{t} ({glosses[t]})" if t in glosses else t for t in texts]


def stage_figure(label: str, tensor: torch.Tensor, row_labels, vmax: float, linthresh=0.1):
    """One stage [1, S, d] of a forward pass: tokens down, features across, on a symmetric log colour scale
    (-vmax..vmax, linear within ±linthresh) meant to be shared by every stage, with a colourbar and a panel of each
    token's RMS on a fixed log axis, so that growth from stage to stage shows (chapter 1)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import SymLogNorm
    values = tensor.detach()[0].float().cpu()
    fig, (ax, ax_rms) = plt.subplots(1, 2, figsize=(7, 2.5), width_ratios=[4, 1.2], layout="constrained")
    norm = SymLogNorm(linthresh=linthresh, vmin=-vmax, vmax=vmax, base=10)
    image = ax.imshow(values.numpy(), aspect="auto", cmap="RdBu_r", norm=norm, interpolation="nearest")
    ax.set_yticks(range(len(row_labels)), row_labels, fontsize=10)
    ax.set_xlabel(f"feature (0 … {values.shape[-1] - 1})", fontsize=9.5)
    ax.tick_params(axis="x", labelsize=9)
    ax.set_title(f"{label}   {list(tensor.shape)}", fontsize=10.5)
    bar = fig.colorbar(image, ax=ax, pad=0.01, aspect=12)
    bar.set_label("value (symmetric log)", fontsize=9), bar.ax.tick_params(labelsize=9)
    bar.ax.yaxis.set_label_position("left")  # next to its own bar, not read as the RMS panel's label
    rms = values.pow(2).mean(-1).sqrt()
    ax_rms.barh(range(len(rms)), rms.numpy(), color="#777777")
    ax_rms.set(xscale="log", xlim=(0.01, 1000), ylim=(len(rms) - 0.5, -0.5), yticks=[])
    ax_rms.set_xticks([0.01, 1, 100], ["0.01", "1", "100"])
    ax_rms.tick_params(labelsize=9)
    ax_rms.set_xlabel("RMS (log scale)", fontsize=9.5)
    ax_rms.set_title("RMS per token", fontsize=10)
    for y, r in enumerate(rms.tolist()):
        ax_rms.text(r * 1.15, y, f"{r:.2g}", va="center", ha="left", fontsize=9)
    return fig


def top_tokens(logits: torch.Tensor, k: int = 5):
    """Softmax probabilities and ids of the k most likely next tokens at every position: ([S, k], [S, k])."""
    top = logits.detach().float().softmax(-1).topk(k, dim=-1)
    return top.values, top.indices


def top_tokens_figure(probs: torch.Tensor, texts, row_labels, title: str):
    """The k best next tokens (as text) at each position, coloured by probability on a fixed 0..1 scale."""
    import matplotlib.pyplot as plt
    probs = probs.detach().float().cpu()
    fig, ax = plt.subplots(figsize=(7, 2.5), layout="constrained")
    image = ax.imshow(probs.numpy(), aspect="auto", cmap="Blues", vmin=0, vmax=1)
    for (row, col), p in zip([(r, c) for r in range(probs.shape[0]) for c in range(probs.shape[1])],
                             probs.flatten().tolist()):
        ax.text(col, row, f"{texts[row][col]!s}  {p:.2f}", ha="center", va="center", fontsize=10,
                color="white" if p > 0.6 else "black")
    ax.set_yticks(range(len(row_labels)), row_labels, fontsize=10)
    ax.set_xticks(range(probs.shape[1]), [f"guess {i + 1}" for i in range(probs.shape[1])], fontsize=9.5)
    ax.set_title(title, fontsize=10.5)
    bar = fig.colorbar(image, ax=ax, pad=0.01, aspect=12)
    bar.set_label("probability", fontsize=9), bar.ax.tick_params(labelsize=9)
    return fig


def characters_since_break(pieces, breaks="，。？！；\n") -> list[int]:
    """For each token's text: how many characters of the current line have been read once it is added (0 for a
    punctuation or line-break token, which closes the line). Chapter 1 uses it to measure line-length knowledge."""
    counts, count = [], 0
    for piece in pieces:
        count = 0 if piece and all(ch in breaks for ch in piece) else count + len(piece)
        counts.append(count)
    return counts


# --- chapter 2: what each RMSNorm reads from the residual stream ---------------------------------------------

@torch.no_grad()
def norm_readings(model, stream) -> list[dict]:
    """One entry per point of the residual stream (from probes.record_residual_stream) and the RMSNorm reading it.

    Keys: label, stream (RMS per token [B, S]), unit (RMS after normalising, before the gain), normed (RMS of the
    norm's output), gain (RMS of the norm's weight). 2 * layers + 1 points: embedding, then +attn / +ffn per layer.
    """
    from .probes import rms
    layers = model.model.layers
    points = [("embedding", stream[0]["input"], layers[0].input_layernorm)]
    for i, layer in enumerate(layers):
        reader = layers[i + 1].input_layernorm if i + 1 < len(layers) else model.model.norm
        points += [(f"{i} +attn", stream[i]["after_attention"], layer.post_attention_layernorm),
                   (f"{i} +ffn", stream[i]["output"], reader)]
    return [{"label": label, "stream": rms(x), "unit": rms(norm.norm(x.float())), "normed": rms(norm(x)),
             "gain": rms(norm.weight).item()} for label, x, norm in points]


@torch.no_grad()
def eps_response(input_rms: torch.Tensor, eps: float, dim: int = 64) -> torch.Tensor:
    """RMS of the package's RMSNorm output (unit gain) for inputs of the given RMS values: r / sqrt(r² + eps)."""
    from ..norm import RMSNorm
    direction = torch.ones(dim, dtype=torch.float64)  # any direction: only the size matters
    x = input_rms.double()[:, None] * direction
    y = RMSNorm(dim, eps=eps).double()(x)
    return y.pow(2).mean(-1).sqrt().to(input_rms.dtype)


def eps_figure(eps: float, groups: dict, losses: dict, uniform_loss: float, rms_range=(1e-5, 1e2)):
    """Left: output RMS against input RMS for this eps, over histograms of the RMS the trained model's norms really
    receive (`groups`: label -> RMS values). Right: held-out loss against eps (`losses`: eps -> loss), this eps
    marked. Axes are fixed, so frames for different eps compare (chapter 2)."""
    import matplotlib.pyplot as plt
    import numpy as np
    fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(7, 3.6), width_ratios=[1.45, 1])
    fig.subplots_adjust(left=0.09, right=0.985, bottom=0.33, top=0.92, wspace=0.5)  # fixed: same in every frame
    r = torch.logspace(np.log10(rms_range[0]), np.log10(rms_range[1]), 200)
    bins = np.logspace(np.log10(rms_range[0]), np.log10(rms_range[1]), 50)
    hist_ax = ax.twinx()
    for (label, values), colour in zip(groups.items(), ["tab:orange", "tab:green", "tab:purple", "tab:red"]):
        hist_ax.hist(values.clamp(*rms_range).numpy(), bins=bins, color=colour, alpha=0.45, label=label,
                     weights=np.full(len(values), 1 / len(values)))
    hist_ax.set(ylim=(0, 1.0), yticks=[0, 0.25, 0.5])  # a bar's height: its share of that group's vectors
    hist_ax.set_ylabel("share of vectors (bars)", fontsize=9)
    hist_ax.tick_params(labelsize=9)
    ax.plot(r, torch.ones_like(r), ":", color="grey", label="eps = 0")
    ax.plot(r, eps_response(r, eps), color="tab:blue", lw=2, label=f"eps = {eps:g}")
    ax.axvline(eps ** 0.5, color="tab:blue", lw=0.8, ls="--")
    ax.set(xscale="log", xlim=rms_range, ylim=(0, 1.1), zorder=hist_ax.get_zorder() + 1, frame_on=False)
    ax.set_xlabel("RMS of the norm's input", fontsize=9.5)
    ax.set_ylabel("RMS after dividing", fontsize=9.5)
    ax.tick_params(labelsize=9)
    ax.set_title("what the norm does to each size of input", fontsize=10)
    handles = ax.get_legend_handles_labels()[0] + hist_ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=2,
              framealpha=0.9)  # below the axes: the curve's bend stays visible in every frame
    xs = sorted(losses)
    ax_loss.plot(xs, [losses[e] for e in xs], "o-", color="grey", ms=4)
    ax_loss.plot([eps], [losses[eps]], "o", color="tab:blue", ms=9)
    ax_loss.axhline(uniform_loss, color="tab:red", ls="--", lw=1)
    ax_loss.text(min(xs), uniform_loss - 0.1, "uniform guess", color="tab:red", fontsize=9, va="top")
    ax_loss.set(xscale="log", ylim=(4.5, 9.5))
    ax_loss.set_xlabel("eps (in every norm)", fontsize=9.5)
    ax_loss.set_ylabel("held-out loss (nats/token)", fontsize=9.5)
    ax_loss.tick_params(labelsize=9)
    ax_loss.set_title(f"eps = {eps:g}: loss {losses[eps]:.3f}", fontsize=10)
    return fig


# --- chapter 3: RoPE rotations -----------------------------------------------------------------------------

def rope_pair_angles(position: int, freqs: torch.Tensor, pairs) -> torch.Tensor:
    """Angle (radians) by which RoPE turns each chosen pair at `position`: position * theta_i."""
    return position * freqs[list(pairs)]


def rotation_figure(query_pos: int, key_pos: int, freqs: torch.Tensor, pairs, score: float,
                    q_start=None, k_start=None, curve=None):
    """Arrows for a query (blue) and a key (orange) in several 2-D pairs, and their RoPE dot product in the title.

    q_start / k_start: the pairs' angles before rotation (default 0). curve = (distances, scores) adds a panel
    plotting q·k against distance, with the current distance marked. 6.4 in wide (7.5 with the curve), text >= 9 pt:
    render it about 700 px wide (dpi = 700 / width) for the book's column. A legend names the two
    arrows. The circles share one axes (with quiver arrows): a widget draws a dozen of these figures.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    q_start = torch.zeros(len(freqs)) if q_start is None else q_start
    k_start = torch.zeros(len(freqs)) if k_start is None else k_start
    side, curve_width = (1.05 if curve is not None else 1.6), 3.3 * (curve is not None)  # inches
    arrows_width = side * len(pairs)
    width, height = arrows_width + curve_width, side + 1.2  # bottom 0.45 in: legend; top 0.75 in: titles
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes([0, 0.45 / height, arrows_width / width, side / height])
    ax.set(xlim=(-1.25, 2.5 * len(pairs) - 1.25), ylim=(-1.25, 1.25), aspect="equal")
    ax.set_axis_off()
    q_angles = q_start[list(pairs)] + rope_pair_angles(query_pos, freqs, pairs)
    k_angles = k_start[list(pairs)] + rope_pair_angles(key_pos, freqs, pairs)
    centres = torch.arange(len(pairs)) * 2.5
    for centre, pair in zip(centres.tolist(), pairs):
        ax.add_patch(plt.Circle((centre, 0), 1, fill=False, ls=":", color="grey"))
        ax.text(centre, 1.15, f"pair {pair}\nθ = {freqs[pair]:.2g}", ha="center", va="bottom", fontsize=10)
    # the query is drawn wider, below the key: where the two coincide, both stay visible
    for angles, color, inches in [(q_angles, "tab:blue", 0.045), (k_angles, "tab:orange", 0.025)]:
        ax.quiver(centres, torch.zeros(len(pairs)), torch.cos(angles), torch.sin(angles), color=color,
                  angles="xy", scale_units="xy", scale=1, width=inches / arrows_width, headwidth=3.5,
                  headlength=4.5)
    if curve is not None:
        distances, scores = curve
        ax = fig.add_axes([(arrows_width + 0.55) / width, 0.6 / height, (curve_width - 0.65) / width,
                           (side + 0.3) / height])
        ax.plot(distances, scores, color="grey", lw=1)
        ax.plot([query_pos - key_pos], [score], "o", color="black")
        ax.set_xscale("symlog", linthresh=1)
        ticks = [0] + [10 ** e for e in range(len(str(int(max(distances)))))]  # 0, 1, 10, ... up to the largest
        ax.set_xticks(ticks, [str(t) for t in ticks])  # plain labels: mathtext powers are slow to draw
        ax.set_xlabel("distance m − n (tokens)", fontsize=9), ax.set_ylabel("q·k", fontsize=9)
        ax.tick_params(labelsize=9)
    arrows = [Line2D([], [], color="tab:blue", lw=2, label=f"query q at position {query_pos}"),
              Line2D([], [], color="tab:orange", lw=2, label=f"key k at position {key_pos}")]
    fig.legend(handles=arrows, loc="lower center", bbox_to_anchor=(arrows_width / 2 / width, 0), ncols=2,
               fontsize=9, frameon=False)
    fig.suptitle(f"distance {query_pos - key_pos}:  q·k = {score:.2f}", fontsize=10, y=1 - 0.05 / height,
                 va="top")
    return fig


def unit_pairs(angles: torch.Tensor) -> torch.Tensor:
    """A head vector [2n] whose pair i (dims i and i + n, the rotate-half layout) is the unit arrow at angles[i]."""
    return torch.cat([torch.cos(angles), torch.sin(angles)])


def rope_score(q: torch.Tensor, k: torch.Tensor, cos, sin, query_pos: int, key_pos: int) -> float:
    """q·k after RoPE for one query and one key vector [D] placed at the given positions (tables [S, D])."""
    from ..rope import apply_rotary_pos_emb
    q, k = q.view(1, 1, 1, -1), k.view(1, 1, 1, -1)  # [B=1, S=1, H=1, D]
    q_rot, _ = apply_rotary_pos_emb(q, q, cos[query_pos:query_pos + 1], sin[query_pos:query_pos + 1])
    _, k_rot = apply_rotary_pos_emb(k, k, cos[key_pos:key_pos + 1], sin[key_pos:key_pos + 1])
    return float((q_rot * k_rot).sum())


def rope_scores(q: torch.Tensor, k: torch.Tensor, cos, sin, query_positions, key_positions) -> torch.Tensor:
    """rope_score for many position pairs at once: entry j has q at query_positions[j] and k at key_positions[j]."""
    from ..rope import apply_rotary_pos_emb
    query_positions, key_positions = torch.as_tensor(query_positions), torch.as_tensor(key_positions)
    n = len(query_positions)
    q, k = q.view(1, 1, 1, -1).expand(1, n, 1, -1), k.view(1, 1, 1, -1).expand(1, n, 1, -1)  # [1, n, 1, D]
    q_rot, _ = apply_rotary_pos_emb(q, q, cos[query_positions], sin[query_positions])
    _, k_rot = apply_rotary_pos_emb(k, k, cos[key_positions], sin[key_positions])
    return (q_rot * k_rot).sum(-1).flatten()  # [n]


def changed_fraction(angle_steps, dtype, samples: int = 4096, seed: int = 0) -> torch.Tensor:
    """For each angle step: the fraction of random unit pairs whose `dtype` numbers change when RoPE turns them by it.

    Vector, tables and arithmetic all in `dtype`, as in a model run in that dtype; a turn that changes no bit of a
    pair is invisible to everything after it.
    """
    from ..rope import apply_rotary_pos_emb
    angles = torch.rand(samples, generator=torch.Generator().manual_seed(seed)) * 2 * torch.pi
    x = unit_pairs(angles).to(dtype).view(1, 1, 1, -1)  # [1, 1, 1, 2 * samples]: `samples` pairs (i, i + samples)
    fractions = []
    for step in torch.as_tensor(angle_steps, dtype=torch.float64).tolist():
        turn = torch.full((1, 2 * samples), step, dtype=torch.float64)
        turned, _ = apply_rotary_pos_emb(x, x, turn.cos().to(dtype), turn.sin().to(dtype))
        changed = (turned != x).view(2, samples).any(0)
        fractions.append(changed.float().mean())
    return torch.stack(fractions)


@torch.no_grad()
def windowed_token_losses(model, input_ids, window: int) -> torch.Tensor:
    """token_losses when the model may see only `window` tokens: each row is cut into independent windows.

    Same layout as token_losses, [B, S - 1]; NaN where the target opens a window (nothing to predict it from).
    """
    batch, seq_len = input_ids.shape
    if seq_len % window:
        raise ValueError(f"sequence length {seq_len} is not a multiple of the window {window}")
    from ..loss import token_losses
    inner = token_losses(model, input_ids.reshape(-1, window)).view(batch, seq_len // window, window - 1)
    losses = inner.new_full((batch, seq_len // window, window), float("nan"))
    losses[:, :, :-1] = inner
    return losses.view(batch, seq_len)[:, :-1]


def bucket_means(values: torch.Tensor, bucket: int) -> torch.Tensor:
    """Mean of [B, N] values over the batch and over blocks of `bucket` positions (last may be short); skips NaN."""
    return torch.stack([block.float().nanmean() for block in values.split(bucket, dim=-1)])
