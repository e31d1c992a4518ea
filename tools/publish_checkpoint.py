"""Copy a finished training run into the package as a shipped checkpoint, with its evaluation and checksums.

    python tools/publish_checkpoint.py runs/poetry-dense/final poetry-dense --val-file data/poetry/val.txt

Writes minimind/checkpoints/NAME/: the HF-style folder, eval.json (validation loss on the committed 300-poem
sample and on the full validation split, characters per token, sample quality; MoE: expert loads) and
SHA256SUMS, which `load_pretrained` verifies.
"""
import argparse
import json
import shutil
from pathlib import Path

from minimind.checkpoint import SHIPPED, load_pretrained, load_tokenizer, write_manifest
from minimind.training.data import load_poems
from minimind.training.evaluate import report, validation_loss
from minimind.training.tokenizer import chars_per_token

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
    result = report(str(target), load_poems())
    if args.val_file:
        model, tokenizer = load_pretrained(str(target)), load_tokenizer(str(target))
        poems = load_poems(args.val_file)
        result["validation_loss_full_split"] = round(validation_loss(model, tokenizer, poems), 4)
        result["chars_per_token_full_split"] = round(chars_per_token(tokenizer, poems), 4)
    (target / "eval.json").write_text(json.dumps(result, ensure_ascii=False, indent=1))
    write_manifest(target)
    print(json.dumps(result, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
