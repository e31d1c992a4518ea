"""What chapter 4's pictures and tables show: masks, attention entropy, head scores, cache sizes, timings.

Pure functions return tensors or numbers and are tested in tests/lab/test_attention_lab.py; the figure functions
only draw what those return. `attention_parts` reads a model's queries, keys and values with forward hooks.
"""
import functools
import io
import math
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ..attention import causal_mask
from ..rope import apply_rotary_pos_emb
from .fonts import use_cjk_font  # noqa: F401  (chapters call lab.use_cjk_font())

# --- masks ---------------------------------------------------------------------------------------------------

def allowed_keys(q_len: int, kv_len: int, attention_mask=None, device=None) -> torch.Tensor:
    """[B or 1, q_len, kv_len] booleans from the package's causal_mask: True where a query may look at a key."""
    return causal_mask(q_len, kv_len, attention_mask, device)[:, 0]


def mask_figure(allowed: torch.Tensor, key_labels, title: str, padding=None):
    """One mask [q_len, kv_len] on the full kv_len x kv_len grid: the queries are its last q_len rows.

    Green: the query may look at the key; grey: blocked; white: a position that is not a query in this call (its
    keys and values come from the cache). `padding` (booleans [kv_len], optional) hatches the padding keys.
    Every frame of a widget built from it has the same size for the same kv_len.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    q_len, kv_len = allowed.shape
    grid = torch.full((kv_len, kv_len), 2)
    grid[kv_len - q_len:] = allowed.int()
    fig, ax = plt.subplots(figsize=(0.42 * kv_len + 2.6, 0.42 * kv_len + 0.9))
    ax.imshow(grid.numpy(), cmap=ListedColormap(["#d9d9d9", "#74c476", "#ffffff"]), vmin=0, vmax=2)
    ax.set_xticks(range(kv_len), key_labels, fontsize=10, rotation=90)
    ax.set_yticks(range(kv_len), key_labels, fontsize=10)
    ax.set_xticks([x - 0.5 for x in range(1, kv_len)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, kv_len)], minor=True)
    ax.grid(which="minor", color="#f0f0f0", lw=1.5)
    ax.tick_params(which="minor", length=0)
    if padding is not None:
        for j in torch.nonzero(padding).flatten().tolist():
            ax.add_patch(plt.Rectangle((j - 0.5, kv_len - q_len - 0.5), 1, q_len, fill=False, hatch="//",
                                       ec="#888", lw=0))
    ax.set_xlabel("key (position: token)", fontsize=10)
    ax.set_ylabel("query (position: token)", fontsize=10)
    ax.set_title(title, fontsize=10)
    handles = [Patch(color="#74c476", label="may look"), Patch(color="#d9d9d9", label="blocked (−∞)"),
               Patch(facecolor="#ffffff", edgecolor="#999", label="not a query in\nthis call (cached)")]
    if padding is not None:
        handles.append(Patch(facecolor="#d9d9d9", hatch="//", edgecolor="#888", label="padding key"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9, frameon=False)
    return fig


# --- scores, entropy ------------------------------------------------------------------------------------------

def attention_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each query's attention distribution [..., S_q, S_kv] -> [..., S_q] (0 log 0 = 0)."""
    probs = probs.float()
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


def softmax_with_mask(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax over keys with blocked keys set to -inf first, in float32."""
    return F.softmax(scores.float().masked_fill(~allowed, float("-inf")), dim=-1)


def scaled_probs(q: torch.Tensor, k: torch.Tensor, multiplier: float = 1.0) -> torch.Tensor:
    """softmax(multiplier * q k^T / sqrt(D)) under the causal mask, float32: q, k [B, H, S, D] -> [B, H, S, S].

    The KV heads of k must already be repeated to match q. multiplier 1 is the model's own attention.
    """
    scores = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = allowed_keys(q.shape[-2], k.shape[-2], device=q.device)[:, None]  # [1, 1, S, S]
    return softmax_with_mask(multiplier * scores, allowed)


def entropy_against_scale(q: torch.Tensor, k: torch.Tensor, multipliers) -> torch.Tensor:
    """Mean attention entropy (nats) of scaled_probs(q, k, m) for each m; the first query (entropy 0) is skipped."""
    return torch.stack([attention_entropy(scaled_probs(q, k, m))[..., 1:].mean() for m in multipliers])


def softmax_slope(probs: torch.Tensor) -> float:
    """Mean over queries (the first skipped) of sum_j p_j (1 - p_j): the diagonal of the softmax's Jacobian.

    How strongly the weights respond to their own scores, i.e. how much gradient reaches the scores: 0 for a
    one-hot row, 1 - 1/n for n equal weights.
    """
    probs = probs.float()
    return (probs * (1 - probs)).sum(-1)[..., 1:].mean().item()


def uniform_entropy(seq_len: int) -> float:
    """Mean entropy of causal attention spread evenly over the visible keys, queries 1..seq_len-1: mean ln(i+1)."""
    return sum(math.log(i + 1) for i in range(1, seq_len)) / (seq_len - 1)


def score_stages(q: torch.Tensor, k: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """One head's [S, D] queries and keys through the four stages of attention, each [S, S].

    raw q·k -> divided by sqrt(D) -> future set to -inf -> softmax (probabilities).
    """
    raw = q.float() @ k.float().T
    scaled = raw / math.sqrt(q.shape[-1])
    allowed = allowed_keys(q.shape[0], k.shape[0])[0]
    masked = scaled.masked_fill(~allowed, float("-inf"))
    return [("raw scores q·k", raw), ("scaled q·k / √d", scaled), ("masked: future = −∞", masked),
            ("softmax: probabilities", F.softmax(masked, dim=-1))]


@contextmanager
def scaled_queries(model, factor: float):
    """Multiply every layer's q_norm gain by `factor` inside the block (factor √d undoes the 1/√d); restores it."""
    gains = [layer.self_attn.q_norm.weight for layer in model.model.layers]
    saved = [g.detach().clone() for g in gains]
    try:
        with torch.no_grad():
            for g in gains:
                g.mul_(factor)
        yield model
    finally:
        with torch.no_grad():
            for g, s in zip(gains, saved):
                g.copy_(s)


@torch.no_grad()
def attention_parts(model, input_ids) -> list[dict]:
    """Per layer, what its attention computes on `input_ids` (no cache), read with forward hooks.

    q_proj / k_proj: projections before QK-Norm [B, S, H or n_kv, D]; q [B, H, S, D] and k, v [B, n_kv, S, D]:
    after QK-Norm and RoPE (k) as the attention uses them, before repeat_kv. Returned on the CPU in float32.
    """
    captured, handles = [], []
    for layer in model.model.layers:
        attn, record = layer.self_attn, {}
        captured.append(record)
        for name, module in [("q_proj", attn.q_proj), ("k_proj", attn.k_proj), ("v", attn.v_proj),
                             ("q_normed", attn.q_norm), ("k_normed", attn.k_norm)]:
            handles.append(module.register_forward_hook(
                lambda mod, args, out, name=name, record=record: record.__setitem__(name, out.detach())))
    try:
        model(input_ids, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    seq_len = input_ids.shape[1]
    cos, sin = model.model.freqs_cos[:seq_len], model.model.freqs_sin[:seq_len]
    parts = []
    for layer, record in zip(model.model.layers, captured):
        attn = layer.self_attn
        bsz = input_ids.shape[0]
        q, k = apply_rotary_pos_emb(record["q_normed"], record["k_normed"], cos, sin)
        part = {"q_proj": record["q_proj"].view(bsz, seq_len, attn.n_local_heads, attn.head_dim),
                "k_proj": record["k_proj"].view(bsz, seq_len, attn.n_local_kv_heads, attn.head_dim),
                "q": q.transpose(1, 2), "k": k.transpose(1, 2),
                "v": record["v"].view(bsz, seq_len, attn.n_local_kv_heads, attn.head_dim).transpose(1, 2)}
        parts.append({name: t.float().cpu() for name, t in part.items()})
    return parts


# --- what heads do ----------------------------------------------------------------------------------------------

def head_targets(input_ids: torch.Tensor, punctuation_ids, start_id: int = 1) -> dict[str, torch.Tensor]:
    """Named patterns of keys, each [B, S, S] booleans: for each query, the key(s) a head of that kind would pick.

    previous token: key i-1; same token: key i; start: the <|im_start|> key; line opener: the most recent
    punctuation key strictly before the query, or the start token when no punctuation came yet (what opened the
    current line); previous line's opener: the opener before that one (the mark that
    opened the previous line).
    """
    bsz, seq_len = input_ids.shape
    pos = torch.arange(seq_len)
    is_start = input_ids == start_id
    targets = {
        "previous token": (pos[None, :] == pos[:, None] - 1).expand(bsz, seq_len, seq_len),
        "same token": (pos[None, :] == pos[:, None]).expand(bsz, seq_len, seq_len),
        "start": is_start[:, None, :] & (pos[None, :] <= pos[:, None])[None],
    }
    is_opener = torch.isin(input_ids, torch.as_tensor(list(punctuation_ids))) | is_start
    latest, second = torch.full((bsz,), -1), torch.full((bsz,), -1)
    latest_before = torch.empty(bsz, seq_len, dtype=torch.long)
    second_before = torch.empty(bsz, seq_len, dtype=torch.long)
    for i in range(seq_len):  # the two most recent openers before query i (-1: none)
        latest_before[:, i], second_before[:, i] = latest, second
        second = torch.where(is_opener[:, i], latest, second)
        latest = torch.where(is_opener[:, i], torch.full_like(latest, i), latest)
    targets["line opener"] = pos[None, None, :] == latest_before[:, :, None]
    # the mark that opened the previous line (the line opener one line back)
    targets["previous line's opener"] = pos[None, None, :] == second_before[:, :, None]
    return targets


def head_scores(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Attention mass each head puts on the target keys, averaged over the queries that have one: [B, H, S, S] -> [H].

    target: [B, S, S] booleans (head_targets). Queries with no target key are left out.
    """
    mass = (probs.float() * target[:, None]).sum(-1)  # [B, H, S]
    has_target = target.any(-1)  # [B, S]
    return mass.transpose(0, 1)[:, has_target].mean(-1)


def chance_score(target: torch.Tensor, allowed: torch.Tensor | None = None) -> float:
    """The head_scores of a head spreading its attention evenly over the keys it may see (the baseline)."""
    seq_len = target.shape[-1]
    allowed = allowed_keys(seq_len, seq_len)[0] if allowed is None else allowed
    uniform = allowed.float() / allowed.float().sum(-1, keepdim=True)  # [S, S] or [B, S, S]
    uniform = uniform.expand(target.shape)[:, None]  # [B, 1, S, S]
    return head_scores(uniform, target).item()


def attention_grid_figure(probs: list[torch.Tensor], tokens: list[str], marked: list[int], title: str):
    """d2l-style grid, a heat map per layer and head, probs[l] [H, S, S].

    One colour scale, 0 to 1. Only the positions in `marked` (the start token and the
    punctuation, say) get tick labels, token and position, on the outer panels only.
    """
    import matplotlib.pyplot as plt
    layers, heads = len(probs), probs[0].shape[0]
    size = (1.6 * heads + 1.2, 1.6 * layers + 0.9)
    fig, axes = plt.subplots(layers, heads, figsize=size, sharex=True, sharey=True)
    fig.subplots_adjust(left=0.13, right=0.86, bottom=0.13, top=0.9, wspace=0.08,
                        hspace=0.08)
    labels = [f"{tokens[i]}{i}" for i in marked]
    for l in range(layers):
        for h in range(heads):
            ax = axes[l, h]
            image = ax.imshow(probs[l][h].float().numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.set_xticks(marked, labels, fontsize=11, rotation=90)  # shared: shown
            ax.set_yticks(marked, labels, fontsize=11)  # on the outer panels only
            ax.tick_params(length=2, pad=1)
            if l == 0:
                ax.set_title(f"head {h}", fontsize=11)
            if h == 0:
                ax.set_ylabel(f"layer {l}", fontsize=11)
    fig.colorbar(image, cax=fig.add_axes([0.88, 0.25, 0.02, 0.5]), label="attention probability")
    fig.text(0.49, 0.005, "key (looked at)", ha="center", fontsize=11)
    fig.text(0.015, 0.49, "query (looking)", va="center", rotation=90, fontsize=11)
    fig.suptitle(title, fontsize=12)
    return fig


def heatmap_frames(matrices, tokens: list[str], titles: list[str], vmin=0.0, vmax=1.0, cmap="viridis",
                   label="attention probability", dpi=80, colors=256, figsize=(4.9, 4.5)) -> list[bytes]:
    """PNG frames of [S, S] matrices with tokens as text on both axes, one colour scale for all frames.

    The axes, labels and colourbar are drawn once; each frame redraws only the image and the title (blitting),
    which is many times faster than drawing a figure per frame. -inf is drawn grey.
    """
    import matplotlib.pyplot as plt
    cmap = plt.get_cmap(cmap).with_extremes(bad="#bdbdbd")
    fig, ax = plt.subplots(figsize=figsize, dpi=dpi)
    image = ax.imshow(torch.zeros(len(tokens), len(tokens)).numpy(), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(tokens)), tokens, fontsize=10, rotation=90)
    ax.set_yticks(range(len(tokens)), tokens, fontsize=10)
    ax.set_xlabel("key (looked at)", fontsize=10), ax.set_ylabel("query (looking)", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label=label)
    title = ax.set_title(max(titles, key=len), fontsize=10)  # lay out for the longest title, then blank it
    fig.tight_layout()
    title.set_text("")
    fig.canvas.draw()
    background = fig.canvas.copy_from_bbox(fig.bbox)
    frames = []
    for matrix, text in zip(matrices, titles):
        fig.canvas.restore_region(background)
        shown = matrix.float().clone()
        shown[torch.isinf(shown)] = float("nan")
        image.set_data(shown.numpy())
        title.set_text(text)
        ax.draw_artist(image), ax.draw_artist(title)
        frames.append(_canvas_png(fig, colors))
    plt.close(fig)
    return frames


def _canvas_png(fig, colors: int = 256) -> bytes:
    """The figure's canvas as it was last drawn (blitting included), as a palette PNG."""
    from PIL import Image
    width, height = fig.canvas.get_width_height(physical=True)
    picture = Image.frombuffer("RGBA", (width, height), bytes(fig.canvas.buffer_rgba())).convert("RGB")
    buffer = io.BytesIO()
    picture.quantize(colors=colors).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def gqa_figure(num_heads: int, num_kv_heads: int, title: str):
    """Which query heads read which key/value head: head h uses KV head h // (num_heads // num_kv_heads)."""
    import matplotlib.pyplot as plt
    n_rep = num_heads // num_kv_heads
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(6.5, 2.2))
    for h in range(num_heads):
        kv = h // n_rep
        kv_x = (kv + 0.5) * num_heads / num_kv_heads - 0.5
        ax.plot([h, kv_x], [1, 0], color=colors(kv % 10), lw=1.5)
        ax.add_patch(plt.Circle((h, 1), 0.28, color=colors(kv % 10)))
        ax.text(h, 1, f"q{h}", ha="center", va="center", fontsize=9, color="white")
    for kv in range(num_kv_heads):
        kv_x = (kv + 0.5) * num_heads / num_kv_heads - 0.5
        ax.add_patch(plt.Rectangle((kv_x - 0.45, -0.25), 0.9, 0.5, color=colors(kv % 10)))
        ax.text(kv_x, 0, f"kv{kv}", ha="center", va="center", fontsize=9, color="white")
    ax.text(num_heads - 0.3, 1, "query heads", va="center", fontsize=9)
    ax.text(num_heads - 0.3, 0, "key/value heads", va="center", fontsize=9)
    ax.set(xlim=(-0.6, num_heads + 2.2), ylim=(-0.5, 1.5), aspect="equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    return fig


# --- sizes and timings --------------------------------------------------------------------------------------------

def kv_cache_bytes(config, seq_len: int, batch: int = 1, bytes_per_value: int = 2) -> int:
    """Bytes of the KV-cache: keys and values, every layer, [batch, seq_len, n_kv, head_dim] each."""
    return 2 * config.num_hidden_layers * batch * seq_len * config.num_key_value_heads * config.head_dim * bytes_per_value


def scores_bytes(batch: int, heads: int, q_len: int, kv_len: int, bytes_per_value: int = 4) -> int:
    """Bytes of one layer's [B, H, q_len, kv_len] score (or probability) matrix, which the fused path never stores."""
    return batch * heads * q_len * kv_len * bytes_per_value


def best_time(fn, repeats: int = 5, warmup: int = 1) -> float:
    """The fastest of `repeats` calls of fn() in seconds (after `warmup` calls): the least disturbed by other work.

    Without CUDA it reads the process's CPU clock, so programs competing for a shared machine's cores do not count:
    with one torch thread (the chapters set it) that is the wall time an idle machine would show. With CUDA in use
    it waits for the GPU and reads the wall clock, since GPU work is not CPU time.
    """
    gpu = torch.cuda.is_available() and torch.cuda.is_initialized()
    clock = time.perf_counter if gpu else time.process_time
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if gpu:
            torch.cuda.synchronize()
        start = clock()
        fn()
        if gpu:
            torch.cuda.synchronize()
        times.append(clock() - start)
    return min(times)


class _TokenClock:
    """A model.generate streamer that notes the clock at each new token (the first put is the prompt: the start)."""

    def __init__(self, clock):
        self.clock, self.start, self.times = clock, None, []

    def put(self, value):
        if self.start is None:
            self.start = self.clock()
        else:
            self.times.append(self.clock() - self.start)

    def end(self):
        pass


def generation_times(model, input_ids, new_tokens: int, use_cache: bool = True) -> torch.Tensor:
    """Seconds from the start of a greedy model.generate to each of its new tokens: [new_tokens], increasing.

    One generation gives the whole curve (tokens/s after n tokens is n / times[n - 1]). Same clock as best_time:
    the process's CPU clock without CUDA, the wall clock with it (each token is copied to the CPU, which waits).
    """
    gpu = torch.cuda.is_available() and torch.cuda.is_initialized()
    recorder = _TokenClock(time.perf_counter if gpu else time.process_time)
    with torch.no_grad():
        model.generate(input_ids, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                       use_cache=use_cache, streamer=recorder)
    return torch.tensor(recorder.times, dtype=torch.float64)


# --- the KV-cache (chapter 4b) ------------------------------------------------------------------------------------

def concat_append(cache: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """What MiniMind's cache does each step: a new tensor holding the old positions and the new ones (a full copy)."""
    return new if cache is None else torch.cat([cache, new], dim=1)


class PreallocatedCache:
    """A cache that reserves [B, max_len, n_kv, D] once and writes each step's positions in place (no copy)."""

    def __init__(self, batch: int, max_len: int, num_kv_heads: int, head_dim: int, dtype=torch.float32):
        self.buffer = torch.zeros(batch, max_len, num_kv_heads, head_dim, dtype=dtype)
        self.length = 0

    def append(self, new: torch.Tensor) -> torch.Tensor:
        """Write `new` [B, S_new, n_kv, D] after the cached positions; returns a view of all cached positions."""
        end = self.length + new.shape[1]
        if end > self.buffer.shape[1]:
            raise ValueError(f"cache full: {end} positions needed, {self.buffer.shape[1]} reserved")
        self.buffer[:, self.length:end] = new
        self.length = end
        return self.buffer[:, :end]


def cache_frames(keys: torch.Tensor, tokens: list[str], prompt_len: int, dims: int = 32, dpi=80) -> list[bytes]:
    """One frame per decode step: the cached keys [S, D] of one head, rows filled up to that step (grey: empty).

    Frame 0 is the prefill (prompt_len rows); frame t adds row prompt_len + t - 1. One colour scale for all frames.
    """
    import matplotlib.pyplot as plt
    keys = keys[:, :dims].float().cpu()
    limit = keys.abs().max().item()
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#e0e0e0")
    fig, ax = plt.subplots(figsize=(6.4, 0.22 * len(tokens) + 1.3), dpi=dpi)
    image = ax.imshow(torch.full_like(keys, float("nan")).numpy(), cmap=cmap, vmin=-limit, vmax=limit, aspect="auto")
    ax.set_yticks(range(len(tokens)), [f"{i}: {t}" for i, t in enumerate(tokens)], fontsize=9)
    ax.set_xlabel(f"key dimension (the first {dims})", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="key value")
    title = ax.set_title("x" * 60, fontsize=10)
    fig.tight_layout()
    title.set_text("")
    fig.canvas.draw()
    background = fig.canvas.copy_from_bbox(fig.bbox)  # axes, labels, colourbar: drawn once
    frames = []
    for filled in range(prompt_len, len(tokens) + 1):
        fig.canvas.restore_region(background)
        shown = keys.clone()
        shown[filled:] = float("nan")
        image.set_data(shown.numpy())
        step = filled - prompt_len
        title.set_text(f"{'prefill' if step == 0 else f'decode step {step}'}: {filled} positions cached"
                       + ("" if step == 0 else f", newest: {tokens[filled - 1]}"))
        ax.draw_artist(image), ax.draw_artist(title)
        frames.append(_canvas_png(fig))
    plt.close(fig)
    return frames


# --- the mechanism, drawn and worked by hand (chapter 4a, the opening) ---------------------------------------

def attention_diagram(config, seq: str = "S"):
    """Grouped-query attention as a data-flow diagram with `config`'s sizes (chapter 4a, the first figure).

    The hidden vector is projected to H query heads and H_kv key/value heads of D each; each KV head
    serves H // H_kv query heads (drawn in its colour); then scores, mask, softmax, · V, merge, o_proj.
    """
    import matplotlib.pyplot as plt

    from . import diagram as dg
    d, H, H_kv, D = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
    n_rep = H // H_kv
    group = [dg.HEAD_COLOURS[h // n_rep] for h in range(H)]  # a query head takes its KV head's colour
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese here; DejaVu has · √ ᵀ
        fig, ax = dg.canvas(7, 6.4, title=f"Grouped-query attention in minimind-3: {H} query heads, "
                                          f"{H_kv} key/value heads of {D}")
        dg.box(ax, 30, 85, 40, 4.5, f"x: hidden states [B, {seq}, {d}]", "tensor")
        for x0, label in [(1, f"q_proj {d} → {H}×{D}"), (37, f"k_proj {d} → {H_kv}×{D}"),
                          (69, f"v_proj {d} → {H_kv}×{D}")]:
            dg.arrow(ax, (50, 84.5), (x0 + 14, 80.5))
            dg.box(ax, x0, 76, 29, 4, label, "attn")
        dg.segments(ax, 1, 66, 34, 4.5, [D] * H, [f"q{h}" for h in range(H)], group,
                    title=f"Q: {H} heads of {D}")
        dg.segments(ax, 39, 66, 25, 4.5, [D] * H_kv, [f"k{j}" for j in range(H_kv)],
                    dg.HEAD_COLOURS[:H_kv], title=f"K: {H_kv} heads of {D}")
        dg.segments(ax, 70, 66, 25, 4.5, [D] * H_kv, [f"v{j}" for j in range(H_kv)],
                    dg.HEAD_COLOURS[:H_kv], title=f"V: {H_kv} heads of {D}")
        dg.box(ax, 1, 57, 63, 4.5, f"QK-Norm (RMSNorm per head of {D}), then RoPE", "norm")
        dg.note(ax, 70, 59.2, "values: no norm,\nno rotation", size=9)
        dg.segments(ax, 1, 47.5, 63, 4.5, [1] * H, [f"q{h}·k{h // n_rep}" for h in range(H)], group,
                    title=f"pairs: each KV head serves {n_rep} query heads (h reads h // {n_rep})")
        dg.arrow(ax, (30, 46.5), (30, 43.5))
        dg.box(ax, 1, 35, 58, 8, f"scores = Q Kᵀ / √{D} + M\n[B, {H}, {seq}, {seq}]: one matrix per head",
               "attn")
        mask = torch.zeros(4, 4).masked_fill(~allowed_keys(4, 4)[0], float("-inf"))
        dg.grid(ax, 68, 31, 20, 14, mask.numpy(), cmap="Greens", vmin=-1, vmax=1, numbers=True, size=9,
                title="M for 4 tokens")
        dg.note(ax, 90, 38, "0: may look\n−∞: future", size=9)
        dg.arrow(ax, (30, 34.5), (30, 31.5))
        dg.box(ax, 1, 26.5, 58, 4.5, "softmax over the keys: each row sums to 1", "attn")
        dg.arrow(ax, (30, 26), (30, 23))
        dg.box(ax, 1, 18.5, 58, 4.5, f"· V: [B, {H}, {seq}, {D}], weighted averages of values", "attn")
        dg.arrow(ax, (30, 18), (30, 15))
        dg.segments(ax, 1, 7.5, 50, 4.5, [D] * H, [f"h{h}" for h in range(H)], group,
                    title=f"concatenate: [B, {seq}, {H}×{D} = {H * D}]")
        dg.arrow(ax, (51.5, 9.75), (56, 9.75))
        dg.box(ax, 56.5, 7.5, 22, 4.5, f"o_proj {H * D} → {d}", "attn")
        dg.arrow(ax, (79, 9.75), (82, 9.75))
        dg.shape(ax, 82.5, 9.75, f"[B, {seq}, {d}]")
        dg.note(ax, 1, 1.8, "A query head is drawn in the colour of the key/value head it reads.", size=9)
    return fig


def five_token_example():
    """Chapter 4a's example small enough to check by hand: 5 tokens, hidden 4, 2 heads of 2.

    x's features: [is 月, is 光, is punctuation, 1]. Head 0's query asks for the same word as its own
    token; head 1's asks for punctuation. Weights are [out, in], as nn.Linear stores them.
    """
    tokens = ["月", "光", "，", "明", "月"]
    x = torch.tensor([[1., 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1], [0, 0, 0, 1], [1, 0, 0, 1]])  # [5, 4]
    w_q = torch.tensor([[3., 0, 0, 0], [0, 3, 0, 0],   # head 0: "I am 月 / 光: find the same word"
                        [0, 0, 0, 3], [0, 0, 0, 0]])   # head 1: "find punctuation", for every token
    w_k = torch.tensor([[1., 0, 0, 0], [0, 1, 0, 0],   # head 0's key: "I am 月 / 光"
                        [0, 0, 1, 0], [0, 0, 0, 0]])   # head 1's key: "I am punctuation"
    w_v = torch.tensor([[1., 0, 0, 0], [0, 1, 0, 0],   # head 0 hands over which word it is
                        [0, 0, 1, 0], [0, 0, 0, 1]])   # head 1: "punctuation", and a constant 1
    w_o = torch.tensor([[1., 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0],
                        [1, 0, 1, 0]])                 # output 3 mixes the heads: 月 seen + comma seen
    return tokens, x, {"q_proj": w_q, "k_proj": w_k, "v_proj": w_v, "o_proj": w_o}


def toy_attention(weights):
    """The package's Attention at hidden 4, 2 heads of 2, loaded with `weights` (five_token_example).

    QK-Norm is replaced by the identity, so the module computes exactly the hand example.
    """
    from ..attention import Attention
    from ..config import MiniMindConfig
    config = MiniMindConfig(hidden_size=4, num_attention_heads=2, num_key_value_heads=2, head_dim=2)
    module = Attention(config).eval()
    with torch.no_grad():
        for name, w in weights.items():
            getattr(module, name).weight.copy_(w)
    module.q_norm, module.k_norm = torch.nn.Identity(), torch.nn.Identity()
    return module


# --- the reference for the build-it exercise, and FlashAttention's idea (chapter 4a) ----------------------

def explicit_path(q, k, v, attention_mask=None):
    """The package's explicit attention as `forward` runs it: repeat_kv, then explicit_attention.

    q [B, H, S, D]; k, v [B, H_kv, S_kv, D] -> [B, H, S, D]. Chapter 4a's Exercise 5 is checked on it.
    """
    from types import SimpleNamespace

    from ..attention import Attention, repeat_kv
    n_rep = q.shape[1] // k.shape[1]
    k = repeat_kv(k.transpose(1, 2), n_rep).transpose(1, 2)  # [B, H, S_kv, D]
    v = repeat_kv(v.transpose(1, 2), n_rep).transpose(1, 2)
    owner = SimpleNamespace(head_dim=q.shape[-1], attn_dropout=torch.nn.Identity())
    return Attention.explicit_attention(owner, q, k, v, attention_mask)[0]


def blockwise_attention(q, k, v, block: int = 16):
    """Causal attention over `block` keys at a time with an online softmax (FlashAttention's idea).

    q, k, v [B, H, S, D] (queries the last of the keys). Only [B, H, S, block] scores exist at once: a
    running max m, sum l and output acc are rescaled whenever a block raises the max (chapter 4a).
    """
    q_len, kv_len = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]  # [S, 1]
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))  # running max of the scores   [B, H, S, 1]
    l = q.new_zeros((*q.shape[:-1], 1))                 # running sum of exp(s - m)   [B, H, S, 1]
    acc = torch.zeros_like(q)                           # running sum of exp(s - m)·v [B, H, S, D]
    for start in range(0, kv_len, block):
        k_b, v_b = k[..., start:start + block, :], v[..., start:start + block, :]
        s = q @ k_b.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S, block]
        k_pos = torch.arange(start, start + k_b.shape[-2], device=q.device)[None, :]
        s = s.masked_fill(k_pos > q_pos, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        rescale = torch.exp(m - m_new)  # what was summed under the old max, moved to the new one
        p = torch.exp(s - m_new)
        l = l * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ v_b
        m = m_new
    return acc / l


def decode_step_traffic(num_heads: int, num_kv_heads: int, head_dim: int, cached: int,
                        copy: bool = False, bytes_per_value: int = 2) -> tuple[int, int]:
    """(FLOPs, bytes moved) of one layer's attention for one new token over `cached` keys (chapter 4a).

    FLOPs: q·k and the weighted sum of values, 2 FLOPs per multiply-add: 4·n·H·D whatever H_kv is.
    Bytes: the cached K and V read once (a kernel that shares KV heads); `copy=True` adds repeat_kv's
    copy: read the cache, write H heads' worth, read those again.
    """
    flops = 4 * cached * num_heads * head_dim
    cache = 2 * cached * num_kv_heads * head_dim * bytes_per_value  # K and V
    copied = 2 * cached * num_heads * head_dim * bytes_per_value
    return flops, cache + 2 * copied if copy else cache


# --- what heads do, as figures (chapter 4a, section 7) --------------------------------------------------------

def head_verdict(scores: dict, chances: dict, margin: float = 0.05) -> str:
    """'previous token (0.47, chance 0.08)', or 'near chance' when no pattern beats chance by `margin`."""
    best = max(scores, key=lambda name: scores[name] - chances[name])
    if scores[best] - chances[best] < margin:
        return f"near chance (best: {best}, {scores[best]:.2f} vs {chances[best]:.2f})"
    return f"{best} ({scores[best]:.2f}, chance {chances[best]:.2f})"


def head_excess_figure(table: dict, chances: dict, title: str):
    """Heat map of each head's score minus chance: rows 'L0 H0' ..., one column per pattern, numbers in."""
    import matplotlib.pyplot as plt
    names = list(table)
    excess = torch.stack([table[n].flatten() - chances[n] for n in names], dim=1)  # [L·H, patterns]
    layers, heads = table[names[0]].shape
    fig, ax = plt.subplots(figsize=(5.6, 6.4))
    image = ax.imshow(excess.numpy(), cmap="RdBu_r", vmin=-0.7, vmax=0.7, aspect="auto")
    for (r, c), value in zip(torch.cartesian_prod(torch.arange(len(excess)), torch.arange(len(names))),
                             excess.flatten()):
        shown = round(float(value), 2)
        ax.text(c, r, f"{shown:+.2f}" if shown else "0.00", ha="center", va="center", fontsize=9,
                color="white" if abs(shown) > 0.4 else "#222222")
    ax.set_xticks(range(len(names)), [n.replace(" ", "\n") for n in names], fontsize=10)
    ax.set_yticks(range(layers * heads), [f"layer {l}, head {h}" for l in range(layers)
                                          for h in range(heads)], fontsize=9)
    ax.xaxis.tick_top()
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03, label="score − chance (attention mass)")
    ax.set_title(title, fontsize=11, pad=28)
    fig.tight_layout()
    return fig


@contextmanager
def ablated_heads(model, heads: dict):
    """Zero the outputs of some heads inside the block: {layer: [head, ...]} (chapter 4a's Exercise 6).

    A forward pre-hook on each layer's o_proj zeroes those heads' D columns of its input [B, S, H·D].
    """
    handles = []
    for layer, chosen in heads.items():
        attn = model.model.layers[layer].self_attn

        def zero(module, args, chosen=tuple(chosen), d=attn.head_dim):
            x = args[0].clone()
            for h in chosen:
                x[..., h * d:(h + 1) * d] = 0
            return (x,)

        handles.append(attn.o_proj.register_forward_pre_hook(zero))
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def _attention_variant(q, k, v, mask="causal", dim=-1, scale=None, heads="interleave"):
    """Attention with one of Exercise 5's likely mistakes (chapter 4a).

    mask: "causal" (bottom-right, the package's), "top-left" (tril() with no offset)
    or "none"; the softmax over `dim`; scores divided by `scale` (default √D); KV
    heads "interleave"d (kv0, kv0, kv1, …, the package's) or "tile"d (kv0, kv1, …).
    """
    n_rep = q.shape[1] // k.shape[1]
    if heads == "tile":
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)  # [B, H, S_kv, D]
    else:
        k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = scale or math.sqrt(q.shape[-1])
    scores = q.double() @ k.double().transpose(-2, -1) / scale  # [B, H, S_q, S_kv]
    q_len, kv_len = scores.shape[-2:]
    if mask != "none":
        offset = kv_len - q_len if mask == "causal" else 0
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril(offset)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=dim) @ v.double()  # [B, H, S_q, D]


def _likely_mistakes(q_len, kv_len, head_dim, n_rep):
    """(settings, message, hint) for Exercise 5's likely mistakes; specific first."""
    cached = kv_len - q_len
    return [
        (dict(mask="top-left"),
         "your output matches a mask aligned to the top-left corner (tril() without an "
         "offset)",
         f"the first of your {q_len} queries is the token at position {cached} "
         f"(from 0), after {cached} cached keys: which keys may it see?"),
        (dict(mask="none"),
         "your output matches attention without a mask: every query also sees the keys "
         "after it",
         "the last query sees every key anyway; the earlier ones must not see later "
         "keys"),
        (dict(dim=-2),
         "your output matches a softmax over the queries (dim=-2), not over the keys",
         "each query's weights must add up to 1 over the keys it sees: which dimension "
         "of [B, H, S_q, S_kv] holds the keys?"),
        (dict(scale=1.0),
         "your output matches scores that are not divided by √D",
         f"section 3: the scores are divided by √D (D = {head_dim} here) before the "
         "softmax"),
        (dict(scale=float(head_dim)),
         "your output matches scores divided by D instead of √D",
         f"the scale is the square root of the head size, √{head_dim}, not {head_dim}"),
        (dict(heads="tile"),
         "your KV heads come in the order kv0, kv1, …, kv0, kv1, … (the whole list "
         "repeated)",
         f"each KV head serves {n_rep} neighbouring query heads: kv0, kv0, kv1, …"),
    ]


def explain_attention_miss(got, expected, q=None, k=None, v=None):
    """Exercise 5's feedback (chapter 4a): (message, hint) naming the first head and
    query that differ and, when the case's q, k, v are given, the likely mistake the
    output reproduces. Counted from 1 in words; None when the shapes differ or nothing
    differs.
    """
    if not torch.is_tensor(got) or got.shape != expected.shape:
        return None
    close = torch.isclose(got.double(), expected.double(), atol=1e-4, rtol=1e-3).all(-1)
    if close.all():  # close: [B, H, S_q]
        return None
    _, h, t = (int(i) for i in (~close).nonzero()[0])
    where = (f"query head {h + 1}, query {t + 1} (counted from 1) differs from the "
             "package's")
    if torch.isnan(got).any():
        return (where + ": yours has NaN, as a query with no visible key would give",
                "fill −∞ where a query may *not* look; each query sees at least itself")
    if q is not None:
        n_rep = q.shape[1] // k.shape[1]
        mistakes = _likely_mistakes(q.shape[2], k.shape[2], q.shape[-1], n_rep)
        for settings, message, hint in mistakes:
            variant = _attention_variant(q, k, v, **settings)
            if torch.allclose(got.double(), variant, atol=1e-4, rtol=1e-3):
                return f"{where}: {message}", hint
    if close[:, :, -1].all():
        return (where + "; the last query matches, so look at what the earlier queries "
                "may see",
                "the last query sees every key anyway; the earlier ones must not see "
                "later keys")
    matching = [i + 1 for i in range(close.shape[1]) if close[:, i].all()]
    if matching:
        heads = ", ".join(map(str, matching))
        return (where + f"; query head(s) {heads} match: which key/value head does "
                f"head {h + 1} read?",
                "query head h reads KV head ⌊h / n_rep⌋ (counting from 0)")
    return (where + "; compare one head and one query with step 4 of section 1",
            "print your weights for one head: does each row add up to 1 over the keys?")


def attention_feedback():
    """(reference, explain) for chapter 4a's Exercise 5: the package's explicit path,
    remembering each case's q, k, v, so that explain can test for the likely mistakes.
    """
    seen = {}

    @functools.wraps(explicit_path)
    def reference(q, k, v):
        seen["qkv"] = (q, k, v)
        return explicit_path(q, k, v)

    def explain(got, expected):
        return explain_attention_miss(got, expected, *seen.get("qkv", ()))

    return reference, explain


def explain_mask_miss(got, expected):
    """Exercise 2's feedback (chapter 4a): (message, hint) for a boolean [q_len, kv_len]
    mask; rows counted from 1."""
    if not torch.is_tensor(got):
        return None
    if got.dtype != torch.bool:
        dtype = str(got.dtype).replace("torch.", "")
        return (f"your mask is {dtype}: the exercise asks for a boolean mask",
                "make it with dtype=torch.bool (or compare: a == b gives booleans)")
    if got.shape != expected.shape:
        return None
    wrong = (got != expected).any(-1)  # [q_len]
    if not wrong.any():
        return None
    r = int(wrong.nonzero()[0])
    q_len, kv_len = expected.shape
    cached = kv_len - q_len
    yours, theirs = int(got[r].sum()), int(expected[r].sum())
    keys = "key" if yours == 1 else "keys"
    message = (f"row {r + 1} (counted from 1; the token at position {cached + r} "
               f"from 0): you allow {yours} {keys}, the package {theirs}")
    if q_len < kv_len:
        return message, (f"the first row is the token at position {cached} (from 0), "
                         f"after {cached} cached keys: which keys may it see?")
    return message, "a token sees itself and every key before it, nothing after"


def explain_repeat_kv_miss(got, expected):
    """Exercise 3's feedback (chapter 4a): which KV head the first wrong query head got,
    counted from 1. The package's heads come in groups (kv0, kv0, kv1, …): a head of
    `got` equal to one of the package's is named by that head's group."""
    if not torch.is_tensor(got) or got.shape != expected.shape:
        return None
    heads = expected.shape[2]  # [B, S, H, D]
    group, kv_of = -1, []
    for i in range(heads):  # the KV head behind each of the package's query heads
        group += i == 0 or not torch.equal(expected[:, :, i], expected[:, :, i - 1])
        kv_of.append(group)
    for h in range(heads):
        if torch.equal(got[:, :, h], expected[:, :, h]):
            continue
        found = [kv_of[j] for j in range(heads)
                 if torch.equal(got[:, :, h], expected[:, :, j])]
        if not found:
            return None
        message = (f"query head {h + 1} got KV head {found[0] + 1}; the package gives "
                   f"KV head {kv_of[h] + 1} (counted from 1)")
        n_rep = heads // (kv_of[-1] + 1)
        return message, (f"each KV head should appear {n_rep} times in a row (kv1, "
                         "kv1, kv2, …), not the whole list of heads repeated")
    return None
