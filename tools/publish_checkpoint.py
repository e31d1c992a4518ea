"""Copy a finished training run into the package as a shipped checkpoint, with its evaluation and checksums.

    python tools/publish_checkpoint.py runs/poetry-dense/final poetry-dense --val-file data/poetry/val.txt

Writes minimind/checkpoints/NAME/: the HF-style folder, eval.json (validation loss on the committed 300-poem
sample and on the full validation split, characters per token, sample quality; MoE: expert loads) and
SHA256SUMS, which `load_pretrained` verifies.
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from minimind.checkpoint import SHIPPED, write_manifest

KEEP = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "training.json",
        "train_log.csv", "loss_curve.png"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_folder"), parser.add_argument("name")
    parser.add_argument("--val-file", help="the full validation split, for an extra loss figure")
    args = parser.parse_args()
    target = SHIPPED / args.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in KEEP:
        shutil.copy(Path(args.run_folder) / name, target / name)
    report = json.loads(subprocess.run([sys.executable, "-m", "minimind.evaluate", str(target)], check=True,
                                       capture_output=True, text=True).stdout)
    if args.val_file:
        full = json.loads(subprocess.run([sys.executable, "-m", "minimind.evaluate", str(target), "--samples", "1",
                                          "--val-file", args.val_file], check=True, capture_output=True,
                                         text=True).stdout)
        report["validation_loss_full_split"] = full["validation_loss"]
        report["chars_per_token_full_split"] = full["chars_per_token"]
    (target / "eval.json").write_text(json.dumps(report, ensure_ascii=False, indent=1))
    write_manifest(target)
    print(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
