"""The training objective: position t predicts token t + 1 (chapter 9)."""
import torch
import torch.nn.functional as F


def shifted_cross_entropy(logits, labels, ignore_index=-100, reduction="mean"):
    """Compare logits[:, :-1] with labels[:, 1:], skipping `ignore_index`; reduction "none" gives [B, S - 1]."""
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels {list(labels.shape)} must match logits' [batch, seq_len] {list(logits.shape[:2])}")
    x, y = logits[..., :-1, :].contiguous(), labels[..., 1:].contiguous()
    loss = F.cross_entropy(x.view(-1, x.size(-1)), y.view(-1), ignore_index=ignore_index, reduction=reduction)
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
