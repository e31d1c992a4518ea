import pytest
import torch

from model_helpers import tiny_model


class Collect:
    def __init__(self):
        self.chunks, self.ended = [], False

    def put(self, ids):
        self.chunks.append(ids)

    def end(self):
        self.ended = True


@pytest.mark.parametrize("use_moe", [False, True])
def test_greedy_same_with_and_without_cache(ids, use_moe):
    model = tiny_model(use_moe=use_moe)
    cached = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None)
    uncached = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, use_cache=False)
    assert cached.shape == (2, 23) and torch.equal(cached, uncached)


def test_input_ids_keyword_as_in_transformers(ids):
    model = tiny_model()
    greedy = dict(max_new_tokens=3, do_sample=False, eos_token_id=None)
    assert torch.equal(model.generate(input_ids=ids, **greedy), model.generate(ids, **greedy))


def test_greedy_equals_argmax_of_full_forward(ids):
    model = tiny_model()
    out = model.generate(ids, max_new_tokens=3, do_sample=False, eos_token_id=None)
    for t in range(3):
        with torch.no_grad():
            expected = model(out[:, :11 + t]).logits[:, -1].argmax(-1)
        assert torch.equal(out[:, 11 + t], expected)


def test_sampling_is_reproducible_with_a_generator(ids):
    model = tiny_model()
    a = model.generate(ids, max_new_tokens=8, generator=torch.Generator().manual_seed(3), eos_token_id=None)
    b = model.generate(ids, max_new_tokens=8, generator=torch.Generator().manual_seed(3), eos_token_id=None)
    assert torch.equal(a, b)


def test_rows_stop_at_eos_and_keep_emitting_it(ids):
    model = tiny_model()
    greedy = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None)
    eos = int(greedy[0, 12])  # row 0's second new token becomes "EOS"
    out = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=eos)
    assert (out[0, 12:] == eos).all()
    assert out.shape[1] <= 17


def test_num_return_sequences_and_streamer(ids):
    streamer = Collect()
    out = tiny_model().generate(ids, max_new_tokens=4, num_return_sequences=3, eos_token_id=None, streamer=streamer)
    assert out.shape == (6, 15) and streamer.ended and len(streamer.chunks) == 5
    assert torch.equal(out[:2, :11], ids) and torch.equal(out[4:, :11], ids)


def test_bad_knobs_fail_before_any_work(ids):
    with pytest.raises(ValueError, match="temperature must be > 0"):
        tiny_model().generate(ids, temperature=0.0)
