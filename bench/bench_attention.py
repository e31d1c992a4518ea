"""One attention layer's decode step over a long cache: repeat_kv's copy vs SDPA's GQA.

    python bench/bench_attention.py [--cache 4096 16384] [--repeats 20] [--threads 1]

Default 64M config (8 query heads, 4 KV heads, head_dim 96), fp32, batch 1. "repeat_kv":
the fused path as it was, copying the cache's KV heads before SDPA; "enable_gqa": they
go to SDPA as they are. "cat only" appends to the cache, as both do. Best of `repeats`,
the variants alternating. Not a test: timings depend on the machine.
"""
import argparse
import time

import torch

from minimind import MiniMindConfig
from minimind.attention import Attention, repeat_kv


def repeated_fused_step(attention, x, cos, sin, cache):
    """Attention.forward's old fused path: copy each KV head n_rep times, then SDPA."""
    def copy_first(xq, xk, xv, mask):
        n_rep = xq.shape[1] // xk.shape[1]
        xk, xv = (repeat_kv(t.transpose(1, 2), n_rep).transpose(1, 2) for t in (xk, xv))
        return fused(xq, xk, xv, mask)  # [B, H, S_kv, D] each: enable_gqa is then off
    fused, attention.fused_attention = attention.fused_attention, copy_first
    try:
        return attention(x, (cos, sin), cache, use_cache=True)
    finally:
        del attention.fused_attention  # back to the class's method


def best_of(fns, repeats):
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


@torch.inference_mode()
def main():
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--cache", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = MiniMindConfig()
    torch.manual_seed(0)
    attention = Attention(config).eval()
    n_kv, d = config.num_key_value_heads, config.head_dim
    x = torch.randn(1, 1, config.hidden_size)  # one new token
    cos, sin = torch.ones(1, d), torch.zeros(1, d)  # RoPE at angle 0: it costs the same
    print(f"torch {torch.__version__}, threads {args.threads}, fp32, batch 1, "
          f"best of {args.repeats}")
    for length in args.cache:
        cache = (torch.randn(1, length, n_kv, d), torch.randn(1, length, n_kv, d))
        fns = [lambda: [torch.cat([c, c[:, :1]], 1) for c in cache],
               lambda: repeated_fused_step(attention, x, cos, sin, cache),
               lambda: attention(x, (cos, sin), cache, use_cache=True)]
        t_cat, t_old, t_new = best_of(fns, args.repeats)
        same = (fns[1]()[0] - fns[2]()[0]).abs().max().item()
        print(f"cache {length:6d}: cat only {t_cat * 1e3:6.2f} ms | "
              f"repeat_kv {t_old * 1e3:6.2f} ms | enable_gqa {t_new * 1e3:6.2f} ms "
              f"({t_old / t_new:.1f}x) | max |Δ| {same:.1e}")


if __name__ == "__main__":
    main()
