import json

import torch

from minimind.training.data import build, is_regulated, pack, poem_lines

POEMS = [
    {"paragraphs": ["牀前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"]},
    {"paragraphs": ["牀前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"]},  # duplicate
    {"paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"]},
    {"paragraphs": ["長短句，參差不齊也。"]},  # not regulated verse
    {"paragraphs": ["□□□□□，疑是地上霜。", "舉頭望明月，低頭思故鄉。"]},  # damaged
]


def test_regulated_verse():
    assert poem_lines("床前明月光，疑是地上霜。") == ["床前明月光", "疑是地上霜"]
    assert is_regulated("床前明月光，疑是地上霜。举头望明月，低头思故乡。")
    assert not is_regulated("床前明月光，疑是地上霜。举头望明月，低头思故乡乡。")


def test_build_cleans_converts_and_splits(tmp_path):
    (tmp_path / "dist/quantangshi").mkdir(parents=True)
    (tmp_path / "dist/quantangshi/poet.tang.0.json").write_text(json.dumps(POEMS, ensure_ascii=False))
    meta = build(tmp_path / "dist", tmp_path / "out", val_percent=0)
    assert meta["raw_items"] == 5 and meta["train"]["poems"] == 2 and meta["val"]["poems"] == 0
    text = (tmp_path / "out/train.txt").read_text()
    assert "床前明月光，疑是地上霜。举头望明月，低头思故乡。" in text  # simplified characters
    again = build(tmp_path / "dist", tmp_path / "out2", val_percent=0)
    assert again["train"]["sha256"] == meta["train"]["sha256"]


def test_pack():
    rows = pack([[1, 5, 6, 2], [1, 7, 2], [1, 8]], 4)
    assert torch.equal(rows, torch.tensor([[1, 5, 6, 2], [1, 7, 2, 1]]))
