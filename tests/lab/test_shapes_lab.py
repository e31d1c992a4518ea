"""minimind.lab.shapes_lab: chapter 1's shape trace and line-end probes."""
import pytest
import torch

import minimind
from minimind.lab.shapes_lab import (SHAPE_KEYS, explain_shapes, forward_shapes, line_end_by_line,
                                     line_end_probability)


def test_forward_shapes_default_config():
    shapes = forward_shapes(minimind.MiniMindConfig(), 3, 7)
    assert list(shapes) == SHAPE_KEYS
    assert shapes["q_heads"] == [3, 7, 8, 96] and shapes["k_heads"] == [3, 7, 4, 96]
    assert shapes["scores"] == [3, 8, 7, 7] and shapes["merged"] == [3, 7, 768]
    assert shapes["ffn_hidden"] == [3, 7, 2432] and shapes["logits"] == [3, 7, 6400]


def test_forward_shapes_heads_wider_than_hidden():
    shapes = forward_shapes(minimind.MiniMindConfig(head_dim=128), 1, 4)
    assert shapes["merged"] == [1, 4, 1024] and shapes["embedding"] == [1, 4, 768]


def test_forward_shapes_refuses_moe():
    with pytest.raises(ValueError):
        forward_shapes(minimind.MiniMindConfig(use_moe=True), 1, 4)


def test_explain_names_key_and_axis_without_the_value():
    expected = forward_shapes(minimind.MiniMindConfig(), 3, 7)
    got = dict(expected, k_heads=[3, 7, 8, 96])
    message = explain_shapes(got, expected)
    assert "'k_heads'" in message and "axis 3" in message and "too large" in message
    assert "4" not in message.replace("of 4", "")  # the package's 4 KV heads are not given away
    assert explain_shapes(expected, expected) is None
    assert "no entry" in explain_shapes({"embedding": [3, 7, 768]}, expected)


class _Tok:
    """A tokenizer of single characters over a tiny alphabet (ids from 2: 0 and 1 are special)."""

    alphabet = "，。？abcdefghijklmn"

    def encode(self, text, add_special_tokens=False):
        return [self.alphabet.index(ch) + 2 for ch in text]

    def decode(self, ids):
        return "".join(self.alphabet[i - 2] for i in ids)


def test_line_end_probes_on_a_tiny_model():
    torch.manual_seed(0)
    config = minimind.MiniMindConfig(hidden_size=64, num_hidden_layers=1, vocab_size=64,
                                     num_attention_heads=2, num_key_value_heads=1)
    model = minimind.MiniMindForCausalLM(config).eval()
    tok = _Tok()
    p = line_end_probability(model, tok, "abcde")
    assert 0.0 < p < 1.0
    found = line_end_by_line(model, tok, ["abcde，fghij。", "abcdefg，hijklmn。"], after=5)
    assert [line for line, _ in found] == [1, 2, 1, 2]  # 5 characters read once per line
    assert found[0][1] == pytest.approx(p, abs=1e-6)  # the same prompt, the same probability
