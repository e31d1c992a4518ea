"""What chapter 7 measures: what each sub-layer writes into the residual stream, how gradients cross the depth of
a Pre-Norm, a Post-Norm and a residual-free stack (the Jacobian argument, numerically), the logit lens and the
direct logit attribution of each write.

Pure functions: they take a model or a recorded stream (`probes.record_residual_stream`) and return tensors; the
figure functions (`block_diagram`, `guess_grid_figure`) only draw.
"""
import torch
import torch.nn.functional as F

from ..training.train import batches, param_groups
from . import diagram
from .probes import rms

NORMS = ("input_layernorm", "post_attention_layernorm")  # the two RMSNorms of every block, in forward order


# --- the mechanism, drawn (chapter 7, the opening) ---------------------------------------------------------

def block_diagram(config, batch="B", seq="S"):
    """One block of `config` in MiniMind's Pre-Norm order (left) and in the 2017 Post-Norm order (right).

    Chapter 7's mechanism picture: the residual stream runs down the left of each panel; in Pre-Norm the
    norms sit on the branches (the copies the sub-layers read), in Post-Norm on the stream itself.
    """
    import matplotlib.pyplot as plt
    with plt.rc_context({"font.family": ["DejaVu Sans"]}):  # no Chinese here; DejaVu has ₁ ₂ →
        fig, ax = diagram.canvas(7, 5.0)
        _draw_pre_norm(ax, config, batch, seq)
        _draw_post_norm(ax)
        ax.set_title(f"One MiniMind block (hidden {config.hidden_size}, "
                     f"× {config.num_hidden_layers}): Pre-Norm and Post-Norm", fontsize=11)
        fig.tight_layout()
    return fig


def _sublayer_texts(c):
    attn = f"self_attn\n{c.num_attention_heads} query / {c.num_key_value_heads} KV heads of {c.head_dim}"
    if c.use_moe:
        mlp = f"mlp (MoE)\ntop-{c.num_experts_per_tok} of {c.num_experts} experts"
    else:
        mlp = f"mlp (SwiGLU)\n{c.hidden_size} → {c.intermediate_size} → {c.hidden_size}"
    return attn, mlp


def _branch(ax, x_stream, x_mid, y_from, y_box):
    """A wire from the stream at height y_from across to x_mid, then an arrow down to a box top."""
    diagram.line(ax, [(x_stream, y_from), (x_mid, y_from)])
    diagram.arrow(ax, (x_mid, y_from), (x_mid, y_box + 0.6))


def _write_back(ax, x_stream, x_mid, y_from, y_add):
    """From a sub-layer's bottom down to y_add, then an arrow into the + on the stream."""
    diagram.line(ax, [(x_mid, y_from - 0.5), (x_mid, y_add)])
    diagram.arrow(ax, (x_mid, y_add), (x_stream + 2.2, y_add))
    diagram.node(ax, x_stream, y_add)


def _draw_pre_norm(ax, c, batch, seq):
    xs, x0, w, mid = 6, 12.5, 32, 28.5  # stream x, boxes from x0, width w, centre mid
    attn, mlp = _sublayer_texts(c)
    diagram.note(ax, 1, 68.5, "Pre-Norm (MiniMind):  x + F(N(x))", size=10, colour=diagram.INK)
    diagram.line(ax, [(xs, 66), (xs, 4.5)], lw=2.4, zorder=0)
    diagram.arrow(ax, (xs, 5), (xs, 2.2), lw=2.4)
    diagram.shape(ax, xs + 1.5, 64.5, f"x  [{batch}, {seq}, {c.hidden_size}]  the residual stream")
    _branch(ax, xs, mid, 61, 57.5)
    diagram.box(ax, x0, 53.5, w, 4, "input_layernorm (N₁)", "norm")
    diagram.arrow(ax, (mid, 53), (mid, 50.6))
    diagram.box(ax, x0, 42, w, 8, attn, "attn")
    _write_back(ax, xs, mid, 42, 38)
    diagram.note(ax, xs + 3, 35.5, "h = x + Attn(N₁(x))")
    _branch(ax, xs, mid, 31.5, 28)
    diagram.box(ax, x0, 24, w, 4, "post_attention_layernorm (N₂)", "norm", size=9)
    diagram.arrow(ax, (mid, 23.5), (mid, 21.1))
    diagram.box(ax, x0, 12.5, w, 8, mlp, "ffn")
    _write_back(ax, xs, mid, 12.5, 8.5)
    diagram.note(ax, xs + 3, 6, "out = h + MLP(N₂(h))")
    diagram.note(ax, x0 + w + 1.5, 47.5, "sub-layers\nread a\nnormalised\ncopy")
    diagram.note(ax, x0 + w + 1.5, 31.5, "their writes\nare added to\nthe stream\nas it is")
    diagram.note(ax, xs + 3, 1.5, "next block; after the last: norm (final), lm_head")


def _draw_post_norm(ax):
    xs, x0, w = 67, 77, 21
    mid = x0 + w / 2
    ax.plot([60.5, 60.5], [3, 70], color="#bbbbbb", lw=0.8)
    diagram.note(ax, 62, 68.5, "Post-Norm (2017):  N(x + F(x))", size=10, colour=diagram.INK)
    diagram.line(ax, [(xs, 66), (xs, 4.5)], lw=2.4, zorder=0)  # under the norms drawn on it
    diagram.arrow(ax, (xs, 5), (xs, 2.2), lw=2.4)
    diagram.shape(ax, xs + 1.5, 64.5, "x")
    _branch(ax, xs, mid, 61, 57.5)
    diagram.box(ax, x0, 49.5, w, 8, "self_attn\nreads x itself", "attn")
    _write_back(ax, xs, mid, 49.5, 45)
    diagram.box(ax, xs - 5, 36, 10, 4.5, "N₁", "norm")
    diagram.note(ax, xs + 6, 38.2, "on the stream")
    _branch(ax, xs, mid, 31.5, 28)
    diagram.box(ax, x0, 20, w, 8, "mlp", "ffn")
    _write_back(ax, xs, mid, 20, 15.5)
    diagram.box(ax, xs - 5, 7, 10, 4.5, "N₂", "norm")
    diagram.note(ax, 62, 1.5, "every path down crosses 2 norms")


# --- the residual stream as a shared workspace ---------------------------------------------------------------

def sublayer_writes(stream) -> list[dict]:
    """Per block, from a recorded stream: what it reads and what its two sub-layers add to it.

    Keys (each [B, S], one number per token): `stream` (RMS of the block's input), `attention` / `mlp` (RMS of what
    attention / the feed-forward adds), `attention_cos` / `mlp_cos` (cosine between that write and the stream it is
    added to: 1 = pushes the same way, 0 = a new direction, -1 = erases).
    """
    rows = []
    for i in sorted(stream):
        x, h, out = stream[i]["input"].float(), stream[i]["after_attention"].float(), stream[i]["output"].float()
        attention, mlp = h - x, out - h
        rows.append({"stream": rms(x), "attention": rms(attention), "mlp": rms(mlp),
                     "attention_cos": F.cosine_similarity(attention, x, dim=-1),
                     "mlp_cos": F.cosine_similarity(mlp, h, dim=-1)})
    return rows


def shuffled_write_cosines(stream, seed: int = 0) -> list[dict]:
    """Per block, the chance level for the mean cosines of `sublayer_writes` (ch. 7):
    each token's write against *another* token's stream (a random cyclic shuffle, no
    token kept in place).

    Keys `attention_cos`, `mlp_cos`: [B * S] cosines. Their mean is what a write
    pointing nowhere in particular scores against streams sharing a common direction."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i in sorted(stream):
        x, h, out = (stream[i][k].float().flatten(0, -2)  # [B * S, hidden]
                     for k in ("input", "after_attention", "output"))
        order = torch.randperm(len(x), generator=generator).to(x.device)  # [B * S]
        other = order.roll(1)  # token order[k] meets the stream of token order[k - 1]
        cos = F.cosine_similarity
        rows.append({"attention_cos": cos((h - x)[order], x[other], dim=-1),
                     "mlp_cos": cos((out - h)[order], h[other], dim=-1)})
    return rows


# --- chapter 7's Exercise 1: the usual wrong Pre-Norm forwards ------------------------

BLOCK_MISTAKES = {  # key: (what the answer did, the hint that fits it)
    "post_norm": (
        "your output is the Post-Norm order: the norms wrap the sums",
        "In Pre-Norm the norms sit on the branches: each sub-layer reads a "
        "normalised copy, and the stream itself is never normalised inside the block."),
    "added_to_copy": (
        "you add the writes to the normalised copy, not to the stream",
        "Keep the stream as it arrives: the norm's output goes only into the "
        "sub-layer, and what the sub-layer returns is added to the un-normalised x."),
    "no_attention_add": (
        "attention's output replaces the stream instead of being added to it",
        "Count the additions in the left panel of the diagram: there are two."),
    "no_mlp_add": (
        "the MLP's output replaces the stream instead of being added to it",
        "Count the additions in the left panel of the diagram: there are two."),
    "mlp_reads_x": (
        "the MLP reads the stream from before attention's write",
        "The MLP reads the stream *after* the first addition, h, not x."),
    "mlp_unnormalised": (
        "the MLP reads the stream without its norm",
        "The MLP, like attention, reads a copy passed through its own norm "
        "(`post_attention_layernorm`)."),
    "mlp_uses_input_norm": (
        "the MLP reads h through `input_layernorm`, attention's norm",
        "Each sub-layer has its own norm: attention's is `input_layernorm`, the MLP's "
        "`post_attention_layernorm`."),
}


def _mlp(block, h):
    out = block.mlp(h)
    return out[0] if isinstance(out, tuple) else out  # MoE: (output, router_logits)


def block_forward_mistakes(block, x, position_embeddings) -> dict:
    """key of `BLOCK_MISTAKES` -> [B, S, hidden]: what each usual wrong forward of a
    Pre-Norm block returns (chapter 7, Exercise 1), from the block's four modules."""
    n1, n2 = block.input_layernorm, block.post_attention_layernorm
    pe = position_embeddings
    attn = block.self_attn(n1(x), pe)[0]  # [B, S, hidden]: the right first write
    h = x + attn
    post_h = n1(x + block.self_attn(x, pe)[0])
    copy_h = n1(x) + attn
    mistakes = {"post_norm": n2(post_h + _mlp(block, post_h)),
                "added_to_copy": n2(copy_h) + _mlp(block, n2(copy_h)),
                "no_attention_add": attn + _mlp(block, n2(attn)),
                "no_mlp_add": _mlp(block, n2(h)),
                "mlp_reads_x": h + _mlp(block, n2(x)),
                "mlp_unnormalised": h + _mlp(block, h)}
    if not torch.equal(n1.weight, n2.weight):  # a fresh block's two norms are the same
        mistakes["mlp_uses_input_norm"] = h + _mlp(block, n1(h))
    return mistakes


def diagnose_block_forward(got, block, x, position_embeddings, atol: float = 1e-4):
    """(what the answer did, its hint) from `BLOCK_MISTAKES` when `got` [B, S, hidden]
    equals one of the usual wrong forwards; None otherwise."""
    wrong = block_forward_mistakes(block, x, position_embeddings)
    for key, out in wrong.items():
        if out.shape == got.shape and torch.allclose(got.float(), out.float(),
                                                     atol=atol, rtol=1e-3):
            return BLOCK_MISTAKES[key]
    return None


# --- gradients through depth -----------------------------------------------------------------------------------

def block_gradient_norms(model) -> torch.Tensor:
    """[layers]: the L2 norm of each block's parameter gradients (0 where a block has none yet)."""
    norms = []
    for layer in model.model.layers:
        squares = [p.grad.float().pow(2).sum() for p in layer.parameters() if p.grad is not None]
        norms.append(torch.stack(squares).sum().sqrt().item() if squares else 0.0)
    return torch.tensor(norms)


def gradient_profile(model, input_ids) -> dict:
    """Backpropagate the next-token loss on `input_ids` once and measure, per block:

    `params` [L]: L2 norm of the block's parameter gradients; `stream` [L]: RMS of dLoss/d(block input), the
    gradient the residual stream carries down to that block; `sigma` [L, 2]: mean RMS of what the block's two
    RMSNorms divide by (their inputs); `inv_sigma` [L, 2, B * S]: 1 / that RMS, token by
    token; `norm_gain` [L, 2]: each norm's own backward gain, mean RMS of the gradient
    it passes down / of the one it receives; `gain` [L, 2]: RMS of those norms' weights; `final_sigma`: mean RMS of the
    final norm's input (nan when the model has none, as in Post-Norm); `top_stream`: RMS of dLoss/d(last block's
    output); `loss`: the loss. The model's gradients are cleared afterwards.
    """
    inputs, sigma, handles = {}, {"final": float("nan")}, []
    inv_sigma, norm_gain = {}, {}  # per norm: 1/RMS per token [B * S]; backward gain
    for layer in model.model.layers:
        def keep_input(block, args, i=layer.layer_id):
            args[0].retain_grad()
            inputs[i] = args[0]
        handles.append(layer.register_forward_pre_hook(keep_input))
        for j, name in enumerate(NORMS):
            def keep_sigma(module, args, out, key=(layer.layer_id, j)):
                sigma[key] = rms(args[0]).mean().item()
                inv_sigma[key] = 1 / rms(args[0]).detach().flatten()

            def keep_gain(module, grad_in, grad_out, key=(layer.layer_id, j)):
                passed, received = rms(grad_in[0]).mean(), rms(grad_out[0]).mean()
                norm_gain[key] = (passed / received).item()
            handles.append(getattr(layer, name).register_forward_hook(keep_sigma))
            handles.append(getattr(layer, name).register_full_backward_hook(keep_gain))

    def keep_top(block, args, out):
        out[0].retain_grad()
        inputs["top"] = out[0]
    handles.append(model.model.layers[-1].register_forward_hook(keep_top))
    if hasattr(model.model.norm, "weight"):
        handles.append(model.model.norm.register_forward_hook(
            lambda module, args, out: sigma.__setitem__("final", rms(args[0]).mean().item())))
    try:
        model.zero_grad(set_to_none=True)
        loss = model(input_ids, labels=input_ids).loss
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    layers = model.model.layers
    profile = {"loss": loss.item(), "params": block_gradient_norms(model),
               "stream": torch.tensor([rms(inputs[i].grad).mean().item() for i in range(len(layers))]),
               "sigma": torch.tensor([[sigma[(i, j)] for j in range(2)] for i in range(len(layers))]),
               "gain": torch.tensor([[rms(getattr(layer, name).weight).item() for name in NORMS] for layer in layers]),
               "inv_sigma": torch.stack([torch.stack([inv_sigma[i, j] for j in (0, 1)])
                                         for i in range(len(layers))]).cpu(),
               "norm_gain": torch.tensor([[norm_gain[(i, j)] for j in range(2)]
                                          for i in range(len(layers))]),
               "final_sigma": sigma["final"], "top_stream": rms(inputs["top"].grad).mean().item()}
    model.zero_grad(set_to_none=True)
    return profile


def measured_block_gain(profile) -> torch.Tensor:
    """[L - 1]: how much block l multiplies the backward gradient, RMS(dL/dx_l) / RMS(dL/dx_{l+1})."""
    return profile["stream"][:-1] / profile["stream"][1:]


def predicted_post_norm_gain(profile) -> torch.Tensor:
    """[L]: the Jacobian argument for a Post-Norm block: each of its two norms scales the backward gradient by about
    RMS(gain) / sigma (dividing by the RMS of its input), and the residual sums pass it on unchanged."""
    return (profile["gain"] / profile["sigma"]).prod(-1)


def predicted_post_norm_gain_per_token(profile) -> torch.Tensor:
    """[L]: the same prediction with 1/sigma taken token by token, then averaged
    (chapter 7). The mean of 1/sigma is at least 1 / (mean sigma): Jensen's inequality."""
    per_token = profile["inv_sigma"][:, 0] * profile["inv_sigma"][:, 1]  # [L, B * S]
    return profile["gain"].prod(-1) * per_token.mean(-1)


def train_recording(model, rows, steps: int, lr: float, batch_size: int = 4, seed: int = 0,
                    grad_clip: float = 1.0) -> dict:
    """A short fp32 training run at a constant learning rate (no warmup), the recipe of `minimind.training.train`
    otherwise: AdamW betas (0.9, 0.95) in its `param_groups` (weight decay 0 here), gradients clipped at 1.0,
    seeded batches from its `batches`. Returns `loss` [steps] and `params` [steps, L], each block's gradient norm at
    every step (before clipping)."""
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(param_groups(model, 0.0), lr=lr, betas=(0.9, 0.95))
    stream = batches(rows, batch_size, seed)
    losses, history = [], []
    was_training = model.training
    model.train()
    for _ in range(steps):
        batch = next(stream).to(device)
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        history.append(block_gradient_norms(model))
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        losses.append(loss.item())
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return {"loss": torch.tensor(losses), "params": torch.stack(history)}


# --- the logit lens ----------------------------------------------------------------------------------------------

def lens_labels(num_layers: int) -> list[str]:
    """Names of the points the lens reads: the embedding, then the output of each block."""
    return ["embedding"] + [f"after block {i}" for i in range(num_layers)]


@torch.no_grad()
def read_stream(model, hidden) -> torch.Tensor:
    """[B, S, vocab] float32 logits: a residual-stream state [B, S, hidden] read through the model's final norm and
    its (tied) LM head, as if the blocks after it were not there."""
    return model.lm_head(model.model.norm(hidden)).float()


def logit_lens(model, stream) -> torch.Tensor:
    """[L + 1, B, S, vocab]: the residual stream at the embedding and after each block, each read with
    `read_stream`. The last entry equals the model's logits."""
    points = [stream[0]["input"]] + [stream[i]["output"] for i in sorted(stream)]
    return torch.stack([read_stream(model, h) for h in points])



def token_text(tokenizer, token_id: int) -> str:
    """A token as chapter 7's lens grid writes it: BOS / EOS for the wrappers, ␣ for a
    whitespace token, "?" for a piece of a character or a control code."""
    wrappers = {tokenizer.bos_token_id: "BOS", tokenizer.eos_token_id: "EOS"}
    if token_id in wrappers:
        return wrappers[token_id]
    piece = tokenizer.decode([token_id])
    if not piece.strip():
        return "␣"
    return piece if piece.isprintable() and "\ufffd" not in piece else "?"


def lens_top(lens, k: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """The k likeliest next tokens at every lens point and position after the begin
    token: (probabilities, ids), each [points, S - 1, k], from `logit_lens(...)[:, 0]`
    [points, S, vocab] (chapter 7's figure and slider)."""
    return lens[:, 1:].softmax(-1).topk(k, dim=-1)


def lens_figure(name: str, probs, guesses, points, labels, actual=None, highlight=(),
                point: int | None = None):
    """Chapter 7's logit-lens picture of one line, titled with its `name`: the top
    guess at every point (rows: the points) or, with `point`, the three likeliest there.

    `probs` [points, S, 3] and `guesses` (points x S x 3 strings) from `lens_top`;
    `labels`: the input tokens; `actual`, `highlight` as in `guess_grid_figure`."""
    if point is None:
        return guess_grid_figure(
            probs[..., 0], [[g[0] for g in row] for row in guesses], points, labels,
            f"{name}: the logit lens's top guess after each block",
            actual=actual, highlight=highlight)
    return guess_grid_figure(
        probs[point].T, [list(row) for row in zip(*guesses[point])],
        ["guess 1", "guess 2", "guess 3"], labels,
        f"{name}, read {points[point]}: the three likeliest next tokens",
        actual=actual, highlight=highlight)

@torch.no_grad()
def line_end_readings(model, stream, input_ids, characters_read, marks, line_length: int = 5) -> dict:
    """How the stream at each lens point predicts the end of a line, over every position of `input_ids` [B, S].

    `stream`: recorded with `probes.record_residual_stream` on `input_ids`; `characters_read` [B, S]: characters of
    the current line read once each token is added (`viz.characters_since_break`); `marks`: ids of the line-ending
    punctuation. Only the positions needed are read through the head. Returns [L + 1] tensors: `right`, at positions
    with `line_length` characters read whose next token is a mark, the share where the top guess is exactly that
    mark; `p_mark`, the mean probability given to any mark there; `early`, at positions one character short, the
    share where a mark is (wrongly) the top guess; and the numbers of such positions.
    """
    marks = torch.as_tensor(marks, device=input_ids.device)
    counts = torch.as_tensor(characters_read, device=input_ids.device)[:, :-1]
    next_ids = input_ids[:, 1:]  # the last position has no next token in the batch
    at_end = (counts == line_length) & torch.isin(next_ids, marks)
    before = counts == line_length - 1
    points = [stream[0]["input"]] + [stream[i]["output"] for i in sorted(stream)]
    right, p_mark, early = [], [], []
    for hidden in points:
        end_logits = read_stream(model, hidden[:, :-1][at_end][None])[0]  # [positions, vocab]
        early_logits = read_stream(model, hidden[:, :-1][before][None])[0]
        right.append((end_logits.argmax(-1) == next_ids[at_end]).float().mean())
        p_mark.append(end_logits.softmax(-1)[:, marks].sum(-1).mean())
        early.append(torch.isin(early_logits.argmax(-1), marks).float().mean())
    return {"right": torch.stack(right).cpu(), "p_mark": torch.stack(p_mark).cpu(), "early": torch.stack(early).cpu(),
            "positions": int(at_end.sum()), "positions_early": int(before.sum())}


# --- direct logit attribution ----------------------------------------------------------------------------------

def random_cosines(dim: int, pairs: int = 10_000, seed: int = 0) -> torch.Tensor:
    """[pairs]: cosines between independent random Gaussian vectors of `dim` entries, the baseline for
    chapter 7's write/stream cosines (mean 0, spread about 1/sqrt(dim))."""
    generator = torch.Generator().manual_seed(seed)
    a, b = torch.randn(2, pairs, dim, generator=generator)  # [pairs, dim] each
    return F.cosine_similarity(a, b, dim=-1)


def write_logit(model, write, final_stream, target_ids) -> torch.Tensor:
    """[B, S]: one write's direct share in the logit of `target_ids` [B, S], against the average token.

    The final norm is linear once its divisor is fixed: the divisor comes from the whole `final_stream`
    [B, S, hidden] (the last block's output); each write [B, S, hidden] is scaled by it and the gain,
    then dotted with the head's row of the target minus the mean row (the softmax ignores what every
    logit gets alike). The shares of all writes add up to the logit minus the mean logit.
    """
    norm = model.model.norm
    scale = torch.rsqrt(final_stream.float().pow(2).mean(-1, keepdim=True) + norm.eps)  # [B, S, 1]
    head = model.lm_head.weight.float()  # [vocab, hidden]
    rows = head[target_ids] - head.mean(0)  # [B, S, hidden]: target row minus the mean row
    return (write.float() * scale * norm.weight.float() * rows).sum(-1)



WRITE_LOGIT_MISTAKES = {  # chapter 7, Exercise 5: key: (what the answer did, its hint)
    "own_divisor": (
        "your divisor comes from the write itself",
        "The final norm divides by the RMS of the whole stream it reads, the last "
        "block's output; a write is only one part of that stream."),
    "no_mean_row": (
        "you use the target's row of the head alone",
        "The softmax ignores what every logit gets alike: measure against the average "
        "token, the target's row minus the mean of all rows."),
    "no_gain": (
        "the final norm's gain is missing",
        "After dividing, RMSNorm multiplies by its learned gain (`norm.weight`)."),
}


def write_logit_mistakes(model, write, final_stream, target_ids) -> dict:
    """key of `WRITE_LOGIT_MISTAKES` -> [B, S]: what the usual wrong `write_logit`s
    return (chapter 7, Exercise 5)."""
    norm, head = model.model.norm, model.lm_head.weight.float()  # [vocab, hidden]
    write, gain = write.float(), norm.weight.float()
    scale = torch.rsqrt(final_stream.float().pow(2).mean(-1, keepdim=True) + norm.eps)
    own = torch.rsqrt(write.pow(2).mean(-1, keepdim=True) + norm.eps)  # [B, S, 1]
    rows = head[target_ids] - head.mean(0)  # [B, S, hidden]
    return {"own_divisor": (write * own * gain * rows).sum(-1),
            "no_mean_row": (write * scale * gain * head[target_ids]).sum(-1),
            "no_gain": (write * scale * rows).sum(-1)}


def diagnose_write_logit(got, model, write, final_stream, target_ids):
    """(what the answer did, its hint) when `got` [B, S] equals a usual wrong share."""
    wrong = write_logit_mistakes(model, write, final_stream, target_ids)
    for key, out in wrong.items():
        if out.shape == got.shape and torch.allclose(got.float(), out, atol=1e-4,
                                                     rtol=1e-3):
            return WRITE_LOGIT_MISTAKES[key]
    return None

def stream_writes(stream) -> dict:
    """name -> [B, S, hidden]: the embedding, then each block's attention and MLP write, in order."""
    writes = {"embedding": stream[0]["input"]}
    for i in sorted(stream):
        writes[f"attention {i}"] = stream[i]["after_attention"] - stream[i]["input"]
        writes[f"MLP {i}"] = stream[i]["output"] - stream[i]["after_attention"]
    return writes


@torch.no_grad()
def direct_logit_attribution(model, stream, input_ids) -> dict:
    """name -> [B, S - 1]: what each write (`stream_writes`) adds directly to the logit of the token that
    really comes next, against the average token, through the final norm and the head (`write_logit`,
    chapter 7's go-further exercise)."""
    final = stream[max(stream)]["output"][:, :-1]  # [B, S - 1, hidden]: no next token after the last
    targets = input_ids[:, 1:]
    return {name: write_logit(model, w[:, :-1], final, targets) for name, w in stream_writes(stream).items()}


def _fitted(piece: str) -> tuple[str, float]:
    """A guess as drawn in its grid cell, and its font size: a token longer than three
    characters (the chat marker `<think>`) as its first letter in angle quotes, ‹t›,
    so that it stays inside its cell; the figure spells it out in a note (chapter 7's
    lens grid). "EOS" fits as it is."""
    if len(piece) <= 3:
        return piece, 10 if len(piece) == 1 else 9
    return f"‹{piece.strip('<>')[:1]}›", 9


def guess_grid_figure(probs, texts, row_labels, column_labels, title: str, actual=None, highlight=()):
    """A grid of guessed tokens (as text), each cell coloured by its probability on a fixed 0..1 scale.

    `probs` [R, C] and `texts` (R lists of C strings); `column_labels`: the input token at each position;
    `actual`: optional C strings, the token that really came next, written in grey above the grid; `highlight`:
    column indices framed in red (e.g. where a line ends).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    probs = torch.as_tensor(probs).float().cpu()
    rows, cols = probs.shape
    top = 0.9 if actual is not None else 0.5  # inches above the grid: title, and the row of actual next tokens
    height = 0.42 * rows + 0.75 + top
    fig = plt.figure(figsize=(7.5, height))
    ax = fig.add_axes((0.95 / 7.5, 0.6 / height, 5.8 / 7.5, 0.42 * rows / height))
    bar_ax = fig.add_axes((6.88 / 7.5, 0.6 / height, 0.12 / 7.5, 0.42 * rows / height))
    image = ax.imshow(probs.numpy(), aspect="auto", cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
    for r in range(rows):
        for c in range(cols):
            p = probs[r, c].item()
            piece, size = _fitted(texts[r][c])
            ax.text(c, r, piece, ha="center", va="center", fontsize=size,
                    color="white" if p > 0.6 else "black")
    ax.set_yticks(range(rows), row_labels, fontsize=9.5)
    ax.set_xticks(range(cols), column_labels, fontsize=9.5)
    for label in ax.get_xticklabels():
        label.set_fontsize(9 if len(label.get_text()) > 1 else 9.5)  # two-character tokens fill their column
    ax.tick_params(length=0)
    ax.set_xlabel("input token (each guess is for the token after it)", fontsize=9.5, labelpad=2)
    if actual is not None:
        for c, piece in enumerate(actual):
            ax.text(c, -0.75, piece, ha="center", va="bottom", fontsize=9 if len(piece) > 1 else 9.5, color="#555555")
        ax.text(-0.6, -0.75, "actual next", ha="right", va="bottom", fontsize=9.5, color="#555555")
    shortened = sorted({(_fitted(t)[0], t) for row in texts for t in row
                        if _fitted(t)[0] != t})
    if shortened:  # say what each short label stands for, under the grid on the right
        note = "; ".join(f"{short} = {t}" for short, t in shortened)
        fig.text(0.99, 0.02, note, ha="right", va="bottom", fontsize=9, color="#555555")
    for c in highlight:
        ax.add_patch(Rectangle((c - 0.5, -0.5), 1, rows, fill=False, edgecolor="tab:red", lw=1.8, clip_on=False))
    ax.set_title(title, fontsize=10.5, pad=24 if actual is not None else 6)
    bar = fig.colorbar(image, cax=bar_ax)
    bar.set_label("probability", fontsize=9), bar.ax.tick_params(labelsize=9)
    return fig
