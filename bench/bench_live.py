"""The live panels' budgets (issue #22): asset bytes, first picture, forward and generation speed in the page.

    python bench/bench_live.py [--html _build/html] [--repeats 5]

Needs the built book (both editions: `jupyter-book build .` then `python tools/i18n.py build`), node,
tests/browser/node_modules (`npm ci` there) and /usr/bin/chromium. It serves the build on 127.0.0.1 and runs
bench/live_bench.mjs: headless Chromium opens every live page of both editions and starts its panel.

- Asset bytes: the live files each page fetches (runtime, tokenizer, its model, the panel's modules), and all
  of them for both editions together (each file counted once: one copy serves both, cached by the browser).
- First interaction -> first live picture (ch04a): in a fresh profile (downloads included), and again with
  the cache warm.
- A forward over a 32-token line, and greedy generation of 32 tokens after 床前明月光， (KV-cache), in the page
  (onnxruntime-web, wasm, one thread). Reference, measured in this same run on this machine: the same graph
  run by Python onnxruntime (one thread), and the torch model itself (one thread).

Best of `repeats`. Writes bench/results/live_mode.csv (metric, value, unit, budget, reference, ratio) and
.json (command, machine, load, versions, per-page files). Not a test: timings depend on the machine.
"""
import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
import test_browser  # noqa: E402  (the served build, the live pages, chromium's path)
from minimind.checkpoint import load_pretrained, load_tokenizer  # noqa: E402
from minimind.lab import browser_export  # noqa: E402

PROMPT = "床前明月光，"
LINE32 = "床前明月光，疑是地上霜。举头望明月，低头思故乡。春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"
FIELDS = ["metric", "value", "unit", "budget", "reference", "reference_value", "ratio"]


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def python_references(ids32, prompt, new_tokens, html, repeats):
    """ms for a 32-token forward and tokens/s of cached greedy decoding: onnxruntime and torch, 1 thread."""
    import onnxruntime as ort
    torch.set_num_threads(1)
    model = load_pretrained("poetry-dense").eval()
    config = model.config
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(html / "_static/live/models/poetry-dense.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    names = browser_export.output_names(config)

    def run(ids, past=None):
        feeds = {"input_ids": np.asarray([ids], dtype=np.int64)}
        past = past if past is not None else [p.numpy() for p in browser_export.empty_past(config)]
        feeds.update(zip(browser_export.past_names(config), past))
        return dict(zip(names, session.run(None, feeds)))

    def ort_generate():
        out, tokens = run(prompt), []
        for _ in range(new_tokens):
            tokens.append(int(out["logits"][0, -1].argmax()))
            if tokens[-1] == config.eos_token_id:
                break
            out = run([tokens[-1]], [out[n] for n in names if n.startswith("present_")])
        return tokens

    run(ids32)
    ort_forward = best_of(lambda: run(ids32), repeats)
    tokens = ort_generate()
    ort_gen = best_of(ort_generate, repeats)
    x32, xp = torch.tensor([ids32]), torch.tensor([prompt])
    with torch.inference_mode():
        torch_forward = best_of(lambda: model(x32), repeats)
        greedy = dict(do_sample=False, max_new_tokens=new_tokens)
        torch_tokens = model.generate(xp, **greedy)[0, len(prompt):].tolist()
        torch_gen = best_of(lambda: model.generate(xp, **greedy), repeats)
    return {"ort_forward_ms": 1000 * ort_forward, "ort_tokens_per_s": len(tokens) / ort_gen,
            "torch_forward_ms": 1000 * torch_forward, "torch_tokens_per_s": len(torch_tokens) / torch_gen,
            "tokens": tokens, "torch_tokens": torch_tokens, "onnxruntime": ort.__version__}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "live_mode"))
    args = parser.parse_args(argv)
    html = args.html.resolve()
    tok = load_tokenizer("poetry-dense")
    ids32 = tok(LINE32)["input_ids"][:32]
    assert len(ids32) == 32, len(ids32)
    prompt = tok(PROMPT)["input_ids"]
    load = os.getloadavg()
    start = time.time()
    server, base_url = test_browser._serve(html)
    spec = {"base_url": base_url, "chromium": str(test_browser.CHROMIUM), "pages": test_browser.LIVE_PAGES,
            "timed_page": "book/ch04a_attention.html", "ids32": ids32, "prompt": prompt,
            "new_tokens": args.new_tokens, "repeats": args.repeats, "report_path": "/tmp/live_bench_report.json"}
    Path("/tmp/live_bench_spec.json").write_text(json.dumps(spec, ensure_ascii=False))
    try:
        subprocess.run(["node", str(ROOT / "bench" / "live_bench.mjs"), "/tmp/live_bench_spec.json"],
                       check=False, timeout=1800)
    finally:
        server.terminate()
        server.wait(timeout=10)
    report = json.loads(Path(spec["report_path"]).read_text())
    if "error" in report:
        sys.exit(f"live_bench.mjs: {report['error']}")
    ref = python_references(ids32, prompt, args.new_tokens, html, args.repeats)

    size = {}
    for entry in report["pages"]:
        files = sorted({a.lstrip("/") for a in entry["assets"]})
        size[entry["page"]] = sum((html / f).stat().st_size for f in files)
        entry["files"] = files
    every = sorted({f for e in report["pages"] for f in e["files"]})
    total = sum((html / f).stat().st_size for f in every)
    mb = 1e6
    t = report["timings"]
    page_tps = t["generated"] / t["generate_ms"] * 1000
    worst = max(size, key=size.get)
    rows = [
        ["largest page's live assets", size[worst] / mb, "MB", "<= 40", worst, "", ""],
        ["all live assets, both editions", total / mb, "MB", "<= 64", f"{len(report['pages'])} pages", "", ""],
        *[[f"live assets: {page}", size[page] / mb, "MB", "<= 40", "", "", ""] for page in sorted(size)],
        ["first interaction -> first picture, cold", report["first_picture_ms"]["cold"] / 1000, "s", "<= 3",
         "", "", ""],
        ["first interaction -> first picture, warm", report["first_picture_ms"]["warm"] / 1000, "s", "<= 3",
         "", "", ""],
        ["32-token forward in the page", t["forward_ms"], "ms", "<= 300", "python onnxruntime, 1 thread",
         ref["ort_forward_ms"], t["forward_ms"] / ref["ort_forward_ms"]],
        ["32-token forward in the page", t["forward_ms"], "ms", "<= 300", "python torch, 1 thread",
         ref["torch_forward_ms"], t["forward_ms"] / ref["torch_forward_ms"]],
        ["greedy generation in the page", page_tps, "tokens/s", ">= 10", "python onnxruntime, 1 thread",
         ref["ort_tokens_per_s"], page_tps / ref["ort_tokens_per_s"]],
        ["greedy generation in the page", page_tps, "tokens/s", ">= 10", "python torch, 1 thread",
         ref["torch_tokens_per_s"], page_tps / ref["torch_tokens_per_s"]],
    ]
    rounded = [[r[0], round(r[1], 3), r[2], r[3], r[4], round(r[5], 3) if r[5] != "" else "",
                round(r[6], 2) if r[6] != "" else ""] for r in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        writer.writerows(rounded)
    chromium = subprocess.run([spec["chromium"], "--version"], capture_output=True, text=True).stdout.strip()
    meta = {"command": "python bench/bench_live.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "load_average_before": load,
            "load_average_after": os.getloadavg(), "seconds": round(time.time() - start, 1),
            "chromium": chromium, "onnxruntime": ref["onnxruntime"], "torch": torch.__version__,
            "same_tokens_page_ort_torch": t["tokens"] == ref["tokens"] == ref["torch_tokens"],
            "first_picture_ms": report["first_picture_ms"], "page_timings": t,
            "pages": {e["page"]: e["files"] for e in report["pages"]}}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    print(f"{meta['machine']}, load {load[0]:.1f} before / {meta['load_average_after'][0]:.1f} after, "
          f"best of {args.repeats}; {chromium}, onnxruntime {ref['onnxruntime']}")
    for r in rounded:
        line = f"{r[0]:44} {r[1]:>9} {r[2]:8} (budget {r[3]})"
        if r[5] != "":
            line += f"  {r[4]}: {r[5]}, ratio {r[6]}x"
        print(line)
    print(f"same greedy tokens in the page, onnxruntime and torch: {meta['same_tokens_page_ort_torch']}")


if __name__ == "__main__":
    main()
