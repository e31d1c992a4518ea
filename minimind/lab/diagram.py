"""Drawing helpers for the mechanism diagrams: one visual language for every chapter.

Each chapter draws how its piece works (Q/K/V and the heads, the pairs RoPE turns, SwiGLU's two
branches, the router, a Pre-Norm block) from the real config, so the sizes on the picture are the
model's. Coordinates are data units on an axis with the frame turned off: `canvas(width, height)`
gives x in [0, 100] and y in [0, 100 * height / width], so 1 unit is the same length both ways.

Colours by role, the same everywhere: `COLOURS["attn"]` is attention's blue in ch01's architecture
figure, ch04a's heads and ch07's block. Heads and experts take `HEAD_COLOURS` in order.
"""
from __future__ import annotations

COLOURS = {
    "embed": "#fbe7a1",   # embedding table, lm_head
    "norm": "#cdeccd",    # RMSNorm, QK-Norm
    "attn": "#cfe2f7",    # attention projections and heads
    "ffn": "#fbd9bd",     # SwiGLU, experts
    "router": "#e6d5f2",  # MoE router
    "cache": "#f7d6e0",   # KV-cache
    "loss": "#eeeeee",    # loss, sampling
    "tensor": "#ffffff",  # a tensor drawn as a box
}
HEAD_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]
INK, MUTED, SHAPE_INK = "#333333", "#666666", "#1f4e8c"
MIN_FONT = 9  # points: readable at the book's ~700 px content width when the figure is 7 in wide


def canvas(width: float = 7.0, height: float = 4.0, title: str | None = None):
    """(fig, ax): a blank diagram `width` × `height` inches, x in [0, 100], y in [0, 100·h/w]."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set(xlim=(0, 100), ylim=(0, 100 * height / width), aspect="equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    return fig, ax


def box(ax, x, y, w, h, text="", kind="tensor", size=9.5, align="center", colour=None, **kw):
    """A rounded box with its lower-left corner at (x, y), filled with the colour of `kind`."""
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.4,rounding_size=1.2",
                                facecolor=colour or COLOURS[kind], edgecolor=kw.get("edge", "#555555"),
                                lw=kw.get("lw", 1.0), ls=kw.get("ls", "-")))
    if text:
        tx = x + w / 2 if align == "center" else x + 1.5
        ax.text(tx, y + h / 2, text, ha=align, va="center", fontsize=max(size, MIN_FONT),
                linespacing=1.35)
    return (x, y, w, h)


def arrow(ax, start, end, text=None, colour=INK, lw=1.2, size=9, side="right"):
    """An arrow from `start` to `end` (x, y), with an optional label beside its middle."""
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color=colour, lw=lw, shrinkA=0, shrinkB=0))
    if text:
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        dx = 1.2 if side == "right" else -1.2
        ax.text(mx + dx, my, text, ha="left" if side == "right" else "right", va="center",
                fontsize=max(size, MIN_FONT), color=MUTED)


def line(ax, points, colour=INK, lw=1.2, **kw):
    """A polyline through `points` [(x, y), ...] (a wire without an arrow head)."""
    xs, ys = zip(*points)
    ax.plot(xs, ys, color=colour, lw=lw, solid_capstyle="round", **kw)


def node(ax, x, y, symbol="+", r=2.0):
    """A circled operator (+ for a residual add, × for a product) centred at (x, y)."""
    import matplotlib.pyplot as plt
    ax.add_patch(plt.Circle((x, y), r, facecolor="white", edgecolor=INK, lw=1.2, zorder=3))
    ax.text(x, y, symbol, ha="center", va="center", fontsize=12, zorder=4)


def shape(ax, x, y, text, ha="left", size=9.5):
    """A tensor shape such as `[B, S, 768]`, in the monospace blue every diagram uses for shapes."""
    ax.text(x, y, text, ha=ha, va="center", fontsize=max(size, MIN_FONT), family="monospace",
            color=SHAPE_INK)


def note(ax, x, y, text, ha="left", size=9, colour=MUTED, **kw):
    """A muted explanatory note."""
    ax.text(x, y, text, ha=ha, va="center", fontsize=max(size, MIN_FONT), color=colour,
            linespacing=1.3, **kw)


def segments(ax, x, y, w, h, sizes, labels=None, colours=None, title=None, size=9):
    """A vector drawn as a bar cut into pieces of the given `sizes` (e.g. 8 heads of 96 in 768).

    Each piece is as wide as its share; `labels` go inside the pieces, `title` above the bar.
    Returns the x-centre of every piece (to draw arrows from them).
    """
    from matplotlib.patches import Rectangle
    colours = colours or [HEAD_COLOURS[i % len(HEAD_COLOURS)] for i in range(len(sizes))]
    total, left, centres = float(sum(sizes)), x, []
    for i, part in enumerate(sizes):
        width = w * part / total
        ax.add_patch(Rectangle((left, y), width, h, facecolor=colours[i], edgecolor="white", lw=1,
                               alpha=0.85))
        if labels:
            ax.text(left + width / 2, y + h / 2, labels[i], ha="center", va="center",
                    fontsize=max(size, MIN_FONT), color="white", fontweight="bold")
        centres.append(left + width / 2)
        left += width
    if title:
        ax.text(x, y + h + 1.2, title, ha="left", va="bottom", fontsize=max(size, MIN_FONT))
    return centres


def grid(ax, x, y, w, h, values, cmap="Blues", vmin=None, vmax=None, row_labels=None,
         col_labels=None, title=None, numbers=False, size=9):
    """A small matrix (a mask, attention weights) drawn in the box (x, y, w, h), row 0 on top.

    `values` is a 2-D array-like; -inf entries (masked) are drawn grey. `numbers=True` writes each
    value in its cell. Labels go left of the rows and above the columns.
    """
    import numpy as np
    data = np.asarray(values, dtype=float)
    rows, cols = data.shape
    masked = np.ma.masked_invalid(np.where(np.isinf(data), np.nan, data))
    import matplotlib
    colours = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
    image = ax.imshow(masked, cmap=colours.with_extremes(bad="#d9d9d9"), vmin=vmin, vmax=vmax, extent=(x, x + w, y, y + h),
                      interpolation="nearest", origin="upper", aspect="auto")
    cw, ch = w / cols, h / rows
    for r in range(rows + 1):
        line(ax, [(x, y + r * ch), (x + w, y + r * ch)], colour="white", lw=0.8)
    for c in range(cols + 1):
        line(ax, [(x + c * cw, y), (x + c * cw, y + h)], colour="white", lw=0.8)
    fontsize = max(size, MIN_FONT)
    for r, label in enumerate(row_labels or []):
        ax.text(x - 0.8, y + h - (r + 0.5) * ch, label, ha="right", va="center", fontsize=fontsize)
    for c, label in enumerate(col_labels or []):
        ax.text(x + (c + 0.5) * cw, y + h + 0.8, label, ha="center", va="bottom", fontsize=fontsize)
    if numbers:
        for r in range(rows):
            for c in range(cols):
                v = data[r, c]
                text = "−∞" if np.isinf(v) else f"{v:.2g}"
                ax.text(x + (c + 0.5) * cw, y + h - (r + 0.5) * ch, text, ha="center", va="center",
                        fontsize=fontsize, color=INK)
    if title:
        offset = 4.5 if col_labels else 1.2
        ax.text(x + w / 2, y + h + offset, title, ha="center", va="bottom", fontsize=fontsize)
    return image
