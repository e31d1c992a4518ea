import pytest
import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, TemperatureLogitsWarper

from model_helpers import assert_clear_greedy_path, tiny_model
from minimind.sampling import ban_tokens

GREEDY = dict(do_sample=False, eos_token_id=None)


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
    assert_clear_greedy_path(model, cached, 11)  # least lead 1.2e-2 (dense), 3.0e-2 (MoE): exact tokens are fair
    assert cached.shape == (2, 23) and torch.equal(cached, uncached)


def test_input_ids_keyword_as_in_transformers(ids):
    model = tiny_model()
    greedy = dict(max_new_tokens=3, do_sample=False, eos_token_id=None)
    assert torch.equal(model.generate(input_ids=ids, **greedy), model.generate(ids, **greedy))  # the same calls


def test_greedy_equals_argmax_of_full_forward(ids):
    model = tiny_model()
    out = model.generate(ids, max_new_tokens=3, do_sample=False, eos_token_id=None)
    # cached steps vs one full forward: each token its argmax, by a lead (least 7.5e-2) no rounding can overturn
    assert_clear_greedy_path(model, out, 11)


def test_sampling_is_reproducible_with_a_generator(ids):
    model = tiny_model()
    sample = dict(max_new_tokens=8, do_sample=True, temperature=0.9, eos_token_id=None)
    a = model.generate(ids, generator=torch.Generator().manual_seed(3), **sample)
    b = model.generate(ids, generator=torch.Generator().manual_seed(3), **sample)
    c = model.generate(ids, generator=torch.Generator().manual_seed(4), **sample)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_rows_stop_at_eos_and_keep_emitting_it_without_pad(ids):
    model = tiny_model()
    greedy = model.generate(ids, max_new_tokens=6, **GREEDY)
    eos = int(greedy[0, 12])  # row 0's second new token becomes "EOS"
    out = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=eos)  # the same forwards up to EOS
    assert (out[0, 12:] == eos).all()
    assert out.shape[1] <= 17


def test_num_return_sequences_and_streamer(ids):
    streamer = Collect()
    out = tiny_model().generate(ids, max_new_tokens=4, num_return_sequences=3, do_sample=True, eos_token_id=None,
                                streamer=streamer)
    assert out.shape == (6, 15) and streamer.ended and len(streamer.chunks) == 5
    # transformers' order (the pipeline relies on it): row 0 three times, then row 1 three times
    assert torch.equal(out[:3, :11], ids[:1].expand(3, -1)) and torch.equal(out[3:, :11], ids[1:].expand(3, -1))


def test_bad_knobs_fail_before_any_work(ids):
    with pytest.raises(ValueError, match="temperature must be > 0"):
        tiny_model().generate(ids, do_sample=True, temperature=0.0)


def test_max_length_counts_the_prompt_and_max_new_tokens_wins(ids):
    model = tiny_model()
    assert model.generate(ids, max_length=15, **GREEDY).shape == (2, 15)
    assert model.generate(ids, max_length=15, max_new_tokens=2, **GREEDY).shape == (2, 13)
    assert model.generate(ids, **GREEDY).shape == (2, 20)  # transformers' global default max_length
    with pytest.raises(ValueError, match="max_length=11 leaves no room after a prompt of 11 tokens"):
        model.generate(ids, max_length=11)


def test_min_new_tokens_holds_back_every_eos(ids):
    model = tiny_model()
    greedy = model.generate(ids, max_new_tokens=8, **GREEDY)
    eos = [int(greedy[0, 11]), int(greedy[1, 11])]  # each row's first greedy token
    early = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=eos, pad_token_id=0)
    assert early.shape == (2, 12)
    held = model.generate(ids, max_new_tokens=8, min_new_tokens=3, do_sample=False, eos_token_id=eos)
    assert not torch.isin(held[:, 11:14], torch.tensor(eos)).any() and held.shape[1] >= 14
    by_length = model.generate(ids, max_new_tokens=8, min_length=14, do_sample=False, eos_token_id=eos)
    assert torch.equal(by_length, held)  # the same settings once resolved: the same calls


def test_a_list_of_eos_ids_and_pad(ids):
    model = tiny_model()
    greedy = model.generate(ids, max_new_tokens=8, **GREEDY)
    eos = [int(greedy[0, 12]), int(greedy[1, 14])]
    stops = [next(j for j in range(11, 19) if greedy[r, j] in eos) for r in range(2)]  # each row's first EOS
    assert stops[0] != stops[1]  # so one row is padded while the other runs on
    out = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=eos, pad_token_id=0)
    assert out.shape == (2, max(stops) + 1)
    # exact: the same batched forwards of the same shapes; a padded row's tokens do not reach the other row
    for row, stop in enumerate(stops):
        assert torch.equal(out[row, :stop + 1], greedy[row, :stop + 1]) and (out[row, stop + 1:] == 0).all()


def test_defaults_come_from_the_generation_config(ids):
    model = tiny_model()
    model.generation_config = GenerationConfig(max_new_tokens=3, eos_token_id=None, do_sample=False)
    assert model.generate(ids).shape == (2, 14)
    assert model.generate(ids, max_new_tokens=5).shape == (2, 16)  # an argument wins
    passed = GenerationConfig(max_new_tokens=4)  # a passed config wins over the model's, its gaps filled from it
    assert model.generate(ids, generation_config=passed).shape == (2, 15)
    assert passed.eos_token_id is None and passed.do_sample is None  # the caller's config is not modified


@pytest.mark.parametrize("argument", [dict(num_beams=4), dict(stop_strings=["。"]), dict(penalty_alpha=0.6),
                                      dict(return_dict_in_generate=True), dict(output_scores=True),
                                      dict(logits_processor=LogitsProcessorList([TemperatureLogitsWarper(0.5)])),
                                      dict(assistant_model="x"), dict(no_repeat_ngram_size=2), dict(typo_here=1)])
def test_unimplemented_arguments_are_named(ids, argument):
    name = next(iter(argument))
    with pytest.raises(NotImplementedError, match=f"does not implement {name}="):
        tiny_model().generate(ids, max_new_tokens=2, **argument)


def test_arguments_at_their_defaults_are_fine(ids):
    model = tiny_model()
    plain = model.generate(ids, max_new_tokens=2, **GREEDY)
    same = model.generate(ids, max_new_tokens=2, num_beams=1, logits_processor=None, stop_strings=None,
                          output_scores=False, tokenizer=None, **GREEDY)
    assert torch.equal(plain, same)  # the defaults change nothing: the same calls


@pytest.mark.parametrize("use_moe", [False, True])
def test_generate_continues_a_filled_dynamic_cache(ids, use_moe):
    model = tiny_model(use_moe=use_moe)
    cache = DynamicCache()
    with torch.no_grad():
        model(ids[:, :7], past_key_values=cache, use_cache=True)
    out = model.generate(ids, past_key_values=cache, max_new_tokens=5, **GREEDY)
    assert_clear_greedy_path(model, out, 11)  # least lead 7.5e-2 (dense), 3.0e-2 (MoE): a 7 + 4 prefill may round
    assert torch.equal(out, model.generate(ids, max_new_tokens=5, **GREEDY))  # apart from an 11-token one
    assert cache.get_seq_length() == 11 + 4  # the cache grew as generation went (the last token is not fed)


def test_a_cache_that_holds_the_whole_prompt_is_refused(ids):
    model = tiny_model()
    with torch.no_grad():
        past = model(ids, use_cache=True).past_key_values
    with pytest.raises(ValueError, match="already holds 11 positions but input_ids has only 11"):
        model.generate(ids, past_key_values=past, max_new_tokens=2)


def test_no_prompt_starts_from_bos():
    model = tiny_model()
    out = model.generate(max_new_tokens=3, **GREEDY)
    assert out.shape == (1, 4) and out[0, 0] == model.generation_config.bos_token_id


def test_ban_tokens():
    logits = torch.zeros(2, 5)
    banned = ban_tokens(logits, [1, 3])
    assert torch.isinf(banned[:, [1, 3]]).all() and (banned[:, [0, 2, 4]] == 0).all()
    assert ban_tokens(logits, []) is logits
