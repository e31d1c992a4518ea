"""Quality against diversity of poetry-dense's samples over a grid of temperatures and top-p values (chapter 10).

Regenerate bench/results/sampling_grid.csv (and .json with the command and timing):

    OMP_NUM_THREADS=1 python bench/sampling_grid.py

For each setting, `minimind.training.evaluate.sample_poems` draws --samples continuations (top_k=0, up to 64 new
tokens, stopping at the end token) of each of the three evaluation prompts 床前明月光， / 春风 / 明月, seed 0;
greedy decoding is deterministic, so its --samples continuations per prompt are one continuation repeated
(computed once). Columns:

- `line_share`: share of complete lines of 5 or 7 characters (`regular_line_share`; for a prompt that is itself a
  complete line, only the continuation is scored, so the prompt's own line never counts);
- `distinct_2`: different character bigrams / all bigrams inside lines, over every continuation of the setting
  (pooled over prompts and samples: diversity *across* samples);
- `repeated_bigrams`: mean over continuations of the share of a continuation's bigrams that already occurred
  earlier in it (repetition *within* a sample, what greedy loops show);
- `repeated_lines`: share of lines that repeat an earlier line of the same continuation;
- `mean_chars`: mean number of poem characters (punctuation excluded) per continuation; `samples`.

Deterministic on one CPU thread.
"""
import argparse
import csv
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import minimind  # noqa: E402
from minimind.lab.sampling_lab import (distinct_n, poem_characters, repeated_line_share,  # noqa: E402
                                       repeated_ngram_share)
from minimind.training.evaluate import PROMPTS, regular_line_share, sample_poems  # noqa: E402

TEMPERATURES = [0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5]
TOP_PS = [1.0, 0.9, 0.7]
FIELDS = ["decoding", "temperature", "top_p", "line_share", "distinct_2", "repeated_bigrams", "repeated_lines",
          "mean_chars", "samples"]


def continuation(prompt: str, text: str) -> str:
    return text[len(prompt):]


def scored(prompt: str, text: str) -> str:
    """What line_share reads: the whole text, or only the continuation when the prompt is a complete line."""
    return continuation(prompt, text) if prompt[-1] in "，。！？；" else text


def measure(texts_by_prompt: dict) -> dict:
    conts = [continuation(p, t) for p, texts in texts_by_prompt.items() for t in texts]
    return {"line_share": regular_line_share([scored(p, t) for p, texts in texts_by_prompt.items() for t in texts]),
            "distinct_2": distinct_n(conts, 2),
            "repeated_bigrams": sum(repeated_ngram_share(c) for c in conts) / len(conts),
            "repeated_lines": repeated_line_share(conts),
            "mean_chars": sum(len(poem_characters(c)) for c in conts) / len(conts), "samples": len(conts)}


def greedy_texts(model, tokenizer, prompt, max_new_tokens):
    ids = torch.tensor([[tokenizer.bos_token_id] + tokenizer.encode(prompt, add_special_tokens=False)])
    out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=tokenizer.eos_token_id)
    return [prompt + tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100, help="continuations per prompt and setting")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sampling_grid"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, tokenizer = minimind.load_pretrained("poetry-dense"), minimind.load_tokenizer("poetry-dense")
    settings = [("greedy", 0.0, 1.0)] + [("sample", t, p) for p in TOP_PS for t in TEMPERATURES]
    rows, start = [], time.time()
    for decoding, temperature, top_p in settings:
        t0 = time.time()
        if decoding == "greedy":
            texts = {p: greedy_texts(model, tokenizer, p, args.max_new_tokens) * args.samples for p in PROMPTS}
        else:
            texts = {p: sample_poems(model, tokenizer, p, n=args.samples, max_new_tokens=args.max_new_tokens,
                                     temperature=temperature, top_p=top_p, seed=0) for p in PROMPTS}
        row = {"decoding": decoding, "temperature": temperature, "top_p": top_p,
               **{k: round(v, 4) for k, v in measure(texts).items()}}
        rows.append(row)
        print(row, f"{time.time() - t0:.1f} s", flush=True)
    with open(args.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    meta = {"command": "OMP_NUM_THREADS=1 python bench/sampling_grid.py " + " ".join(argv or sys.argv[1:]),
            "samples_per_prompt": args.samples, "prompts": PROMPTS, "max_new_tokens": args.max_new_tokens,
            "seconds": round(time.time() - start, 1), "torch": torch.__version__}
    Path(args.out + ".json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
