"""What chapter 7 measures: what each sub-layer writes into the residual stream, how gradients cross the depth of
a Pre-Norm, a Post-Norm and a residual-free stack (the Jacobian argument, numerically), and the logit lens.

Pure functions: they take a model or a recorded stream (`probes.record_residual_stream`) and return tensors; the
figure functions only draw them.
"""
import torch
import torch.nn.functional as F

from ..training.train import batches, param_groups
from .probes import rms

NORMS = ("input_layernorm", "post_attention_layernorm")  # the two RMSNorms of every block, in forward order


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
    RMSNorms divide by (their inputs); `gain` [L, 2]: RMS of those norms' weights; `final_sigma`: mean RMS of the
    final norm's input (nan when the model has none, as in Post-Norm); `top_stream`: RMS of dLoss/d(last block's
    output); `loss`: the loss. The model's gradients are cleared afterwards.
    """
    inputs, sigma, handles = {}, {"final": float("nan")}, []
    for layer in model.model.layers:
        def keep_input(block, args, i=layer.layer_id):
            args[0].retain_grad()
            inputs[i] = args[0]
        handles.append(layer.register_forward_pre_hook(keep_input))
        for j, name in enumerate(NORMS):
            handles.append(getattr(layer, name).register_forward_hook(
                lambda module, args, out, key=(layer.layer_id, j): sigma.__setitem__(key, rms(args[0]).mean().item())))

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
    return ["embedding"] + [f"after layer {i}" for i in range(num_layers)]


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
            ax.text(c, r, texts[r][c], ha="center", va="center", fontsize=9 if len(texts[r][c]) > 1 else 10,
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
    for c in highlight:
        ax.add_patch(Rectangle((c - 0.5, -0.5), 1, rows, fill=False, edgecolor="tab:red", lw=1.8, clip_on=False))
    ax.set_title(title, fontsize=10.5, pad=24 if actual is not None else 6)
    bar = fig.colorbar(image, cax=bar_ax)
    bar.set_label("probability", fontsize=9), bar.ax.tick_params(labelsize=9)
    return fig
