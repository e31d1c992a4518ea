"""What chapter 2 (RMSNorm) draws and measures: the mechanism, the sphere, the size of the mean.

Pure functions return tensors or numbers; the figure functions only draw them. Every norm applied
here is the package's `RMSNorm` (or PyTorch's `LayerNorm`, the comparison), never a copy.
"""
from __future__ import annotations

import math
from contextlib import ExitStack
from unittest import mock

import torch

from ..norm import RMSNorm
from . import diagram

# --- the size of the mean ----------------------------------------------------------------------------------

def mean_over_rms(x: torch.Tensor) -> torch.Tensor:
    """|mean| / RMS of each vector over the last axis: how far it is from LayerNorm's hyperplane.

    [..., d] -> [...]. It is the sine of the angle between x and the hyperplane sum(x) = 0.
    """
    x = x.double()
    return x.mean(-1).abs() / x.pow(2).mean(-1).sqrt()


def noise_mean_over_rms(d: int) -> float:
    """E|mean|/RMS for a vector of d independent zero-mean Gaussian entries: sqrt(2 / (pi * d)).

    The mean of d such entries is Gaussian with std sigma / sqrt(d), and E|N(0, s^2)| = s sqrt(2/pi);
    the RMS is close to sigma when d is large.
    """
    return math.sqrt(2 / (math.pi * d))


def plane_coordinates(x: torch.Tensor) -> torch.Tensor:
    """Each vector as two numbers: its component along (1, ..., 1)/sqrt(d), and the length of the rest.

    [N, d] -> [N, 2]. LayerNorm's outputs (no gain) have first coordinate 0; every vector of RMS 1
    (RMSNorm's output, no gain) lies on the circle of radius sqrt(d) in these coordinates.
    """
    x = x.double()
    d = x.shape[-1]
    along = x.sum(-1) / math.sqrt(d)  # x · (1, ..., 1)/sqrt(d) = sqrt(d) * mean
    rest = (x - x.mean(-1, keepdim=True)).norm(dim=-1)
    return torch.stack([along, rest], -1)  # [N, 2]


@torch.no_grad()
def rms_and_layer_norm(x: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x), LayerNorm(x)) over the last axis, both without a learned gain or bias."""
    d = x.shape[-1]
    layer_norm = torch.nn.LayerNorm(d, eps=eps, elementwise_affine=False)
    return RMSNorm(d, eps=eps)(x.float()), layer_norm(x.float())


# --- the trained model without its norms' division ---------------------------------------------------------

@torch.no_grad()
def norm_inputs_and_output(model, input_ids):
    """One forward pass scored on itself: ({norm name: RMS of each vector it reads}, the output).

    Block norms read one vector per token, QK-Norms one per token and head (flattened). The output
    carries `.loss` and `.logits`, so chapter 2 reuses this pass as the trained model's score.
    """
    from .probes import rms
    seen, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, RMSNorm):
            handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: seen.__setitem__(name, rms(args[0]).flatten().cpu())))
    try:
        out = model(input_ids, labels=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return seen, out


def prediction_sureness(logits: torch.Tensor) -> tuple[float, float]:
    """(mean entropy in nats, mean probability of the top guess) of softmax(logits) over the vocab.

    logits [..., V]: ln V and 1/V for a uniform guess, 0 and 1 for certainty (chapter 2).
    """
    log_p = torch.log_softmax(logits.double(), -1)  # [..., V]
    entropy = -(log_p.exp() * log_p).sum(-1)
    return entropy.mean().item(), log_p.max(-1).values.exp().mean().item()


# --- the go-further experiment: LayerNorm's centring put back into every norm -------------------------------

def centred(norm: RMSNorm):
    """`norm.norm` with the mean subtracted first: the trained gain, LayerNorm's centring (no bias)."""
    plain = norm.norm

    def norm_with_centring(x):  # x [..., d] float32
        return plain(x - x.mean(-1, keepdim=True))
    return norm_with_centring


@torch.no_grad()
def loss_with_centring(model, input_ids, which=("block",)) -> float:
    """Held-out loss with centring added to the chosen norms ("block", "qk", "final"), then removed.

    A monkeypatch inside a `with` block: the model is unchanged afterwards (chapter 2, Exercise 5).
    """
    chosen = []
    for layer in model.model.layers:
        if "block" in which:
            chosen += [layer.input_layernorm, layer.post_attention_layernorm]
        if "qk" in which:
            chosen += [layer.self_attn.q_norm, layer.self_attn.k_norm]
    if "final" in which:
        chosen.append(model.model.norm)
    with ExitStack() as stack:
        for norm in chosen:
            stack.enter_context(mock.patch.object(norm, "norm", centred(norm)))
        return model(input_ids, labels=input_ids).loss.item()


# --- figures ------------------------------------------------------------------------------------------------

def norm_diagram(config, batch="B", seq="S"):
    """RMSNorm's forward step by step (left) and where the model's norms sit (right), from `config`.

    Chapter 2's mechanism picture: 7 in wide, fonts >= 9 pt, the colours of ch01's architecture figure.
    """
    import matplotlib.pyplot as plt
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese here; DejaVu has √ ε ×
        fig, ax = diagram.canvas(7, 5.0)
        _draw_forward(ax, config, batch, seq)
        _draw_placement(ax, config, batch, seq)
        d, D = config.hidden_size, config.head_dim
        ax.set_title(f"RMSNorm in MiniMind (hidden {d}, heads of {D}, eps = {config.rms_norm_eps:g})",
                     fontsize=11)
        fig.tight_layout()
    return fig


def _draw_forward(ax, c, batch, seq):
    d, eps = c.hidden_size, c.rms_norm_eps
    wide, one = f"[{batch}, {seq}, {d}]", f"[{batch}, {seq}, 1]"
    steps = [  # (text, kind, shape, note)
        ("x  (bfloat16, say)", "tensor", wide, None),
        ("x.float()", "norm", wide, "upcast: float32 inside"),
        ("x².mean(-1)", "norm", one, f"mean of squares over {d}"),
        (f"+ eps  ({eps:g})", "norm", one, "never divide by 0"),
        ("rsqrt( · )", "norm", one, "1 / √(mean square + eps)"),
        ("× x", "norm", wide, "each token by its factor"),
        (f"× weight  [{d}]", "norm", wide, "the gain g, still float32"),
        (".type_as(x)", "tensor", wide, "one rounding, at the end"),
    ]
    x0, w, h, top, step = 3, 19, 4.4, 61, 7.4
    diagram.note(ax, x0, top + 6.5, "RMSNorm.forward, per token", size=10, colour=diagram.INK)
    for i, (text, kind, size, why) in enumerate(steps):
        y = top - i * step
        diagram.box(ax, x0, y, w, h, text, kind, size=9.5)
        diagram.shape(ax, x0 + w + 1.5, y + h / 2 + 1.1, size, size=9)
        if why:
            diagram.note(ax, x0 + w + 1.5, y + h / 2 - 1.3, why, size=9)
        if i:
            diagram.arrow(ax, (x0 + w / 2, y + step - 0.5), (x0 + w / 2, y + h + 0.5))
    # the float32 copy of x skips the reduction and meets the factor at "× x"
    y_from, y_to = top - step + h / 2, top - 5 * step + h / 2
    diagram.line(ax, [(x0, y_from), (x0 - 1.8, y_from), (x0 - 1.8, y_to)])
    diagram.arrow(ax, (x0 - 1.8, y_to), (x0 - 0.5, y_to))


def _draw_placement(ax, c, batch, seq):
    d, L, H, H_kv, D = (c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                        c.num_key_value_heads, c.head_dim)
    x0, w = 53, 45
    total = 2 * L + 2 * L + 1
    diagram.note(ax, x0, 67.5, f"where the {total} norms sit", size=10, colour=diagram.INK)
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x0 - 1, 14), w + 2, 50, boxstyle="round,pad=0.4,rounding_size=2",
                                facecolor="none", edgecolor="#888888", lw=1.1, ls="--"))
    diagram.note(ax, x0 + 1, 62, f"block × {L}", size=9.5, colour=diagram.INK)
    # the residual stream runs down the right edge: each norm reads it, and each sub-layer's
    # output is added back to the un-normalised stream at + (Pre-Norm, chapter 7)
    xs = x0 + w - 3
    diagram.note(ax, xs + 1, 67.5, "residual stream", ha="right", size=9, colour=diagram.INK)
    diagram.line(ax, [(xs, 66), (xs, 34.8)])
    diagram.arrow(ax, (xs, 31.2), (xs, 12.5))
    diagram.arrow(ax, (xs, 57), (x0 + 28.5, 57))  # the norm reads the stream
    diagram.box(ax, x0 + 1, 55, 27, 4, f"input_layernorm  [{d}]", "norm", size=9)
    diagram.arrow(ax, (x0 + 14.5, 54.5), (x0 + 14.5, 51.5))
    diagram.box(ax, x0 + 1, 25.5, w - 10, 25.5, "", "attn")
    diagram.note(ax, x0 + 2, 48.8, "self_attn", size=9.5, colour=diagram.INK)
    diagram.segments(ax, x0 + 3, 40, w - 14, 3.2, [D] * H, labels=[str(i) for i in range(H)],
                     title=f"q_norm: {H} heads, each over {D}")
    diagram.segments(ax, x0 + 3, 31, (w - 14) * H_kv / H, 3.2, [D] * H_kv,
                     labels=[str(i) for i in range(H_kv)],
                     title=f"k_norm: {H_kv} KV heads, each over {D}")
    diagram.note(ax, x0 + 3, 28, f"one gain [{D}] each, before RoPE", size=9)
    diagram.arrow(ax, (x0 + w - 8.6, 33), (xs - 1.8, 33))  # attention's output ...
    diagram.node(ax, xs, 33, "+", r=1.8)  # ... joins the un-normalised stream
    diagram.arrow(ax, (xs, 19), (x0 + 36.5, 19))
    diagram.box(ax, x0 + 1, 17, 35, 4, f"post_attention_layernorm  [{d}]", "norm", size=9)
    diagram.note(ax, x0 + 1, 11.6, "+ : output added to the raw stream (ch. 7)", size=9)
    diagram.note(ax, x0 + 1, 8.8, "then the feed-forward; after the last block:", size=9)
    diagram.box(ax, x0 + 1, 2, 27, 4, f"norm (final)  [{d}]", "norm", size=9)
    diagram.arrow(ax, (x0 + 28.8, 4), (x0 + 33, 4))
    diagram.note(ax, x0 + 33.5, 4, "lm_head", size=9.5, colour=diagram.INK)


def sphere_figure(toy: torch.Tensor, stream: torch.Tensor, eps: float = 1e-6):
    """Left: 3-D vectors and where RMSNorm and LayerNorm send them (the sphere of radius √3, and its
    circle in the plane x1 + x2 + x3 = 0). Right: real d-wide vectors after RMSNorm, in the plane of
    (mean direction, the rest) from `plane_coordinates`, against LayerNorm's single point. Chapter 2.
    """
    import matplotlib.pyplot as plt
    import numpy as np
    fig = plt.figure(figsize=(7, 4.3))
    ax = fig.add_axes((0.0, 0.3, 0.5, 0.62), projection="3d")
    rms_out, ln_out = rms_and_layer_norm(toy, eps)
    r = math.sqrt(3)
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
    ax.plot_wireframe(r * np.cos(u) * np.sin(v), r * np.sin(u) * np.sin(v), r * np.cos(v),
                      color="#cccccc", lw=0.35)
    t = np.linspace(0, 2 * np.pi, 200)  # the circle: the sphere cut by the plane sum(x) = 0
    a, b = np.array([1, -1, 0]) / np.sqrt(2), np.array([1, 1, -2]) / np.sqrt(6)
    circle = r * (np.outer(np.cos(t), a) + np.outer(np.sin(t), b))
    disk = np.linspace(0, 2.4, 2)[:, None, None] * (np.cos(t)[None, :, None] * a
                                                   + np.sin(t)[None, :, None] * b)
    ax.plot_surface(*disk.transpose(2, 0, 1), color="tab:orange", alpha=0.12, lw=0)
    ax.plot(*circle.T, color="tab:orange", lw=1.5, label="LayerNorm's circle (in Σx = 0)")
    ax.plot([-1.6, 1.6], [-1.6, 1.6], [-1.6, 1.6], color="#222222", lw=1.3, ls="--",
            label="mean direction (1, 1, 1)", zorder=5)
    for x, y in zip(toy.numpy(), rms_out.numpy()):  # each input moves along its own ray
        ax.plot(*np.stack([np.zeros(3), x, y]).T, color="#2a7a2a", lw=0.9, alpha=0.8)
    ax.scatter(*toy.numpy().T, s=14, color="#555555", label="input x")
    ax.scatter(*rms_out.numpy().T, s=18, color="tab:green", label="RMSNorm(x): radius √3")
    ax.scatter(*ln_out.numpy().T, s=18, color="tab:orange", label="LayerNorm(x)")
    ax.set(xlim=(-2.5, 2.5), ylim=(-2.5, 2.5), zlim=(-2.5, 2.5), xticks=[-2, 0, 2], yticks=[-2, 0, 2],
           zticks=[-2, 0, 2])
    ax.set_box_aspect((1, 1, 1))
    ax.set_xlabel("x₁", fontsize=9, labelpad=-6), ax.set_ylabel("x₂", fontsize=9, labelpad=-6)
    ax.set_zlabel("x₃", fontsize=9, labelpad=-6)
    ax.tick_params(labelsize=8, pad=-2)
    ax.view_init(elev=12, azim=-30)
    ax.set_title("d = 3: where each norm sends x", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=9, loc="lower center", ncols=1,
               bbox_to_anchor=(0.25, 0.0), framealpha=0.9)
    _draw_plane_panel(fig.add_axes((0.62, 0.45, 0.36, 0.42)), stream, eps)
    return fig


def _draw_plane_panel(ax, stream, eps):
    import numpy as np
    d = stream.shape[-1]
    rms_out, ln_out = rms_and_layer_norm(stream, eps)
    points, ln_points = plane_coordinates(rms_out).numpy(), plane_coordinates(ln_out).numpy()
    r = math.sqrt(d)
    t = np.linspace(-np.pi / 2, np.pi / 2, 200)
    ax.plot(r * np.sin(t), r * np.cos(t), color="tab:green", lw=1, alpha=0.6,
            label=f"RMS 1: radius √{d} = {r:.0f}")
    ax.axvline(0, color="tab:orange", lw=1.2, label="LayerNorm: mean 0")
    ax.scatter(points[:, 0], points[:, 1], s=6, color="tab:green", alpha=0.5,
               label=f"RMSNorm of {len(points)} real tokens")
    ax.scatter(ln_points[:1, 0], ln_points[:1, 1], s=60, marker="*", color="tab:orange", zorder=3,
               label="LayerNorm of every token")
    ax.set(xlim=(-r * 1.05, r * 1.05), ylim=(0, r * 1.15), aspect="equal")
    ax.set_xlabel(f"along (1, …, 1)/√{d}  (= √{d} · mean)", fontsize=9, labelpad=2)
    ax.set_ylabel("length of the rest", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.set_title(f"d = {d}: real tokens, normalised", fontsize=10)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.45, -0.3), framealpha=0.9)
