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
from minimind.cli import Parser, UserError, model_from, output_folder, tokenizer_from
from minimind.cli import user_errors
from minimind.training.data import load_poems
from minimind.training.evaluate import report, validation_loss
from minimind.training.tokenizer import chars_per_token

KEEP = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "training.json",
        "train_log.csv", "loss_curve.png"]


def check_publish(run_folder, name: str, shipped: Path) -> Path:
    """The new folder shipped/NAME; UserError if it exists or the run is incomplete."""
    if name in ("", ".", "..") or Path(name).name != name:
        raise UserError(f"{name}: not a plain folder name (like poetry-dense)")
    target = output_folder(shipped, "") / name
    if target.exists():
        raise UserError(f"{target}: already published; choose another name, or remove "
                        "it yourself first (git rm -r) to replace it")
    if not Path(run_folder).is_dir():
        raise UserError(f"{run_folder}: not a folder; pass the final/ folder of a "
                        "training run")
    missing = [n for n in KEEP if not (Path(run_folder) / n).is_file()]
    if missing:
        raise UserError(f"{run_folder}: has no {missing[0]}; pass the final/ folder of "
                        "a finished training run")
    model_from(run_folder), tokenizer_from(run_folder)  # it loads: before any copy
    return target


def main(argv=None):
    parser = Parser(prog="python tools/publish_checkpoint.py", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_folder"), parser.add_argument("name")
    parser.add_argument("--val-file", help="the full validation split, for an extra loss figure")
    args = parser.parse_args(argv)
    with user_errors():
        target = check_publish(args.run_folder, args.name, SHIPPED)
        val_poems = load_poems(args.val_file) if args.val_file else None
        target.mkdir(parents=True)
        try:
            result = publish(Path(args.run_folder), target, val_poems, args.val_file)
        except BaseException:
            shutil.rmtree(target)  # only what this call created: no half checkpoint
            raise
    print(json.dumps(result, ensure_ascii=False, indent=1))


def publish(run_folder: Path, target: Path, val_poems, val_file) -> dict:
    """Copy KEEP into `target`, evaluate it, write eval.json and SHA256SUMS."""
    for name in KEEP:
        shutil.copy(run_folder / name, target / name)
    result = report(str(target), load_poems())
    if val_poems:
        model, tokenizer = load_pretrained(str(target)), load_tokenizer(str(target))
        loss = validation_loss(model, tokenizer, val_poems, source=val_file)
        result["validation_loss_full_split"] = round(loss, 4)
        chars = chars_per_token(tokenizer, val_poems)
        result["chars_per_token_full_split"] = round(chars, 4)
    (target / "eval.json").write_text(json.dumps(result, ensure_ascii=False, indent=1))
    write_manifest(target)
    return result


if __name__ == "__main__":
    main()
