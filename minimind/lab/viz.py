"""The book's widget toolkit: pure functions compute what a picture shows; a widget only switches frames.

Pattern: precompute N PNG frames with matplotlib, put them in an ipywidgets Stack, and jslink a slider to the
Stack's selected_index. The browser switches frames itself, so the widget stays interactive in the static HTML
book, where no Python runs. In a live kernel `on_change` may recompute with the model.
"""
import io

import torch


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


def frame_player(frames: list[bytes], labels, description="", caption=None, start=0, on_change=None, width=None):
    """A slider jslinked to a Stack of PNG frames: interactive in Jupyter and in the static HTML book.

    `labels` are the real quantities the frames show (positions, temperatures, "layer 2, head 5"); the slider
    reads them, never a frame number. `caption` is one line under the picture saying what to watch for.
    `on_change(index)` (optional) runs only in a live kernel, e.g. to print a recomputed value.
    """
    import ipywidgets as widgets
    if len(labels) != len(frames):
        raise ValueError(f"{len(frames)} frames but {len(labels)} labels: give one label per frame")
    layout = widgets.Layout(width=width) if width else widgets.Layout()
    images = [widgets.Image(value=png, format="png", layout=layout) for png in frames]
    stack = widgets.Stack(images, selected_index=start)
    slider = widgets.SelectionSlider(options=[(str(label), i) for i, label in enumerate(labels)], index=start,
                                     description=description, continuous_update=True,
                                     style={"description_width": "initial"},
                                     layout=widgets.Layout(width="95%"))
    link = widgets.jslink((slider, "index"), (stack, "selected_index"))
    if on_change is not None:
        slider.observe(lambda change: on_change(change["new"]), names="index")
    children = [slider, stack]
    if caption:
        children.append(widgets.HTML(f'<div class="widget-caption" style="font-size:0.9em;color:#444">'
                                     f"{caption}</div>"))
    player = widgets.VBox(children)
    player.link = link  # keep a handle: the front end runs it, tests inspect it
    return player


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


def stage_figure(label: str, tensor: torch.Tensor, index: int, total: int, max_cols=64):
    """Heat-map of the first sequence of a stage (at most max_cols features), titled with its shape."""
    import matplotlib.pyplot as plt
    values = tensor[0].float()
    values = values[:, None] if values.dim() == 1 else values[:, :max_cols]
    fig, ax = plt.subplots(figsize=(6, 2.2))
    ax.imshow(values.cpu().numpy(), aspect="auto", cmap="coolwarm" if tensor.is_floating_point() else "viridis")
    ax.set_title(f"stage {index + 1}/{total}: {label}   shape {list(tensor.shape)}", fontsize=10)
    ax.set_ylabel("position"), ax.set_xlabel("feature" if tensor.dim() > 2 else "")
    return fig


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


# --- chapter 3: RoPE rotations -----------------------------------------------------------------------------

def rope_pair_angles(position: int, freqs: torch.Tensor, pairs) -> torch.Tensor:
    """Angle (radians) by which RoPE turns each chosen pair at `position`: position * theta_i."""
    return position * freqs[list(pairs)]


def rotation_figure(query_pos: int, key_pos: int, freqs: torch.Tensor, pairs, score: float,
                    q_start=None, k_start=None, curve=None):
    """Arrows for a query and a key in several 2-D pairs, and their RoPE dot product in the title.

    q_start / k_start: the pairs' angles before rotation (default 0). curve = (distances, scores) adds a panel
    plotting q·k against distance, with the current distance marked.
    """
    import matplotlib.pyplot as plt
    q_start = torch.zeros(len(freqs)) if q_start is None else q_start
    k_start = torch.zeros(len(freqs)) if k_start is None else k_start
    panels = len(pairs) + (curve is not None)
    fig, axes = plt.subplots(1, panels, figsize=(1.9 * len(pairs) + 2.8 * (curve is not None), 2.4),
                             layout="constrained",
                             gridspec_kw={"width_ratios": [1] * len(pairs) + [1.6] * (curve is not None)})
    for ax, pair, q_angle, k_angle in zip(axes, pairs, rope_pair_angles(query_pos, freqs, pairs),
                                           rope_pair_angles(key_pos, freqs, pairs)):
        for angle, color in [(q_start[pair] + q_angle, "tab:blue"), (k_start[pair] + k_angle, "tab:orange")]:
            ax.annotate("", xy=(torch.cos(angle), torch.sin(angle)), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="->", color=color, lw=2))
        ax.add_patch(plt.Circle((0, 0), 1, fill=False, ls=":", color="grey"))
        ax.set(xlim=(-1.2, 1.2), ylim=(-1.2, 1.2), aspect="equal", xticks=[], yticks=[])
        ax.set_title(f"pair {pair}\nθ={freqs[pair]:.2g}", fontsize=8)
    if curve is not None:
        distances, scores = curve
        ax = axes[-1]
        ax.plot(distances, scores, color="grey", lw=1)
        ax.plot([query_pos - key_pos], [score], "o", color="tab:red")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("distance m − n", fontsize=8), ax.set_ylabel("q·k", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"query at {query_pos}, key at {key_pos} (distance {query_pos - key_pos}):  q·k = {score:.2f}",
                 fontsize=9)
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
