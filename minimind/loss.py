"""The training objective: position t predicts token t + 1 (chapter 9)."""
import torch
import torch.nn.functional as F


def shifted_cross_entropy(logits, labels, ignore_index=-100, reduction="mean",
                          num_items_in_batch=None):
    """Compare logits[:, :-1] with labels[:, 1:], skipping `ignore_index`; reduction "none" gives [B, S - 1].

    In float32 whatever the logits' dtype, as transformers' ForCausalLMLoss computes it.
    Given `num_items_in_batch` (Trainer passes it), the loss is the sum over that count.
    """
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels {list(labels.shape)} must match logits' [batch, seq_len] {list(logits.shape[:2])}")
    if num_items_in_batch is not None and reduction != "mean":
        raise ValueError(f"num_items_in_batch goes with the mean, not {reduction!r}")
    x, y = logits[..., :-1, :].float(), labels[..., 1:].contiguous()  # fp32 [B, S-1, V]
    summed = num_items_in_batch is not None
    reduction = "sum" if summed else reduction
    loss = F.cross_entropy(x.reshape(-1, x.size(-1)), y.view(-1),
                           ignore_index=ignore_index, reduction=reduction)
    if summed:
        return loss / num_items_in_batch
    return loss.view(y.shape) if reduction == "none" else loss


@torch.no_grad()
def token_losses(model, input_ids) -> torch.Tensor:
    """Next-token loss at every position, [B, S - 1]: entry t is the loss of predicting token t + 1."""
    return shifted_cross_entropy(model(input_ids).logits.float(), input_ids, reduction="none")


@torch.no_grad()
def mean_loss(model, rows: torch.Tensor, batch_size=8) -> float:
    """Mean next-token loss (nats/token) over token rows [N, seq_len], computed in batches."""
    losses = [model(b, labels=b).loss.item() for b in rows.to(model.device).split(batch_size)]
    return sum(losses) / len(losses)
