"""minimind.lab.shapes_lab: chapter 1's shape trace and line-end probes."""
import pytest
import torch

import minimind
from minimind.lab.shapes_lab import (SHAPE_KEYS, attention_merge, explain_shapes,
                                     forward_shapes, line_end_by_line,
                                     line_end_probability, param_gap, shared_palette)


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
    assert "own head count" in message  # this key's own pointer
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


def test_attention_merge_is_what_attention_feeds_o_proj():
    torch.manual_seed(0)
    config = minimind.MiniMindConfig(hidden_size=64, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2)
    attn = minimind.attention.Attention(config).eval()
    seen = {}
    heads = attn.explicit_attention
    attn.explicit_attention = lambda *a: seen.setdefault("heads", heads(*a))
    attn.o_proj.register_forward_pre_hook(lambda m, args: seen.update(merged=args[0]))
    from minimind.rope import precompute_freqs_cis
    cos, sin = precompute_freqs_cis(config.head_dim, 5)
    with torch.no_grad():
        attn(torch.randn(2, 5, 64), (cos, sin), output_attentions=True)
    out = seen["heads"][0]  # [2, 4, 5, 16]
    assert torch.equal(attention_merge(out), seen["merged"])  # exact: the same line
    transposed = out.transpose(1, 2).contiguous().transpose(1, 2)  # the other layout
    assert torch.equal(attention_merge(transposed), seen["merged"])
    assert not torch.equal(out.reshape(2, 5, 64), seen["merged"])  # the pitfall differs


def test_param_gap_names_the_missing_piece():
    config = minimind.MiniMindConfig()
    twice = param_gap(config, 6400 * 768)  # the tied embedding counted twice
    assert "one V × d matrix" in twice and "too many" in twice
    no_qk_norm = param_gap(config, -8 * 96)
    assert "QK-Norm" in no_qk_norm and "too few" in no_qk_norm
    assert param_gap(config, 12345) is None and param_gap(config, 0) is None


def test_shared_palette_keeps_one_colour_per_colour():
    import io

    from PIL import Image
    frames = []
    for colour in [(255, 0, 0), (0, 0, 255)]:
        image = Image.new("RGB", (8, 4), (255, 255, 255))
        image.paste(colour, (0, 0, 4, 4))  # half white, half one colour
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        frames.append(buffer.getvalue())
    flat = shared_palette(frames, 4)
    a, b = [Image.open(io.BytesIO(png)).convert("RGB") for png in flat]
    white = (255, 255, 255)
    assert a.getpixel((7, 0)) == b.getpixel((7, 0)) == white  # shared: alike
    assert a.getpixel((0, 0)) == (255, 0, 0) and b.getpixel((0, 0)) == (0, 0, 255)


def figure_texts(fig) -> list[str]:
    """Every string a figure draws: titles, labels, named ticks (before rendering)."""
    from matplotlib.text import Text
    ticks = [t for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for t in axis.get_ticklabels()]
    return [t.get_text() for t in fig.findobj(Text) + ticks if t.get_text()]


def test_stage_figures_chinese_edition_no_glosses_same_numbers():
    """Issue #23: the Chinese frames drop 床 (bed) and every English word but code names
    and the kept term token; the numbers are the English frames' numbers."""
    import re

    import matplotlib.pyplot as plt

    from minimind.lab.shapes_lab import stage_figures
    from minimind.lab.viz import forward_stages
    from model_helpers import tiny_model
    tok = minimind.load_tokenizer("poetry-dense")
    model = tiny_model(vocab_size=6400)
    ids = [model.config.bos_token_id] + tok.encode("床前", add_special_tokens=False)
    stages = forward_stages(model, torch.tensor([ids]))
    names = ["embedding", "after block 0", "after block 1", "final norm"]
    glosses = {"床": "bed"}
    en, zh = (stage_figures(stages, names, tok, glosses, zh=z) for z in (False, True))
    assert len(en) == len(zh) == len(names) + 1  # the stages, then the guesses
    english = [figure_texts(f) for f in en]
    assert "床 (bed)" in english[0] and "RMS per token" in english[0]
    assert "after block 1 (layers.1 output)   [1, 3, 64]" in english[2]
    kept = {"embed_tokens", "layers", "lm_head", "logits", "token", "RMS", "im_start"}
    number = r"\d+(?:\.\d+)?"
    for en_texts, fig in zip(english, zh):
        chinese = figure_texts(fig)
        words = re.sub(r"\$.*?\$", "", " ".join(chinese))  # not the bar's $10^{2}$
        assert set(re.findall(r"[A-Za-z_]+", words)) <= kept, chinese
        assert "床" in chinese  # the token itself stays
        assert (sorted(re.findall(number, " ".join(chinese)))
                == sorted(re.findall(number, " ".join(en_texts))))
    plt.close("all")
