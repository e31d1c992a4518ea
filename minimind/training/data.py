"""The training corpus: classical Chinese poems from the npm package `chinese-poetry` (the appendix on training).

    npm pack chinese-poetry@2.0.1 && tar xzf chinese-poetry-2.0.1.tgz   # needs Node only for this step
    python -m minimind.training.data build package/dist data/poetry

writes train.txt / val.txt (one poem per line, simplified characters) and meta.json (counts, sha256).
"""
import argparse
import glob
import hashlib
import json
import os
import re
from pathlib import Path

import torch

from ..cli import Parser, UserError, output_folder, refuse_earlier_work, user_errors

COLLECTIONS = {  # name -> glob under the package's dist/ folder
    "tang": "quantangshi/poet.tang.*.json",
    "song": "quantangshi/poet.song.*.json",
    "songci": "songci/ci.song.*.json",
}
LINE_END = re.compile(r"[，。！？；]")
EDITORIAL = re.compile(r"（[^）]*）|〖[^〗]*〗|\([^)]*\)")
DAMAGED = re.compile(r"[□{}\[\]<>a-zA-Z0-9]")
SAMPLE = Path(__file__).parents[1] / "assets" / "poetry_sample.txt"
BUILT = ("train.txt", "val.txt", "meta.json")  # what `build` writes


def poem_lines(text: str) -> list[str]:
    """Split a poem at its punctuation: '床前明月光，疑是地上霜。' -> ['床前明月光', '疑是地上霜']."""
    return [line for line in LINE_END.split(text) if line]


def is_regulated(text: str) -> bool:
    """Regulated verse (jueju / lüshi): 4 or 8 lines, all of 5 or all of 7 characters."""
    lines = poem_lines(text)
    return len(lines) in (4, 8) and len({len(l) for l in lines}) == 1 and len(lines[0]) in (5, 7)


def clean_poem(paragraphs: list[str], to_simplified) -> str | None:
    text = EDITORIAL.sub("", "".join(paragraphs)).replace(" ", "").replace("\u3000", "")
    if not text or DAMAGED.search(text):
        return None
    return to_simplified(text)


def read_collection(dist: Path, name: str):
    for path in sorted(glob.glob(str(dist / COLLECTIONS[name])), key=lambda p: int(re.findall(r"\d+", p)[-1])):
        for item in read_items(path):
            yield item.get("paragraphs", [])


def read_items(path) -> list[dict]:
    """One file of the package: a JSON list of poems; else a UserError naming it."""
    try:
        items = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error}); unpack the package "
                        "again") from None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise UserError(f"{path}: not a list of poems; is this chinese-poetry's dist/?")
    return items


def is_validation(text: str, val_percent: int) -> bool:
    """Deterministic split by content hash, stable whatever the order of the files."""
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % 100 < val_percent


def check_build(dist, out, collections):
    """Refuse unknown collections, a dist/ without them, an out folder already built."""
    unknown = [name for name in collections if name not in COLLECTIONS]
    if unknown:
        raise UserError(f"--collections: unknown collection {unknown[0]!r}; "
                        f"choose from {sorted(COLLECTIONS)}")
    missing = [name for name in collections
               if not glob.glob(str(Path(dist) / COLLECTIONS[name]))]
    if missing:
        raise UserError(f"{dist}: no {COLLECTIONS[missing[0]]} there (pass the "
                        "package's dist/ folder, e.g. data/package/dist after npm pack "
                        "chinese-poetry@2.0.1 and tar xzf)")
    refuse_earlier_work(output_folder(out, ""), BUILT, "an earlier build",
                        "choose another out folder (a build never overwrites one)")


def check_splits(splits: dict, raw: int, dist, val_percent: int):
    """Refuse a build without training poems, or without the validation ones asked."""
    if not splits["train"]:
        raise UserError(f"{dist}: no poem kept out of {raw} items (damaged, "
                        "duplicates or not regulated verse); try --all-forms or other "
                        "--collections")
    if val_percent and not splits["val"]:
        kept = len(splits["train"])
        raise UserError(f"--val-percent {val_percent}: none of the {kept} poems kept "
                        "went to val.txt; raise it or add --collections")


def simplifier():
    """OpenCC's traditional-to-simplified conversion."""
    try:
        import opencc
    except ImportError:
        raise UserError("opencc: not installed; building the corpus needs it: "
                        "pip install opencc") from None
    return opencc.OpenCC("t2s").convert


def build(dist: str, out: str, collections=("tang",), regulated_only=True,
          val_percent=2):
    check_build(dist, out, collections)
    to_simplified = simplifier()
    seen, splits = set(), {"train": [], "val": []}
    raw = 0
    for name in collections:
        for paragraphs in read_collection(Path(dist), name):
            raw += 1
            text = clean_poem(paragraphs, to_simplified)
            if text is None or text in seen or (regulated_only and not is_regulated(text)):
                continue
            seen.add(text)
            splits["val" if is_validation(text, val_percent) else "train"].append(text)
    check_splits(splits, raw, dist, val_percent)
    os.makedirs(out, exist_ok=True)
    meta = {"source": "npm chinese-poetry@2.0.1 (MIT)", "collections": list(collections),
            "regulated_only": regulated_only, "raw_items": raw}
    for split, poems in splits.items():
        body = "\n".join(poems) + "\n"
        Path(out, f"{split}.txt").write_text(body, encoding="utf-8")
        meta[split] = {"poems": len(poems), "characters": sum(map(len, poems)),
                       "sha256": hashlib.sha256(body.encode()).hexdigest()}
    Path(out, "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2))
    return meta


def load_poems(path=SAMPLE) -> list[str]:
    """Poems, one per line; by default the validation sample shipped with the package.

    A missing, non-UTF-8 or empty (only whitespace) file is a UserError naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: {'is a folder' if path.is_dir() else 'not found'}; "
                        "pass a text file with one poem per line")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error})") from None
    poems = [line for line in lines if line.strip()]
    if not poems:
        raise UserError(f"{path}: holds no poems (it is empty or only whitespace); "
                        "build it with python -m minimind.training.data build")
    return poems


def encode_poems(tokenizer, poems, max_len: int):
    """Each poem as <|im_start|> poem <|im_end|>, truncated to max_len tokens, as a list of id lists."""
    bos, eos = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    return [([bos] + tokenizer.encode(p, add_special_tokens=False) + [eos])[:max_len] for p in poems]


def enough_rows(rows: torch.Tensor, need: int, path, what: str) -> torch.Tensor:
    """`rows` [N, seq_len] if N >= need, else UserError: `path` is too short."""
    if len(rows) < need:
        raise UserError(f"{path}: too short: it packs into {len(rows)} rows of "
                        f"{rows.shape[1]} tokens, and {what} needs at least {need}; "
                        "add poems")
    return rows


def pack(sequences, seq_len: int) -> torch.Tensor:
    """Concatenate id lists and cut into rows of seq_len tokens: [N, seq_len] (the tail is dropped)."""
    flat = torch.tensor([t for seq in sequences for t in seq], dtype=torch.long)
    n = len(flat) // seq_len
    return flat[: n * seq_len].view(n, seq_len)


def main(argv=None):
    parser = Parser(prog="python -m minimind.training.data", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build train/val text files from the npm package's dist/ folder")
    b.add_argument("dist"), b.add_argument("out", help="a new folder (not overwritten)")
    b.add_argument("--collections", default="tang", help=f"comma-separated, from {sorted(COLLECTIONS)}")
    b.add_argument("--all-forms", action="store_true", help="keep poems that are not regulated verse")
    b.add_argument("--val-percent", type=int, default=2, help="1 to 99 (default 2)")
    args = parser.parse_args(argv)
    if not 0 < args.val_percent < 100:
        parser.error(f"argument --val-percent: {args.val_percent} is not from 1 to 99")
    with user_errors():
        meta = build(args.dist, args.out, tuple(args.collections.split(",")),
                     not args.all_forms, args.val_percent)
    print(json.dumps(meta, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
