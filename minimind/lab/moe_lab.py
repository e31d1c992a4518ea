"""Measurements behind chapter 6's figures: where the router's gradient comes from, who goes to which expert.

Pure functions take token ids and router choices (from `probes.router_choices`) and return numbers or arrays;
`gate_gradient_norms` runs autograd on a model; `short_run` trains a tiny one for a few steps;
`moe_diagram` and `routing_figure` only draw.
"""
import functools
import math
import re
from contextlib import contextmanager

import torch

from ..moe import router_probabilities
from .probes import router_choices, router_load
from .viz import edition_text

# Paul Tol's "bright" scheme (colour-blind safe): expert e is always drawn in EXPERT_COLOURS[e].
EXPERT_COLOURS = ["#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB", "#000000"]
LIGHT_COLOURS = {"#CCBB44", "#66CCEE", "#BBBBBB"}  # drawn with black text


# --- the mechanism, drawn (chapter 6, the opening) ------------------------------------------------------------

def _weight_rule(config) -> str:
    """How the chosen experts' weights come from p, in words for the diagram."""
    if not config.norm_topk_prob:
        return "w = p (not renormalised)"
    if config.num_experts_per_tok == 1:
        return "w = p / p = 1 (top-1, renormalised)"
    return f"w = p / (sum of the {config.num_experts_per_tok} kept p)"


def moe_diagram(config, chosen: int = 0):
    """One MoE layer as a data-flow diagram with `config`'s sizes: router, softmax, top-k, the chosen
    SwiGLU experts, the weighted sum, and the load-balancing loss's two inputs (chapter 6).

    `chosen`: the expert drawn as picked for the token (top-1); with top-k the next ones are too.
    """
    import matplotlib.pyplot as plt

    from . import diagram as dg
    d, E, k = config.hidden_size, config.num_experts, config.num_experts_per_tok
    width, alpha = config.moe_intermediate_size, config.router_aux_loss_coef
    picked = {(chosen + j) % E for j in range(k)}
    kept = "its expert" if k == 1 else "their experts"
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese here; DejaVu has Σ · →
        fig, ax = dg.canvas(7, 6, title=f"One MoE layer (MiniMind default): {E} experts, "
                                        f"top-{k}, hidden {d}")
        dg.box(ax, 10, 78, 46, 4.2, f"x: one token's hidden vector [{d}]")
        dg.arrow(ax, (33, 77.6), (33, 73.4))
        dg.box(ax, 4, 68.5, 58, 4.5, f"router: gate = Linear {d} → {E}, no bias", "router")
        dg.arrow(ax, (33, 68.1), (33, 64.4), text=f"logits [{E}]")
        dg.box(ax, 4, 59.5, 58, 4.5, f"softmax over the experts: p [{E}], sums to 1", "router")
        dg.arrow(ax, (33, 59.1), (33, 55.4))
        dg.box(ax, 4, 50.5, 58, 4.5, f"top-k: keep the {k} largest p ({kept})", "router")
        slot = 60 / E
        for e in range(E):
            x0, on = 3 + e * slot, e in picked
            dg.box(ax, x0 + 0.8, 34, slot - 2.6, 8, f"expert {e}", "ffn",
                   colour=None if on else "#f4f4f4", ls="-" if on else "--",
                   edge="#555555" if on else "#aaaaaa")
            if on:
                dg.arrow(ax, (33, 50.1), (x0 + slot / 2 - 0.5, 42.6))
                dg.arrow(ax, (x0 + slot / 2 - 0.5, 33.6), (33, 25.1))
        dg.note(ax, 36, 46.5, "only the chosen run", size=9)
        dg.note(ax, 22, 30.6, f"each: SwiGLU {d} → {width} → {d} (chapter 5)")
        dg.line(ax, [(9.4, 80.1), (1, 80.1), (1, 38)], lw=1.0)
        dg.arrow(ax, (1, 38), (3.4, 38), lw=1.0)
        dg.note(ax, 1.6, 56, "x", size=10)
        dg.box(ax, 4, 17.5, 58, 7, "weighted sum: y = Σ_chosen w_i · expert_i(x)\n"
               + _weight_rule(config), "ffn")
        dg.arrow(ax, (33, 17.1), (33, 12.5))
        dg.shape(ax, 33, 10.5, f"y [{d}]: added to the residual stream", ha="center")
        dg.box(ax, 71, 37, 27.5, 37, "load-balancing loss\n(training only,\n each layer)\n\n"
               "over the N tokens:\nf_i: share routed\n   to expert i\nP_i: mean of p_i\n\n"
               f"L = α · {E} · Σ f_i P_i\nα = {alpha:g}", "loss", align="left")
        dg.arrow(ax, (62.6, 61.75), (70.4, 61.75))
        dg.note(ax, 66.5, 63.6, "P", ha="center", colour=dg.INK)
        dg.arrow(ax, (62.6, 52.75), (70.4, 52.75))
        dg.note(ax, 66.5, 54.6, "f", ha="center", colour=dg.INK)
    return fig


# --- where the router learns from ------------------------------------------------------------------------------

@contextmanager
def moe_settings(model, **fields):
    """Temporarily change config fields (norm_topk_prob, num_experts_per_tok, ...) of a loaded MoE model."""
    old = {name: getattr(model.config, name) for name in fields}
    try:
        for name, value in fields.items():
            setattr(model.config, name, value)  # the MoE layers hold the same config object
        yield model
    finally:
        for name, value in old.items():
            setattr(model.config, name, value)


def gate_gradients(model, input_ids) -> dict[str, list]:
    """Per MoE layer, the gradient that the LM loss and the aux loss each send to the router weights [E, hidden].

    One forward pass in training mode (the aux loss exists only there), then one autograd.grad per loss term,
    taken with respect to the routers' weights only; None where the term does not reach a router at all.
    The model's mode is restored and no .grad is left behind.
    """
    was_training = model.training
    gates = [layer.mlp.gate.weight for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    model.train()
    try:
        out = model(input_ids, labels=input_ids)
        return {term: list(torch.autograd.grad(loss, gates, retain_graph=True, allow_unused=True)
                           if loss.requires_grad else [None] * len(gates))
                for term, loss in (("lm", out.lm_loss), ("aux", out.aux_loss))}
    finally:
        model.train(was_training)


def balance_logit_gradient(router_logits, num_experts: int, top_k: int) -> torch.Tensor:
    """The load-balancing loss's gradient at the logits [N, E], in closed form (chapter 6):

    d(E · Σ_i f_i P_i) / dz_j(t) = (E / N) · p_j(t) · (f_j − Σ_i f_i p_i(t)), with f the loads summed
    over the top-k slots (a count: no gradient) and p the softmax. Compared with autograd in the chapter.
    """
    p = router_probabilities(router_logits)  # [N, E]
    choices = torch.topk(p, k=top_k, dim=-1).indices  # [N, k]
    f = torch.nn.functional.one_hot(choices, num_experts).float().mean(0).sum(0)  # [E]
    return num_experts / p.shape[0] * p * (f - (p * f).sum(-1, keepdim=True))  # [N, E]


def bf16_softmax_flips(router_logits) -> tuple[float, float]:
    """(share of tokens whose two largest probabilities tie exactly in a bfloat16
    softmax, share whose top-1 expert changes when the softmax runs in bfloat16, not
    float32) (chapter 6). The logits [N, E] are rounded to bfloat16 first, so both
    softmaxes see the same input.
    """
    logits = router_logits.detach().bfloat16()  # [N, E]: what a bf16 router emits
    low = torch.softmax(logits, dim=-1)  # [N, E] in bfloat16
    high = torch.softmax(logits.float(), dim=-1)  # [N, E] in float32
    top2 = torch.topk(low, k=2, dim=-1).values  # [N, 2]
    tied = (top2[:, 0] == top2[:, 1]).float().mean().item()
    changed = torch.topk(low, 1, dim=-1).indices != torch.topk(high, 1, dim=-1).indices
    return tied, changed.float().mean().item()


@contextmanager
def forced_routing(moe, choices):
    """Make `moe` (an MOEFeedForward) send token t to experts choices[t] [N, k],
    weight 1 each (chapter 6, the timing of an uneven split)."""
    weights = torch.ones(choices.shape, dtype=moe.gate.weight.dtype,
                         device=choices.device)  # [N, k]
    moe.route = lambda router_logits: (weights, choices)  # shadows the class's route
    try:
        yield moe
    finally:
        del moe.route


def _work_seconds(fn, device) -> float:
    """Seconds of work for fn(): this thread's CPU time on a CPU (a busy machine does
    not inflate it), wall time after synchronising on an accelerator."""
    import time
    if device.type == "cpu":
        started = time.thread_time()
        fn()
        return time.thread_time() - started
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda device: None)
    sync(device)
    started = time.perf_counter()
    fn()
    sync(device)  # kernels run asynchronously: wait for them
    return time.perf_counter() - started


@torch.no_grad()
def collapse_time_ratio(moe, x, repeats: int = 5) -> float:
    """Seconds of work for `moe` on x [1, N, d] with every token sent to expert 0,
    over those with the tokens dealt out evenly (chapter 6: what an uneven split costs
    on one device).

    On a CPU the work is timed on one thread as CPU time, so other processes do not
    skew it; the two plans are timed in turn, `repeats` times each, and the fastest of
    each is kept.
    """
    n, experts = x.shape[1], len(moe.experts)
    plans = {"even": (torch.arange(n, device=x.device) % experts).view(-1, 1),  # [N, 1]
             "collapsed": torch.zeros(n, 1, dtype=torch.long, device=x.device)}
    best = dict.fromkeys(plans, float("inf"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time of this thread is then all the work
    try:
        for round_ in range(repeats + 1):  # the first round warms up and is not kept
            for name, choices in plans.items():
                with forced_routing(moe, choices):
                    seconds = _work_seconds(lambda: moe(x), x.device)
                if round_ > 0:
                    best[name] = min(best[name], seconds)
    finally:
        torch.set_num_threads(threads)
    return best["collapsed"] / best["even"]


def gate_gradient_norms(model, input_ids) -> dict[str, list[float]]:
    """The norms of gate_gradients per loss term and layer (0.0 where no gradient arrives)."""
    return {term: [0.0 if g is None else g.norm().item() for g in grads]
            for term, grads in gate_gradients(model, input_ids).items()}


@torch.no_grad()
def router_inputs(model, input_ids):
    """One forward pass without gradients: (output with router_logits, each MoE layer's input [B * S, hidden]).

    Forward pre-hooks on every MoE layer read what it receives (the post-attention RMSNorm of the residual
    stream) and are removed afterwards.
    """
    captured, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "gate"):
            handles.append(layer.mlp.register_forward_pre_hook(
                lambda module, args, i=i: captured.__setitem__(i, args[0].detach().flatten(0, 1))))
    try:
        out = model(input_ids, output_router_logits=True)
    finally:
        for handle in handles:
            handle.remove()
    return out, [captured[i] for i in sorted(captured)]


def short_run(make_model, batches, lr: float = 3e-3) -> torch.Tensor:
    """Train a fresh `make_model()` one AdamW step per batch of `batches` [T, B, S] on out.loss (the LM
    loss plus, in training mode, the balancing term); returns each MoE layer's load per expert, read
    before every step [T, layers, E] (chapter 6, Exercise 6: what α = 0 does to the routers).
    """
    model = make_model().train()
    c = model.config
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)  # defaults otherwise
    shares = []
    for ids in batches:
        out = model(ids, labels=ids, output_router_logits=True)
        shares.append(torch.stack([router_load(router_choices(r.detach(), c.num_experts_per_tok)[1],
                                               c.num_experts) for r in out.router_logits]))  # [layers, E]
        out.loss.backward()
        optimiser.step()
        optimiser.zero_grad()
    return torch.stack(shares)


# --- who goes where -----------------------------------------------------------------------------------------

def token_expert_counts(token_ids: torch.Tensor, choices: torch.Tensor, num_experts: int,
                        vocab_size: int) -> torch.Tensor:
    """[vocab, E] counts: how often each token id was sent to each expert (every top-k slot counts once).

    token_ids [N] (or any shape with N elements), choices [N, k] from router_choices.
    """
    token_ids = token_ids.reshape(-1, 1).expand(-1, choices.shape[-1]).reshape(-1).cpu()
    pairs = token_ids * num_experts + choices.reshape(-1).cpu()
    return torch.bincount(pairs, minlength=vocab_size * num_experts).view(vocab_size, num_experts)


def entropy_bits(counts: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in bits of the distribution(s) in the last dimension of non-negative counts or shares."""
    p = counts.float() / counts.float().sum(-1, keepdim=True).clamp_min(1e-30)
    return -(p * torch.log2(p.clamp_min(1e-30))).sum(-1)


def conditional_entropy(counts: torch.Tensor) -> float:
    """H(expert | token) in bits from [vocab, E] counts: the uncertainty left once the token is known.

    Computed on the same tokens it describes, so a token seen once counts as perfectly predictable: a lower bound.
    """
    per_token = counts.sum(-1).float()
    return (per_token / per_token.sum() * entropy_bits(counts)).sum().item()


def identity_accuracy(fit_counts: torch.Tensor, test_tokens: torch.Tensor, test_experts: torch.Tensor) -> float:
    """Accuracy of guessing a token's expert from its id alone, on held-out tokens.

    The guess for a token id is its most frequent expert in `fit_counts` [vocab, E]; ids never seen there get the
    overall most frequent expert. test_tokens [N], test_experts [N] (top-1 choices).
    """
    fallback = fit_counts.sum(0).argmax()
    guess = torch.where(fit_counts.sum(-1) > 0, fit_counts.argmax(-1), fallback)
    return (guess[test_tokens.reshape(-1).cpu()] == test_experts.reshape(-1).cpu()).float().mean().item()


def dropped_tokens(choices: torch.Tensor, num_experts: int, capacity_factor: float) -> int:
    """(token, slot) pairs over capacity if each expert took at most ceil(capacity_factor * N * k / E) of them.

    What a capacity-limited MoE (Switch Transformer, GShard) would drop for this batch; MiniMind drops none.
    """
    capacity = math.ceil(capacity_factor * choices.numel() / num_experts)
    load = torch.bincount(choices.reshape(-1).cpu(), minlength=num_experts)
    return int((load - capacity).clamp_min(0).sum().item())


# --- the committed training comparison (bench/results/moe_router.csv) ---------------------------------------

SHARE_COLUMN = re.compile(r"^share_l(\d+)_e(\d+)$")


def share_columns(fieldnames) -> dict[tuple[int, int], str]:
    """{(layer, expert): column name} for the share_l{layer}_e{expert} columns of a results table."""
    found = {}
    for name in fieldnames:
        match = SHARE_COLUMN.match(name)
        if match:
            found[int(match.group(1)), int(match.group(2))] = name
    return dict(sorted(found.items()))


def shares_over_steps(rows: list[dict], variant: str):
    """(steps [T], shares [T, layers, E]) for one variant, from csv.DictReader rows; rows without shares skipped."""
    columns = share_columns(rows[0].keys()) if rows else {}
    layers = 1 + max(l for l, _ in columns)
    experts = 1 + max(e for _, e in columns)
    steps, shares = [], []
    for row in rows:
        if row["variant"] != variant or not all(row.get(c) not in (None, "") for c in columns.values()):
            continue
        steps.append(int(row["step"]))
        grid = torch.zeros(layers, experts)
        for (l, e), c in columns.items():
            grid[l, e] = float(row[c])
        shares.append(grid)
    return torch.tensor(steps), (torch.stack(shares) if shares else torch.zeros(0, layers, experts))


# --- drawing ------------------------------------------------------------------------------------------------

# The Chinese edition's figures (issue #23): every English title, axis title and legend
# string of a figure drawn for both editions, with its Chinese (terms.tsv, ch06's .po).
ZH = {"layer {layer}: all tokens": "第 {layer} 层：全部 token",
      "one poem, layer {layer}": "一首诗，第 {layer} 层",
      "{name}, layer {layer}": "{name}，第 {layer} 层",
      "even (1/{n})": "均匀（1/{n}）", "expert": "专家", "expert {e}": "专家 {e}",
      "share of tokens": "token 占比", "start": "开始", "end": "结束",
      "layer {layer}": "第 {layer} 层",
      "share of the token's occurrences": "该 token 各次出现中的占比",
      "poetry-moe, validation sample: where each token goes":
          "poetry-moe，验证样本：每个 token 去往哪里"}
SPECIAL_NAMES = {"<|im_start|>": "start", "<|im_end|>": "end"}  # the poem's wrappers
GLOSSES = {"，": "comma", "。": "full stop", "人": "person", "有": "have", "花": "flower",
           "客": "traveller", "春": "spring", "长": "long"}  # English edition only


say = functools.partial(edition_text, ZH)  # say(text, zh, **values)


def token_label(text: str, zh: bool = False) -> str:
    """A token as the figures write it: the wrappers by name, the other tokens as they
    are, in the English edition with their gloss ('人 (person)', '，(comma)')."""
    if text in SPECIAL_NAMES:
        return say(SPECIAL_NAMES[text], zh)
    if zh or text not in GLOSSES:
        return text
    return f"{text}{'' if text in '，。' else ' '}({GLOSSES[text]})"


def token_layout(texts: list[str], line_break_after=("。", "？", "！"),
                 special_width=2, max_columns: int | None = None):
    """Grid cells for tokens drawn as text: [(row, column, width)], a new row after each
    line-ending token.

    A token spans as many cells as it has characters; special tokens like <|im_end|>
    take `special_width`. With `max_columns`, a token that would reach past it starts a
    new row (a reader's line without a full stop, chapter 6's "try your own line").
    """
    cells, row, col = [], 0, 0
    for text in texts:
        width = special_width if text.startswith("<|") else max(1, len(text))
        if max_columns and col and col + width > max_columns:
            row, col = row + 1, 0
        cells.append((row, col, width))
        col += width
        if text in line_break_after or text.endswith(line_break_after):
            row, col = row + 1, 0
    return cells


def routing_figure(layer: int, shares, texts: list[str], experts: list[int],
                   title_right: str = "", ymax=0.5, probs=None, title_left: str = "",
                   max_columns: int | None = None, name: str = "", zh: bool = False):
    """One frame of the routing widget: each expert's share of tokens (left) and a poem
    coloured by expert (right); chapter 6's widget and its "try your own line" cell.

    shares [E] for this layer; texts and experts give the poem's tokens and the expert
    each one went to; probs, optional [S]: the router's probability for the chosen
    expert, written under each token; max_columns: boxes per row at most (and at least
    that wide a grid, so that a short line keeps the box size). The poem's title is
    `title_right`, else "{name}, layer {layer}"; zh: drawn for the Chinese edition.
    """
    import matplotlib.pyplot as plt
    cells = token_layout(texts, max_columns=max_columns)
    n_rows = 1 + max(r for r, _, _ in cells)
    fig, (bars, poem) = plt.subplots(1, 2, figsize=(7.5, max(3.0, 0.6 * n_rows + 1.4)),
                                     gridspec_kw={"width_ratios": [1, 3.1]})
    _share_bars(bars, shares, ymax,
                title_left or say("layer {layer}: all tokens", zh, layer=layer), zh)
    height = _draw_tokens(poem, cells, texts, experts, len(shares), probs, zh)
    columns = max([c + w for _, c, w in cells] + [max_columns or 0])
    title = title_right or say("{name}, layer {layer}" if name else
                               "one poem, layer {layer}", zh, name=name, layer=layer)
    poem.set(xlim=(0, columns), ylim=(0, height), title=title)
    poem.set_aspect("equal")
    poem.axis("off")
    fig.tight_layout()
    return fig


def _share_bars(ax, shares, ymax, title, zh=False):
    """Each expert's share of the tokens, in its colour, with the even share dashed."""
    num_experts = len(shares)
    ax.bar(range(num_experts), [float(s) for s in shares],
           color=EXPERT_COLOURS[:num_experts])
    even = ax.axhline(1 / num_experts, color="grey", lw=1, ls="--")
    ax.legend([even], [say("even (1/{n})", zh, n=num_experts)], fontsize=9,
              loc="upper left", frameon=False)
    ax.set(ylim=(0, ymax), xticks=range(num_experts), xlabel=say("expert", zh),
           ylabel=say("share of tokens", zh), title=title)


def _draw_tokens(ax, cells, texts, experts, num_experts, probs=None, zh=False) -> float:
    """One box per token, coloured by its expert, a legend of the experts under them,
    and under each token's text the chosen expert's probability if `probs` is given
    (the rows are then taller). Returns the height drawn, in box widths."""
    from matplotlib.patches import Patch, Rectangle
    n_rows = 1 + max(r for r, _, _ in cells)
    row = 1.0 if probs is None else 1.45  # in box widths: room for the probability
    for t, (text, expert, (r, c, w)) in enumerate(zip(texts, experts, cells)):
        colour, bottom = EXPERT_COLOURS[expert], (n_rows - r - 1) * row
        ax.add_patch(Rectangle((c + 0.05, bottom + 0.05), w - 0.1, row - 0.1,
                               color=colour))
        label = say(SPECIAL_NAMES[text], zh) if text in SPECIAL_NAMES else text
        ink = "black" if colour in LIGHT_COLOURS else "white"
        size = 10 if text.startswith("<|") else 15 if probs is None else 14
        y = bottom + (0.5 if probs is None else 0.92)
        ax.text(c + w / 2, y, label, ha="center", va="center", color=ink, fontsize=size)
        if probs is not None:
            ax.text(c + w / 2, bottom + 0.32, f"{float(probs[t]):.2f}", ha="center",
                    va="center", color=ink, fontsize=9)
    ax.legend(handles=[Patch(color=EXPERT_COLOURS[e], label=say("expert {e}", zh, e=e))
                       for e in range(num_experts)],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=num_experts,
              fontsize=9, frameon=False)
    return n_rows * row


def token_share_figure(counts: list, tokens: dict, zh: bool = False):
    """Chapter 6's heat maps: per layer, how a token's occurrences split over the
    experts (grey, 0 to 1). counts: per layer [vocab, E] (token_expert_counts);
    tokens: {text: id}, one row each, labelled with token_label and the count."""
    import matplotlib.pyplot as plt
    ids = list(tokens.values())
    fig, axes = plt.subplots(1, len(counts), figsize=(7.5, 3.6), sharey=True,
                             layout="constrained")
    for layer, ax in enumerate(axes):
        c = counts[layer][ids].float()  # [tokens, E]
        image = ax.imshow(c / c.sum(-1, keepdim=True), cmap="Greys", vmin=0, vmax=1,
                          aspect="auto")
        ax.set(xticks=range(c.shape[1]), xlabel=say("expert", zh),
               title=say("layer {layer}", zh, layer=layer))
    rows = [f"{token_label(text, zh)} ×{counts[0][i].sum().item()}"
            for text, i in tokens.items()]
    axes[0].set(yticks=range(len(rows)), yticklabels=rows)
    fig.colorbar(image, ax=axes, label=say("share of the token's occurrences", zh),
                 fraction=0.05)
    fig.suptitle(say("poetry-moe, validation sample: where each token goes", zh),
                 fontsize=11)
    return fig


@torch.no_grad()
def line_routing(model, input_ids) -> tuple[list[list[int]], torch.Tensor]:
    """The routing of one line [1, S] (chapter 6's widget and "try your own line"): per
    layer, the expert each token is sent to (top-1) [layers][S], and the router's
    probabilities [layers, S, E]."""
    out = model(input_ids, output_router_logits=True)
    # per layer: (probabilities [S, E], chosen experts [S, 1])
    picks = [router_choices(logits, 1) for logits in out.router_logits]
    return [c[:, 0].tolist() for _, c in picks], torch.stack([p for p, _ in picks])


def moving_average(values: torch.Tensor, window: int) -> torch.Tensor:
    """Trailing mean over `window` steps along dim 0 (shorter windows at the start): same shape as `values`."""
    values = values.float()
    csum = torch.cat([torch.zeros_like(values[:1]), values.cumsum(0)])
    ends = torch.arange(1, len(values) + 1)
    starts = (ends - window).clamp_min(0)
    shape = (-1,) + (1,) * (values.dim() - 1)
    return (csum[ends] - csum[starts]) / (ends - starts).view(shape)


def share_history_figure(variant: str, steps, shares, val_curves: dict, window=10, label=None, reference=None):
    """One frame of the training-comparison widget: validation loss of every variant (this one highlighted) and,
    per layer, each expert's share of the training batch over steps (a `window`-step moving average).

    shares [T, layers, E] from shares_over_steps; val_curves {variant: (steps, losses)}; reference, optional
    (low, high, label): a band of final losses to compare with (e.g. a dense model's spread over seeds).
    """
    import matplotlib.pyplot as plt
    layers, num_experts = shares.shape[1], shares.shape[2]
    fig = plt.figure(figsize=(7.5, 3.4))
    grid = fig.add_gridspec(2, 1 + (layers + 1) // 2, width_ratios=[1.6] + [1] * ((layers + 1) // 2))
    loss = fig.add_subplot(grid[:, 0])
    drawn = {}
    for name, (s, v) in val_curves.items():
        this = name == variant
        drawn["this run" if this else "other runs"], = loss.plot(
            s, v, color="black" if this else "#BBBBBB", lw=2 if this else 1,
            zorder=3 if this else 2, marker="." if this else None)
    if reference is not None:  # the band, labelled inside it
        low, high, text = reference
        loss.axhspan(low, high, color="#66CCEE", alpha=0.35, lw=0)
        loss.text(0.97, (low + high) / 2, text, transform=loss.get_yaxis_transform(),
                  ha="right", va="center", fontsize=9)
    order = [n for n in ("this run", "other runs") if n in drawn]  # same in every frame
    loss.legend([drawn[n] for n in order], order, fontsize=9, loc="upper right",
                frameon=False)
    values = [x for _, v in val_curves.values() for x in v] + ([] if reference is None else list(reference[:2]))
    if values:  # the same range in every frame, every point visible
        loss.set_ylim(min(values) - 0.05, max(values) + 0.05)
    loss.set(xlabel="step", ylabel="validation loss (nats/token)", title=label or variant)
    smooth = moving_average(shares, window)
    columns = (layers + 1) // 2
    for layer in range(layers):  # read like text: layers 0, 1 on top, then 2, 3
        row, column = divmod(layer, columns)
        ax = fig.add_subplot(grid[row, 1 + column])
        for e in range(num_experts):
            ax.plot(steps, smooth[:, layer, e], color=EXPERT_COLOURS[e], lw=1.5, label=f"expert {e}")
        ax.axhline(1 / num_experts, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0, 1)
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.tick_params(labelsize=9)
        if row == 1:
            ax.set_xlabel("step", fontsize=9)
        if column == 0:
            ax.set_ylabel("share of tokens", fontsize=9)
    handles, names = ax.get_legend_handles_labels()
    legend = fig.legend(handles, names, loc="lower center", ncol=num_experts, fontsize=9, frameon=False,
                        bbox_to_anchor=(0.62, -0.04))
    for handle in legend.legend_handles:
        handle.set_linewidth(4)  # thick enough to keep its colour in a reduced palette
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
