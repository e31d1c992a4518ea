"""What chapter 4b measures and draws: the KV-cache's mechanism, the rows it saves, chunk masks.

Pure functions return tensors or numbers and are tested in tests/lab/test_cache_lab.py; the figure
functions only draw what those return. The broken variants (`always_causal_fused_attention`) are
labelled BROKEN and exist to be patched into `Attention` for one `with` block.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from unittest import mock

import torch
import torch.nn.functional as F

from .. import attention as attention_module
from ..attention import Attention
from . import diagram

_INFERENCE = SimpleNamespace(dropout=0.0, training=False)  # what fused_attention reads from `self`


# --- sizes ---------------------------------------------------------------------------------------------------

def bytes_per_token_per_layer(config, bytes_per_value: int = 2) -> int:
    """Bytes one position adds to one layer's cache: a key and a value of n_kv heads × head_dim."""
    return 2 * config.num_key_value_heads * config.head_dim * bytes_per_value


def repeat_kv_copy_bytes(config, seq_len: int, batch: int = 1, bytes_per_value: int = 2) -> int:
    """Bytes `repeat_kv` would allocate for one layer and one step: K and V, [B, S, H, D] each."""
    return 2 * batch * seq_len * config.num_attention_heads * config.head_dim * bytes_per_value


# --- counting what a generation computes --------------------------------------------------------------------

@torch.no_grad()
def count_kv_rows(model, input_ids, new_tokens: int, use_cache: bool = True) -> int:
    """Positions layer 0's k_proj projects during a greedy `model.generate` of `new_tokens` tokens."""
    rows = [0]

    def count(module, args, output):  # output [B, S, n_kv * D]: S positions projected
        rows[0] += output.shape[0] * output.shape[1]

    handle = model.model.layers[0].self_attn.k_proj.register_forward_hook(count)
    try:
        model.generate(input_ids, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                       use_cache=use_cache)
    finally:
        handle.remove()
    return rows[0]


def recomputed_rows(prompt_len: int, steps: int, use_cache: bool) -> torch.Tensor:
    """[steps + 1, prompt_len + steps]: 1 where a step computes K/V of a position, 0.4 where it reads
    them from the cache, -inf where the position does not exist yet. Row 0 is the prefill."""
    width = prompt_len + steps
    rows = torch.full((steps + 1, width), float("-inf"))
    for step in range(steps + 1):
        length = prompt_len + step  # positions that exist at this step
        rows[step, :length] = 1.0 if (step == 0 or not use_cache) else 0.4
        rows[step, length - 1] = 1.0  # the newest token's K/V are always computed
    return rows


@contextlib.contextmanager
def counting_repeat_kv():
    """Count the calls to `minimind.attention.repeat_kv` inside the block: `with ... as calls: ...`."""
    calls = [0]
    original = attention_module.repeat_kv

    def counted(x, n_rep):
        calls[0] += 1
        return original(x, n_rep)

    with mock.patch.object(attention_module, "repeat_kv", counted):
        yield calls


# --- the chunk mask: the bug and its fix --------------------------------------------------------------------

def always_causal_fused_attention(self, xq, xk, xv, attention_mask):  # BROKEN on purpose
    """`is_causal=True` whenever there are several queries: right only when q_len == kv_len."""
    return F.scaled_dot_product_attention(xq, xk, xv, is_causal=xq.shape[2] > 1,
                                          enable_gqa=xk.shape[1] != xq.shape[1])


def lower_right_fused_attention(self, xq, xk, xv, attention_mask):
    """The fix: a causal mask aligned to the lower-right corner (the queries are the last q_len keys)."""
    from torch.nn.attention.bias import causal_lower_right
    mask = causal_lower_right(xq.shape[2], xk.shape[2]) if xq.shape[2] > 1 else None
    return F.scaled_dot_product_attention(xq, xk, xv, attn_mask=mask,
                                          enable_gqa=xk.shape[1] != xq.shape[1])


def keys_seen(mask: torch.Tensor) -> list[int]:
    """How many keys each query row of a boolean [q_len, kv_len] mask may see."""
    return mask.sum(-1).tolist()


@torch.no_grad()
def chunked_logits(model, input_ids, chunk: int) -> torch.Tensor:
    """Logits [B, S, V] of `input_ids` prefilled in pieces of `chunk` tokens with the cache."""
    past, pieces = None, []
    for start in range(0, input_ids.shape[1], chunk):
        out = model(input_ids[:, start:start + chunk], past_key_values=past, use_cache=True)
        past = out.past_key_values
        pieces.append(out.logits)
    return torch.cat(pieces, dim=1)


@torch.no_grad()
def spared_chunk_sizes(model, input_ids, sizes, atol: float = 1e-4) -> list[int]:
    """The chunk sizes whose chunked logits still equal the full forward with the is_causal bug."""
    full = model(input_ids).logits
    spared = []
    with mock.patch.object(Attention, "fused_attention", always_causal_fused_attention):
        for size in sizes:
            if (chunked_logits(model, input_ids, size) - full).abs().max().item() < atol:
                spared.append(size)
    return spared


# --- the exercises' references ------------------------------------------------------------------------------

def decode_step(q, k_new, v_new, past_k, past_v):
    """One cached step: q [B, H, 1, D]; k_new, v_new [B, 1, n_kv, D]; past [B, S, n_kv, D].

    Returns (output [B, H, 1, D], k, v [B, S + 1, n_kv, D]), with the package's fused attention.
    """
    k = torch.cat([past_k, k_new], dim=1)  # [B, S + 1, n_kv, D]
    v = torch.cat([past_v, v_new], dim=1)
    out = Attention.fused_attention(_INFERENCE, q, k.transpose(1, 2), v.transpose(1, 2), None)
    return out, k, v


def explain_decode_step(got, expected) -> tuple[str, str] | None:
    """Ex. 4's miss in the reader's terms, with the hint for its stage: (message, hint).

    The stages in order: the cache's shape, its numbers, the output's shape, then
    the heads that differ (some: the head mapping; all: the scores or the softmax).
    """
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return None
    (out, k, v), (ref_out, ref_k, ref_v) = got, expected
    if k.shape != ref_k.shape or v.shape != ref_v.shape:
        return (f"your key/value cache has shape {list(k.shape)} / {list(v.shape)}, "
                f"the package's {list(ref_k.shape)}",
                "the cache keeps its layout [B, positions, KV heads, D]: the new "
                "position goes after the cached ones, along dim 1")
    if not torch.allclose(k, ref_k) or not torch.allclose(v, ref_v):
        return ("your cache holds other numbers than the cached keys/values followed "
                "by the new ones",
                "return the concatenated cache itself, not a transposed or scaled copy")
    if out.shape != ref_out.shape:
        return (f"your output has shape {list(out.shape)}, "
                f"the package's {list(ref_out.shape)}",
                "attention works heads first: transpose the cache to "
                "[B, heads, positions, D] before the products")
    heads = [h for h in range(out.shape[1])
             if not torch.allclose(out[:, h], ref_out[:, h], atol=1e-5, rtol=1e-4)]
    if not heads:
        return None
    if len(heads) == out.shape[1]:
        return (f"every one of the {out.shape[1]} query heads differs, so it is not "
                "the head mapping",
                "check the scores (the 1/√D) and the softmax axis (the positions)")
    n_rep = out.shape[1] // k.shape[2]
    return (f"{len(heads)} of {out.shape[1]} query heads differ; the first is head "
            f"{heads[0] + 1} (counted from 1), which should read KV head "
            f"{heads[0] // n_rep + 1}",
            f"query head h (from 0) reads KV head h // {n_rep}: repeat_interleave, "
            "not repeat")


def attention_with_cache(attn, x, cos, sin, past=None):
    """The package's `Attention.forward` on x [B, S, hidden] after `past` (k, v) or None.

    cos, sin: the whole RoPE tables [max_len, D]; the new tokens start at the cached length.
    Returns (output [B, S, hidden], present (k, v) [B, S_past + S, n_kv, D]).
    """
    start = 0 if past is None else past[0].shape[1]
    rope = (cos[start:start + x.shape[1]], sin[start:start + x.shape[1]])
    out, present, _ = attn(x, rope, past_key_value=past, use_cache=True)
    return out, present


def explain_attention_with_cache(got, expected) -> tuple[str, str] | None:
    """Ex. 5's miss, with the hint for the stage that failed: (message, hint).

    The stage is read from the case: a prefill (no cache), one new token, or a chunk
    of several after a cache.
    """
    if (not isinstance(got, (tuple, list)) or len(got) != 2
            or not isinstance(got[1], (tuple, list))):
        return None
    (out, (k, _)), (ref_out, (ref_k, _)) = got, expected
    if k.shape != ref_k.shape:
        return (f"your present keys have shape {list(k.shape)}, "
                f"the package's {list(ref_k.shape)}",
                "return the cache as stored, [B, cached + new, KV heads, D]: the "
                "cached keys first, the new ones after them along dim 1")
    if out.shape != ref_out.shape:
        return None
    seq_len = ref_out.shape[1]
    past_len = ref_k.shape[1] - seq_len
    rows = [i for i in range(seq_len)
            if not torch.allclose(out[:, i], ref_out[:, i], atol=1e-5, rtol=1e-4)]
    if not rows:
        return ("your output matches, but your present keys/values differ",
                "present holds the keys after QK-Norm and RoPE, the values as "
                "projected")
    message = (f"{len(rows)} of {seq_len} new tokens differ; the first is the token "
               f"at position {past_len + rows[0]} (after {past_len} cached)")
    if past_len == 0:
        hint = ("no cache yet: this is plain causal attention; follow "
                "Attention.forward's order (project, QK-Norm, RoPE, attend, o_proj)")
    elif seq_len == 1:
        hint = (f"one token after {past_len} cached stands at position {past_len}: "
                "rotate it there, not at position 0")
    else:
        hint = (f"{seq_len} queries after {past_len} cached: query i (from 0) may "
                f"see keys 0 to {past_len} + i; is_causal's triangle starts at the "
                "top left")
    return message, hint


def step_shares(model, new_ids, cache, repeats: int = 5) -> dict[str, float]:
    """Where a cached decode step's CPU time goes (chapter 4b, section 1), as shares.

    "attention over the cache" is `fused_attention` in all layers (scores, softmax,
    · V over every cached position); "output layer" is `lm_head`. Read on the
    process's CPU clock, summed over `repeats` steps after one warm-up.
    """
    import time
    spent = {"attention over the cache": 0.0, "output layer": 0.0}
    fused = Attention.fused_attention

    def timed_attention(self, *args):
        start = time.process_time()
        out = fused(self, *args)
        spent["attention over the cache"] += time.process_time() - start
        return out

    started = {}

    def lm_started(module, args):
        started["lm"] = time.process_time()

    def lm_done(module, args, output):
        spent["output layer"] += time.process_time() - started["lm"]

    hooks = [model.lm_head.register_forward_pre_hook(lm_started),
             model.lm_head.register_forward_hook(lm_done)]
    step = dict(past_key_values=cache, use_cache=True)
    try:
        with (torch.no_grad(),
              mock.patch.object(Attention, "fused_attention", timed_attention)):
            model(new_ids, **step)  # warm-up, not counted
            spent.update({name: 0.0 for name in spent})
            start = time.process_time()
            for _ in range(repeats):
                model(new_ids, **step)
            whole = time.process_time() - start
    finally:
        for hook in hooks:
            hook.remove()
    return {name: seconds / whole for name, seconds in spent.items()}


def aten_ops(fn) -> list[str]:
    """The ATen operators `fn()` dispatches, in call order (chapter 4b, section 4).

    Read with a dispatch mode: the list shows which attention kernel the backend
    chose, and whether any op copies heads (`repeat_interleave`, `expand` + `clone`).
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    with Recorder() as recorder:
        fn()
    return recorder.names


# --- figures --------------------------------------------------------------------------------------------------

def recompute_figure(tokens: list[str], prompt_len: int):
    """Which K/V rows each step computes, without and with the cache (chapter 4b, section 1)."""
    steps = len(tokens) - prompt_len
    title = (f"K/V rows computed per step: prompt of {prompt_len} tokens, then {steps} "
             "decode steps")
    fig, ax = diagram.canvas(7, 3.8, title=title)
    labels = ["prefill"] + [f"step {s}" for s in range(1, steps + 1)]
    for x, use_cache in [(13, False), (60, True)]:
        rows = recomputed_rows(prompt_len, steps, use_cache)
        computed = int((rows == 1).sum())
        name = "with the cache" if use_cache else "without the cache"
        diagram.grid(ax, x, 6, 36, 30, rows, cmap="Purples", vmin=0, vmax=1.1,
                     row_labels=labels)
        _column_labels(ax, x, 36.6, 36, tokens)
        diagram.note(ax, x + 18, 44, f"{name}: {computed} rows computed", ha="center",
                     colour=diagram.INK)
    diagram.box(ax, 13, 0.6, 2.5, 2.2, colour="#4a1486", kind="cache")
    diagram.note(ax, 17, 1.7, "computed at this step")
    diagram.box(ax, 43, 0.6, 2.5, 2.2, colour="#c6c0de", kind="cache")
    diagram.note(ax, 47, 1.7, "read from the cache")
    diagram.box(ax, 70, 0.6, 2.5, 2.2, colour="#d9d9d9", kind="cache")
    diagram.note(ax, 74, 1.7, "not written yet")
    return fig


def _column_labels(ax, x, y, w, tokens):
    """Labels above a grid's columns: Chinese stacked, anything else rotated."""
    cw = w / len(tokens)
    for c, token in enumerate(tokens):
        stacked = not token.isascii()
        ax.text(x + (c + 0.5) * cw, y, "\n".join(token) if stacked else token,
                ha="center", va="bottom", fontsize=diagram.MIN_FONT,
                rotation=0 if stacked else 90, linespacing=0.95)


def cache_frame_labels(tokens: list[str], prompt_len: int) -> list[str]:
    """Slider labels: "prefill · positions 0–5", then "step 3 · position 8 (玉)"."""
    return ([f"prefill · positions 0–{prompt_len - 1}"]
            + [f"step {p - prompt_len + 1} · position {p} ({tokens[p]})"
               for p in range(prompt_len, len(tokens))])


def cache_frames(keys: torch.Tensor, tokens: list[str], prompt_len: int, dims: int = 32,
                 where: str = "layer 0, KV head 0", dpi: int = 80) -> list[bytes]:
    """The cache filling, one PNG per step: keys [S, D] of one head (chapter 4b).

    Frame 0 is the prefill (rows 0 to prompt_len - 1); frame t adds row
    prompt_len + t - 1, outlined. Rows not yet written are grey; one colour scale.
    """
    import io

    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    keys = keys[:, :dims].float().cpu()  # [S, dims]
    limit = keys.abs().max().item()
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#e0e0e0")
    frames = []
    for filled in range(prompt_len, len(tokens) + 1):
        fig, ax = plt.subplots(figsize=(7, 0.24 * len(tokens) + 1.5), dpi=dpi)
        shown = keys.clone()
        shown[filled:] = float("nan")
        image = ax.imshow(shown.numpy(), cmap=cmap, vmin=-limit, vmax=limit,
                          aspect="auto")
        ax.set_yticks(range(len(tokens)), [f"{i}: {t}" for i, t in enumerate(tokens)],
                      fontsize=9)
        ax.set_xlabel(f"key dimension (the first {dims})", fontsize=10)
        fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="key value")
        newest = range(prompt_len) if filled == prompt_len else [filled - 1]
        ax.add_patch(Rectangle((-0.5, newest[0] - 0.5), dims, len(newest),
                               facecolor="none", edgecolor="black", lw=2))
        step = filled - prompt_len
        what = (f"prefill writes positions 0–{prompt_len - 1}" if step == 0 else
                f"decode step {step} appends position {filled - 1} "
                f"({tokens[filled - 1]})")
        ax.set_title(f"cached keys, {where}: {what}", fontsize=10)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi)
        plt.close(fig)
        frames.append(buffer.getvalue())
    return frames


def cache_diagram(config, tokens: list[str], bytes_per_value: int = 2, context: int = 32768):
    """One layer's KV-cache during a decode step, drawn with `config`'s sizes (chapter 4b).

    `tokens`: the prompt followed by one new token (the decode step's input).
    """
    H_kv, D, L = config.num_key_value_heads, config.head_dim, config.num_hidden_layers
    fig, ax = diagram.canvas(7, 5.6, title=f"One layer's KV-cache during a decode step (× {L} "
                                           f"layers): {config.num_attention_heads} query / {H_kv} "
                                           f"KV heads of {D}")
    _draw_cache_rows(ax, tokens, H_kv, D)
    _draw_decode_step(ax, config, tokens[-1], len(tokens) - 1)
    per_layer = bytes_per_token_per_layer(config, bytes_per_value)
    total = per_layer * L * context
    diagram.note(ax, 0, 4,
                 f"One layer caches K and V, [B, S, {H_kv}, {D}] each: 2 × {H_kv} × {D} × "
                 f"{bytes_per_value} B = {per_layer:,} B per token in bf16;\n"
                 f"× {L} layers = {per_layer * L:,} B per token; at {context:,} tokens, "
                 f"{total / 2**20:,.0f} MiB. The queries are never cached.", colour=diagram.INK)
    return fig


_ROW_TOP, _ROW_H, _K_X, _V_X, _BAR_W = 69, 4.4, 8, 25, 14  # the cache's layout on the canvas


def _row_centre(i):
    return _ROW_TOP - (i + 0.5) * _ROW_H


def _draw_cache_rows(ax, tokens, H_kv, D):
    """The cache as one row per position: K and V bars of H_kv heads; the last row is the new one."""
    from matplotlib.patches import Rectangle
    S = len(tokens) - 1
    for x, name in [(_K_X, "keys K"), (_V_X, "values V")]:
        diagram.note(ax, x + _BAR_W / 2, _ROW_TOP + 2.2, name, ha="center", colour=diagram.INK)
    diagram.note(ax, (_K_X + _V_X + _BAR_W) / 2, _ROW_TOP + 6, f"{H_kv} KV heads × {D} each",
                 ha="center")
    for i, token in enumerate(tokens):
        y = _ROW_TOP - (i + 1) * _ROW_H
        for x in (_K_X, _V_X):
            diagram.segments(ax, x, y + 0.5, _BAR_W, _ROW_H - 1.0, [1] * H_kv,
                             labels=[str(h) for h in range(H_kv)] if i == 0 else None)
            if i == S:  # the row this decode step appends: outlined
                ax.add_patch(Rectangle((x - 0.4, y + 0.1), _BAR_W + 0.8, _ROW_H - 0.2,
                                       facecolor="none", edgecolor=diagram.INK, lw=1.6))
            elif i:  # rows written by the prefill: paler (row 0 keeps its head numbers legible)
                ax.add_patch(Rectangle((x, y + 0.5), _BAR_W, _ROW_H - 1.0, facecolor="white",
                                       alpha=0.45, lw=0))
        diagram.note(ax, _K_X - 1, _row_centre(i), f"{i} {token}", ha="right", colour=diagram.INK)
    diagram.note(ax, 1, _ROW_TOP - (S + 1) * _ROW_H - 8,
                 f"rows 0 to {S - 1}: written by the prefill\n(all {S} prompt tokens in one "
                 f"pass)\nrow {S}: appended by this step", colour=diagram.INK)


def _draw_decode_step(ax, config, token, S):
    """The decode step's boxes on the right: project one token, append, attend over S + 1 positions."""
    d, H, H_kv, D = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                     config.head_dim)
    x0, w = 55, 44
    mid = x0 + w / 2
    diagram.box(ax, x0, 66, w, 5, f"the new token {token}: x [1, 1, {d}]", "loss")
    diagram.arrow(ax, (mid, 65.4), (mid, 62.6))
    diagram.box(ax, x0, 45, w, 17,
                f"q_proj {d} → {H * D}: q [1, 1, {H}, {D}]\n"
                f"k_proj, v_proj {d} → {H_kv * D}:\n    k, v [1, 1, {H_kv}, {D}]\n"
                f"QK-Norm, then RoPE at position {S}\n(= the number of cached tokens)", "attn",
                align="left")
    y_new, x_turn = _row_centre(S), 48
    diagram.line(ax, [(x0 - 0.6, 49), (x_turn, 49), (x_turn, y_new)])
    diagram.arrow(ax, (x_turn, y_new), (_V_X + _BAR_W + 0.8, y_new))
    diagram.note(ax, x_turn - 0.8, 44, "append\nk, v", ha="right", colour=diagram.INK)
    diagram.arrow(ax, (mid, 44.4), (mid, 41.6))
    diagram.box(ax, x0, 19, w, 22,
                f"attend over all {S + 1} cached positions:\n"
                f"scores q·Kᵀ/√{D}: [1, {H}, 1, {S + 1}]\n"
                f"(query head h reads KV head h // {H // H_kv})\n"
                f"softmax, then · V: [1, {H}, 1, {D}]\n"
                f"o_proj {H * D} → {d}: [1, 1, {d}]", "attn", align="left")
    bottom = _ROW_TOP - (S + 1) * _ROW_H
    diagram.arrow(ax, (_V_X + _BAR_W / 2, bottom - 0.3), (x0 - 0.8, 28))
    diagram.note(ax, 39.5, 24, f"read all {S + 1}\nrows of K, V", colour=diagram.INK)
