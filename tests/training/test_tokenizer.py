from transformers import AutoTokenizer

from minimind.training.data import SAMPLE, load_poems
from minimind.training.tokenizer import SPECIAL_TOKENS, chars_per_token, train_tokenizer


def test_train_round_trip_and_special_ids(tmp_path):
    train_tokenizer(str(SAMPLE), str(tmp_path), vocab_size=600)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok.convert_tokens_to_ids(SPECIAL_TOKENS[:3]) == [0, 1, 2]
    assert (tok.bos_token_id, tok.eos_token_id, len(tok)) == (1, 2, 600)
    for text in ["床前明月光，疑是地上霜。", "Hello, 世界! 123"]:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert chars_per_token(tok, load_poems()) > 1 / 3  # merges beat the 3 UTF-8 bytes of a character
