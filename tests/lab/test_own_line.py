"""minimind.lab.own_line: the "try your own line" cells of intro and chapters 1, 4a, 6, 7."""
import pytest
import torch

import minimind
from minimind.lab import attention_lab, moe_lab, own_line, residual_lab
from minimind.lab.probes import router_choices


@pytest.fixture(scope="module")
def poetry():
    return minimind.load_pretrained("poetry-dense").eval(), minimind.load_tokenizer("poetry-dense")


def test_titles_follow_the_text():
    assert own_line.text_name("床前明月光，疑是地上霜。举头望明月，低头思故乡。") == "静夜思"
    assert own_line.text_name(" 春眠不觉晓，处处闻啼鸟。") == "「春眠不觉晓，…」"
    assert own_line.text_name("月") == "「月」"


def test_a_long_line_is_cut_with_a_note(poetry):
    _, tok = poetry
    ids, note = own_line.encode_line(tok, "月" * 30, 24)
    assert len(ids) == 24 and ids[0] == tok.bos_token_id and note == "31 tokens: only the first 24 are used"
    assert own_line.encode_line(tok, "月", 24)[1] == ""


def test_the_empty_box_writes_the_introduction_poem(poetry):
    model, tok = poetry
    start = torch.tensor([[tok.bos_token_id]])
    ids = model.generate(start, do_sample=True, temperature=0.8, top_p=0.9, max_new_tokens=64,
                         generator=torch.Generator().manual_seed(0))  # the introduction's own cell
    expected = tok.decode(ids[0], skip_special_tokens=True)
    assert own_line.write_poem(model, tok, "").replace("\n", "") == expected
    with pytest.raises(ValueError):
        own_line.write_poem(model, tok, "", top_p=0)


def test_the_head_picture_is_titled_by_its_line_and_equals_the_model(poetry, monkeypatch):
    model, tok = poetry
    seen = {}

    def spy(matrices, tokens, titles, **kwargs):
        seen.update(matrix=matrices[0], tokens=tokens, title=titles[0])
        return [b"png"]

    monkeypatch.setattr(attention_lab, "heatmap_frames", spy)
    assert own_line.head_picture(model, tok, "春眠不觉晓，", 2, 1) == b"png"
    assert seen["title"] == "「春眠不觉晓，」, layer 2, head 1" and seen["tokens"][0] == "<s>"
    ids = torch.tensor([[tok.bos_token_id] + tok.encode("春眠不觉晓，", add_special_tokens=False)])
    with torch.no_grad():
        expected = model(ids, output_attentions=True).attentions[2][0, 1]
    assert torch.equal(seen["matrix"], expected.float())
    with pytest.raises(ValueError, match="empty"):
        own_line.head_picture(model, tok, "  ")


def test_the_widget_redraws_on_a_new_line_and_shows_text_as_text():
    import ipywidgets as widgets
    calls = []

    def draw(text, n):
        calls.append((text, n))
        return f"<b>{text}</b> {n}"

    n = widgets.IntSlider(1)
    box = own_line.own_line(draw, "床", {"n": n})
    text_area, words = box.children[0], box.children[4]
    assert "&lt;b&gt;床&lt;/b&gt; 1" in words.value  # escaped: the reader's text never becomes HTML
    text_area.value, n.value = "月", 2
    assert calls == [("床", 1), ("月", 1), ("月", 2)]
    assert box._repr_mimebundle_()["text/plain"] == "<b>床</b> 1"


@pytest.fixture(scope="module")
def poetry_moe():
    model = minimind.load_pretrained("poetry-moe").eval()
    return model, minimind.load_tokenizer("poetry-moe")


def spy_on(monkeypatch, module, name):
    """Replace module.name by a recorder of its arguments that draws an empty figure."""
    import matplotlib.pyplot as plt
    seen = {}

    def spy(*args, **kwargs):
        seen.update(args=args, **kwargs)
        return plt.figure(figsize=(1, 1))

    monkeypatch.setattr(module, name, spy)
    return seen


def test_the_routing_picture_is_the_models_routing_titled_by_its_line(poetry_moe,
                                                                      monkeypatch):
    model, tok = poetry_moe
    seen = spy_on(monkeypatch, moe_lab, "routing_figure")
    assert own_line.routing_picture(model, tok, "春眠不觉晓，", 2).startswith(b"\x89PNG")
    layer, shares, texts, experts = seen["args"]
    assert layer == 2 and seen["title_right"] == "「春眠不觉晓，」, layer 2"
    ids = [tok.bos_token_id] + tok.encode("春眠不觉晓，", add_special_tokens=False)
    assert texts[0] == "<|im_start|>" and len(texts) == len(ids)
    with torch.no_grad():
        logits = model(torch.tensor([ids]), output_router_logits=True).router_logits[2]
    probs, chosen = router_choices(logits, 1)  # [S, E], [S, 1]
    assert experts == chosen[:, 0].tolist()
    # exact: the same float32 softmax, gathered at the same expert
    assert seen["probs"] == probs.gather(-1, chosen)[:, 0].tolist()
    counts = torch.bincount(chosen[:, 0], minlength=4).float() / len(ids)
    assert torch.equal(shares, counts) and seen["ymax"] >= shares.max().item()
    with pytest.raises(ValueError, match="empty"):
        own_line.routing_picture(model, tok, " ")


def test_a_long_line_is_routed_in_rows_with_a_note(poetry_moe, monkeypatch):
    model, tok = poetry_moe
    seen = spy_on(monkeypatch, moe_lab, "routing_figure")
    own_line.routing_picture(model, tok, "月" * 50, 0)
    assert len(seen["args"][2]) == 48
    assert "51 tokens: only the first 48" in seen["title_right"]
    assert seen["max_columns"] == 14


def test_the_lens_picture_reads_the_models_stream_titled_by_its_line(poetry,
                                                                     monkeypatch):
    model, tok = poetry
    seen = spy_on(monkeypatch, residual_lab, "lens_figure")
    line = "春眠不觉晓，处处"
    own_line.lens_picture(model, tok, line)
    name, probs, guesses, points, labels = seen["args"]
    assert name == "「春眠不觉晓，…」" and seen["point"] is None
    assert points == residual_lab.lens_labels(model.config.num_hidden_layers)
    ids = [tok.bos_token_id] + tok.encode(line, add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, 1:]  # [S - 1, vocab]: after BOS
    # the last point is the model's own output: 1e-5 covers the separate softmax
    assert torch.allclose(probs[-1, :, 0], logits.softmax(-1).amax(-1), atol=1e-5)
    assert labels == [tok.decode([i]) for i in ids[1:]] and seen["actual"][-1] == ""
    assert seen["highlight"] == [labels.index("晓")]  # the next token is the comma
    own_line.lens_picture(model, tok, line, "after block 1")
    assert seen["point"] == 2
    with pytest.raises(ValueError, match="empty"):
        own_line.lens_picture(model, tok, "")
    with pytest.raises(ValueError, match="no point"):
        own_line.lens_picture(model, tok, line, "after block 9")
