"""A byte-level BPE tokenizer with MiniMind's 6400-token vocabulary and special-token ids (the appendix on training).

    python -m minimind.training.tokenizer train data/poetry/train.txt runs/tokenizer
"""
import argparse
import json
from pathlib import Path

from ..cli import Parser, UserError, output_folder, refuse_earlier_work, user_errors
from .data import load_poems

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>",  # ids 0, 1, 2 as in MiniMind
                  "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
SPECIAL_TOKENS += [f"<|reserved_{i}|>" for i in range(36 - len(SPECIAL_TOKENS))]
SAVED = ("tokenizer.json", "tokenizer_config.json")
SMALLEST_VOCAB = len(SPECIAL_TOKENS) + 256  # the special tokens and bytes, no merge


def train_tokenizer(text_file: str, out_dir: str, vocab_size: int = 6400):
    """Train BPE on `text_file` and save tokenizer.json + tokenizer_config.json for AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    check_tokenizer_args(text_file, out_dir, vocab_size)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([text_file], trainer)
    for i, token in enumerate(SPECIAL_TOKENS[:3]):
        assert tokenizer.token_to_id(token) == i, f"{token} should have id {i}"
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(Path(out_dir, "tokenizer.json")))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32768, "add_prefix_space": False,
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "clean_up_tokenization_spaces": False,
        "additional_special_tokens": SPECIAL_TOKENS[3:],
    }
    Path(out_dir, "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2))


def check_tokenizer_args(text_file, out_dir, vocab_size: int):
    """Refuse an empty corpus, a vocabulary without the bytes, an earlier tokenizer."""
    load_poems(text_file)  # exists, UTF-8, not only whitespace
    if vocab_size < SMALLEST_VOCAB:
        raise UserError(f"--vocab-size {vocab_size}: below {SMALLEST_VOCAB}, the "
                        f"{len(SPECIAL_TOKENS)} special tokens and 256 bytes; MiniMind "
                        "uses 6400")
    refuse_earlier_work(output_folder(out_dir), SAVED, "a tokenizer",
                        "choose another out folder (a run trained with it needs it "
                        "unchanged)")


def chars_per_token(tokenizer, texts) -> float:
    """Average number of characters one token covers (higher = more compression)."""
    n_chars = sum(len(t) for t in texts)
    n_tokens = sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in texts)
    return n_chars / n_tokens


def main(argv=None):
    parser = Parser(prog="python -m minimind.training.tokenizer", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("text_file")
    t.add_argument("out_dir", help="a new folder (never overwritten)")
    t.add_argument("--vocab-size", type=int, default=6400)
    t.add_argument("--val-file", help="report characters per token on this file")
    args = parser.parse_args(argv)
    with user_errors():
        texts = load_poems(args.val_file) if args.val_file else None  # checked first
        train_tokenizer(args.text_file, args.out_dir, args.vocab_size)
    if texts:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(args.out_dir)
        print(f"characters per token on {args.val_file}: {chars_per_token(tok, texts):.3f}")


if __name__ == "__main__":
    main()
