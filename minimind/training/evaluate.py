"""Measure a trained checkpoint: held-out loss, characters per token, line lengths of samples, expert loads.

    python -m minimind.training.evaluate poetry-dense [--samples 50] [--json out.json]
"""
import argparse
import json
from collections import Counter

import torch

from ..cli import Parser, model_from, new_file, tokenizer_from, user_errors
from ..loss import mean_loss
from ..moe import router_probabilities
from .data import SAMPLE, encode_poems, enough_rows, load_poems, pack, poem_lines
from .tokenizer import chars_per_token

PROMPTS = ["床前明月光，", "春风", "明月"]


def router_choices(router_logits: torch.Tensor, top_k: int):
    """One MoE layer's (router probabilities [N, E], chosen experts [N, k]) (ch. 6)."""
    probs = router_probabilities(router_logits.detach())  # as the router computes them
    return probs, probs.topk(top_k, dim=-1).indices


def router_load(choices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Share of routed (token, slot) pairs that each expert receives: [E], sums to 1."""
    counts = torch.bincount(choices.flatten(), minlength=num_experts)
    return counts.float() / choices.numel()


def validation_loss(model, tokenizer, poems, seq_len=256, batch_size=8,
                    source="poems") -> float:
    """mean_loss on `poems` packed into rows of seq_len, as in training."""
    rows = pack(encode_poems(tokenizer, poems, seq_len), seq_len)
    rows = enough_rows(rows, 1, source, "the held-out loss")
    return mean_loss(model, rows, batch_size)


def sample_poems(model, tokenizer, prompt, n=50, max_new_tokens=64, temperature=0.8, top_p=0.9, seed=0):
    """n continuations of `prompt` (text after the prompt, up to the end token)."""
    ids = torch.tensor([[tokenizer.bos_token_id] + tokenizer.encode(prompt, add_special_tokens=False)],
                       device=model.device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=top_p,
                         top_k=0, num_return_sequences=n, eos_token_id=tokenizer.eos_token_id, generator=generator)
    return [prompt + tokenizer.decode(row[ids.shape[1]:], skip_special_tokens=True) for row in out]


def regular_line_share(texts) -> float:
    """Share of complete lines (ended by ，。！？；) that are exactly 5 or 7 characters long."""
    lengths = [len(line) for text in texts for line in poem_lines(text[:max(text.rfind(p) for p in "，。！？；") + 1])]
    return sum(n in (5, 7) for n in lengths) / max(1, len(lengths))


@torch.no_grad()
def expert_shares(model, tokenizer, poems, seq_len=256):
    """Per MoE layer, the share of tokens each expert receives on `poems`, and the tokens each expert prefers."""
    rows = pack(encode_poems(tokenizer, poems, seq_len), seq_len).to(model.device)
    router_logits = model(rows, output_router_logits=True).router_logits
    tokens = rows.flatten().tolist()
    shares, favourites = {}, {}
    for layer, logits in enumerate(router_logits):
        _, choices = router_choices(logits, model.config.num_experts_per_tok)
        shares[layer] = [round(x, 4) for x in router_load(choices, model.config.num_experts).tolist()]
        per_expert = [Counter() for _ in range(model.config.num_experts)]
        for token, expert in zip(tokens, choices[:, 0].tolist()):
            per_expert[expert][token] += 1
        favourites[layer] = [[tokenizer.decode([t]) for t, _ in c.most_common(5)] for c in per_expert]
    return shares, favourites


def report(checkpoint: str, poems, samples=50, source="poems") -> dict:
    """Everything above for one checkpoint, as the dict saved in its eval.json."""
    model, tokenizer = model_from(checkpoint), tokenizer_from(checkpoint)
    loss = validation_loss(model, tokenizer, poems, source=source)
    result = {"validation_loss": round(loss, 4),
              "chars_per_token": round(chars_per_token(tokenizer, poems), 4), "line_share_5_or_7": {},
              "examples": {}}
    for prompt in PROMPTS:
        texts = sample_poems(model, tokenizer, prompt, samples)
        result["line_share_5_or_7"][prompt] = round(regular_line_share(texts), 3)
        result["examples"][prompt] = texts[:3]
    if model.config.use_moe:
        result["expert_shares"], result["expert_favourite_tokens"] = expert_shares(model, tokenizer, poems)
    return result


def main(argv=None):
    parser = Parser(prog="python -m minimind.training.evaluate", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a shipped checkpoint name (poetry-dense, "
                        "poetry-moe) or a folder")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--val-file", help="held-out poems (default: the committed 300-poem sample)")
    parser.add_argument("--json", help="write the results to this new file")
    args = parser.parse_args(argv)
    if args.samples <= 0:
        parser.error(f"argument --samples: {args.samples} is not a positive number")
    with user_errors():
        target = new_file(args.json, "--json") if args.json else None  # checked first
        poems = load_poems(args.val_file) if args.val_file else load_poems()
        result = report(args.checkpoint, poems, args.samples, args.val_file or SAMPLE)
    text = json.dumps(result, ensure_ascii=False, indent=1)
    print(text)
    if target:
        target.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
