"""MiniMind used the way any transformers model is used: Trainer, pipeline, and generate against Qwen3's own."""
import pytest
import torch
from transformers import Trainer, TrainingArguments, pipeline
from transformers.loss.loss_utils import ForCausalLMLoss

from model_helpers import LOGIT_TOL, TINY, assert_clear_greedy_path, path_logits, randomize_, tiny_config, tiny_model
from minimind import MiniMindForCausalLM, load_pretrained, load_tokenizer
from minimind.export import to_qwen3
from minimind.training.data import encode_poems, load_poems, pack


def test_output_is_indexable_and_dict_like(ids):
    out = tiny_model()(ids, labels=ids)
    assert out[0] is out.loss and out["logits"] is out.logits and out.to_tuple()[1] is out.logits


@pytest.mark.slow
def test_hf_trainer_lowers_the_loss_on_the_poetry_sample(tmp_path):
    tokenizer = load_tokenizer("poetry-dense")
    rows = pack(encode_poems(tokenizer, load_poems(), 64), 64)[:256]  # 256 rows of 64 tokens
    torch.manual_seed(0)
    model = MiniMindForCausalLM(tiny_config(vocab_size=len(tokenizer), max_position_embeddings=64))
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=30, per_device_train_batch_size=16,
                             learning_rate=3e-3, warmup_steps=3, logging_steps=5, save_strategy="no",
                             report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
    data = [{"input_ids": row, "labels": row} for row in rows]
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and losses[-1] < losses[0] - 1.0, losses  # ln(6400) = 8.76 at the start


def test_text_generation_pipeline_on_the_shipped_checkpoint():
    model, tokenizer = load_pretrained("poetry-dense"), load_tokenizer("poetry-dense")
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    prompt = "<|im_start|>床前明月光，"
    text = generator(prompt, max_new_tokens=12, do_sample=False)[0]["generated_text"]
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    ours = model.generate(ids, max_new_tokens=12, do_sample=False)
    continuation = tokenizer.decode(ours[0, ids.shape[1]:], skip_special_tokens=True)
    # exact: the pipeline calls this generate; its all-ones attention_mask takes the unmasked kernel path
    assert text == prompt + continuation and len(continuation) >= 6  # the pipeline keeps the prompt as typed


def left_padded_batch():
    """Three prompts of 11, 8 and 5 tokens, left-padded with 0 to 11."""
    g = torch.Generator().manual_seed(5)
    rows = [torch.randint(3, TINY["vocab_size"], (n,), generator=g) for n in (11, 8, 5)]
    ids = torch.stack([torch.cat([torch.zeros(11 - len(r), dtype=torch.long), r]) for r in rows])
    return ids, (ids != 0).long()


@pytest.mark.parametrize("use_moe", [False, True])
def test_greedy_generation_equals_transformers_qwen3(use_moe):
    model = randomize_(MiniMindForCausalLM(tiny_config(use_moe=use_moe)), seed=3).eval()
    twin = to_qwen3(model)
    ids, mask = left_padded_batch()
    greedy = dict(attention_mask=mask, do_sample=False, pad_token_id=0)
    plain = model.generate(ids, max_length=24, eos_token_id=None, **greedy)
    twins = twin.generate(ids, max_length=24, eos_token_id=None, output_logits=True, return_dict_in_generate=True,
                          **greedy)
    # the logits the twin chose from (its cache, positions from the mask) vs ours in one forward: fp32 rounding
    delta = (torch.stack(twins.logits, 1) - path_logits(model, plain, 11, mask)).abs().max()
    assert delta <= LOGIT_TOL, f"max |Δlogits| = {delta:.2e}"
    # exact tokens are fair: every step's top-2 lead (least 2.5e-2 dense, 4.5e-3 MoE) is far above LOGIT_TOL
    assert_clear_greedy_path(model, plain, 11, mask)
    assert torch.equal(plain, twins.sequences)
    eos = [int(plain[0, 13]), int(plain[2, 16])]  # two ids that really occur, so rows stop at different steps
    ours = model.generate(ids, max_new_tokens=12, eos_token_id=eos, **greedy)
    theirs = twin.generate(ids, max_new_tokens=12, eos_token_id=eos, **greedy)
    assert_clear_greedy_path(model, ours, 11, mask, eos)  # least lead 7.0e-2 dense, 4.9e-2 MoE
    assert torch.equal(ours, theirs) and (ours == 0).sum() > (ids == 0).sum()  # some rows padded after EOS
    ours = model.generate(ids, max_new_tokens=6, min_new_tokens=4, eos_token_id=eos, **greedy)
    assert_clear_greedy_path(model, ours, 11, mask, eos, min_new_tokens=4)  # least lead 1.8e-1 dense, 4.7e-2 MoE
    assert torch.equal(ours, twin.generate(ids, max_new_tokens=6, min_new_tokens=4, eos_token_id=eos, **greedy))


def test_trainer_optimises_the_moe_aux_loss_once(tmp_path, ids):
    model = tiny_model(use_moe=True).train()
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = Trainer(model=model, args=args)
    assert trainer.model_accepts_loss_kwargs  # so Trainer passes num_items_in_batch
    n = torch.tensor(3 * 20)  # as if three batches of 2 x 10 targets were accumulated
    batch = {"input_ids": ids, "labels": ids}
    loss = trainer.compute_loss(model, batch, num_items_in_batch=n)
    out = model(ids, labels=ids, num_items_in_batch=n)
    assert out.aux_loss > 0 and torch.equal(loss, out.loss)  # the same forward
    assert out.loss == out.lm_loss + out.aux_loss  # exact: the sum itself, counted once
    vocab = model.config.vocab_size
    expected = ForCausalLMLoss(out.logits, ids, vocab, num_items_in_batch=n)
    # fp32 sums of the same 20 token losses, in a different order
    torch.testing.assert_close(out.lm_loss, expected, rtol=1e-6, atol=0)
