"""Prefill and greedy-decode speed: minimind vs transformers' Qwen3ForCausalLM (same weights), cache on vs off.

    python bench/bench_generate.py [--new-tokens 128 256] [--repeats 3] [--device cpu]

Default 64M config, fp32, batch 1, a 32-token prompt. Every figure is the best of `repeats` runs, and every
ratio compares two numbers measured in this same run. Not a test: timings depend on the machine.
"""
import argparse
import time

import torch

from minimind import MiniMindConfig, MiniMindForCausalLM
from minimind.export import to_qwen3
from minimind.lab.device import pick_device


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def best_times(fns, repeats):
    """Best time of each function; runs alternate (a, b, a, b, ...) so a busy spell hits both alike."""
    best, results = [float("inf")] * len(fns), [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            seconds, results[i] = timed(fn)
            best[i] = min(best[i], seconds)
    return best, results


@torch.inference_mode()
def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device")
    args = parser.parse_args()
    device = pick_device(args.device)
    torch.manual_seed(0)
    ours = MiniMindForCausalLM(MiniMindConfig()).to(device).eval()
    theirs = to_qwen3(ours)  # the same weights in transformers' Qwen3ForCausalLM
    prompt = torch.randint(3, 6400, (1, args.prompt), device=device)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, fp32, batch 1, "
          f"prompt {args.prompt} tokens, best of {args.repeats}")

    (t_ours, t_theirs), _ = best_times([lambda: ours(prompt), lambda: theirs(prompt)], args.repeats)
    print(f"prefill   minimind {args.prompt / t_ours:8.0f} tok/s   transformers {args.prompt / t_theirs:8.0f} tok/s"
          f"   ratio {t_theirs / t_ours:.2f}x")

    for n in args.new_tokens:
        greedy = dict(max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)  # always n tokens
        (t_cached, t_hf), (out_cached, out_hf) = best_times(
            [lambda: ours.generate(prompt, **greedy), lambda: theirs.generate(prompt, **greedy)], args.repeats)
        t_plain, out_plain = timed(lambda: ours.generate(prompt, use_cache=False, **greedy))
        same = torch.equal(out_cached, out_plain) and torch.equal(out_cached, out_hf)
        print(f"decode {n:3d}  minimind {n / t_cached:6.1f} tok/s  transformers {n / t_hf:6.1f} tok/s  "
              f"ratio {t_hf / t_cached:.2f}x | no cache {n / t_plain:6.1f} tok/s, cache speed-up "
              f"{t_plain / t_cached:.1f}x | same tokens: {same}")

if __name__ == "__main__":
    main()
