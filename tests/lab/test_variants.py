import torch

from minimind import MiniMindConfig, MiniMindForCausalLM
from minimind.feed_forward import FeedForward
from minimind.lab.variants import (GELUFeedForward, PostNormBlock, ffn_parameters, gelu_mlp_model, gelu_width,
                                   post_norm_model, untied_model)
from model_helpers import random_ids, randomize_, tiny_config


def count(model):
    return sum(p.numel() for p in model.parameters())  # parameters() lists a tied weight once


def test_gelu_width_matches_swiglu_parameters_for_the_default_model():
    config = MiniMindConfig()
    assert gelu_width(config.intermediate_size) == 3648 == 1.5 * 2432
    with torch.device("meta"):
        base, gelu = MiniMindForCausalLM(config), gelu_mlp_model(config)
    assert count(base) == count(gelu) == 63_912_192
    assert ffn_parameters(base) == ffn_parameters(gelu) == 8 * 3 * 768 * 2432
    assert gelu_width(832) == 1280 and gelu_width(832, multiple_of=32) == 1248  # 1.5 * 832 is not a multiple of 64


def test_gelu_model_swaps_every_mlp_and_computes_down_gelu_up():
    config = tiny_config(intermediate_size=128)
    torch.manual_seed(0)
    base = MiniMindForCausalLM(config)
    torch.manual_seed(0)
    model = gelu_mlp_model(config)
    assert all(type(b.mlp) is GELUFeedForward and b.mlp.up_proj.out_features == 192 for b in model.model.layers)
    assert not any(isinstance(m, FeedForward) for m in model.modules())
    assert count(model) == count(base)
    # weights it shares with MiniMind start identical; the new matrices get transformers' N(0, 0.02) init
    # exact: the same seed and the same init calls, in the same order
    assert torch.equal(model.model.embed_tokens.weight, base.model.embed_tokens.weight)
    assert torch.equal(model.model.layers[1].self_attn.q_proj.weight, base.model.layers[1].self_attn.q_proj.weight)
    # statistics, not rounding: the std of 12288 N(0, 0.02^2) draws is 0.02 +- 1.3e-4 (1 sigma)
    assert abs(model.model.layers[0].mlp.up_proj.weight.std().item() - 0.02) < 0.002
    mlp, x = model.model.layers[0].mlp, torch.randn(2, 3, 64)
    expected = x @ mlp.up_proj.weight.T
    expected = torch.nn.functional.gelu(expected) @ mlp.down_proj.weight.T
    # exact: nn.Linear without bias is the same matmul x @ W^T, then the same gelu kernel (dropout is off)
    assert torch.equal(mlp(x), expected)
    out = model(random_ids(), labels=random_ids())
    assert out.logits.shape == (2, 11, 320) and torch.isfinite(out.loss)


def test_gelu_model_swaps_moe_experts():
    config = tiny_config(use_moe=True, moe_intermediate_size=128)
    model = gelu_mlp_model(config)
    base = MiniMindForCausalLM(config)
    assert all(type(e) is GELUFeedForward for b in model.model.layers for e in b.mlp.experts)
    assert count(model) == count(base)
    out = model(random_ids(), output_router_logits=True)
    assert len(out.router_logits) == config.num_hidden_layers


def test_post_norm_block_order_and_names():
    config = tiny_config()
    torch.manual_seed(0)
    base = MiniMindForCausalLM(config)
    torch.manual_seed(0)
    model = post_norm_model(config)
    assert all(type(b) is PostNormBlock for b in model.model.layers)
    assert isinstance(model.model.norm, torch.nn.Identity)
    base_state, state = base.state_dict(), model.state_dict()
    assert set(base_state) - set(state) == {"model.norm.weight"} and set(state) <= set(base_state)
    assert all(torch.equal(state[k], base_state[k]) for k in state)  # same starting weights: exact, same seed
    assert count(base) - count(model) == config.hidden_size
    randomize_(model)
    block, x = model.model.layers[0], torch.randn(2, 5, 64)
    pos = (model.model.freqs_cos[:5], model.model.freqs_sin[:5])
    attn = block.self_attn(x, pos)[0]
    h = block.input_layernorm(x + attn)
    expected = block.post_attention_layernorm(h + block.mlp(h))
    # exact: the block's own modules, called in the same order on the same input
    assert torch.equal(block(x, pos)[0], expected)
    # every block's output is normalised: RMS over hidden = RMS of the gain when gains are 1
    torch.nn.init.ones_(block.post_attention_layernorm.weight)
    rms = block(x, pos)[0].pow(2).mean(-1).sqrt()
    # RMSNorm's eps (1e-6) against a mean square of order 1 lowers the RMS by ~5e-7; float32 adds ~1e-7
    torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-5, rtol=0)


def test_post_norm_model_cache_equals_full_forward():
    model = randomize_(post_norm_model(tiny_config())).eval()
    ids = random_ids()
    full = model(ids).logits
    first = model(ids[:, :7], use_cache=True)
    step = model(ids[:, 7:], past_key_values=first.past_key_values).logits
    # cached step vs full forward: other attention and matmul shapes, 2 layers of float32 on logits ~6 (~1.4e-6)
    torch.testing.assert_close(step, full[:, 7:], atol=1e-5, rtol=1e-5)


def test_untied_model_has_its_own_lm_head(tmp_path):
    config = tiny_config()
    tied, untied = MiniMindForCausalLM(config), untied_model(config)
    assert config.tie_word_embeddings and tied.lm_head.weight is tied.model.embed_tokens.weight
    head, embed = untied.lm_head.weight, untied.model.embed_tokens.weight
    assert head is not embed and head.data_ptr() != embed.data_ptr() and not torch.equal(head, embed)
    assert count(untied) - count(tied) == 320 * 64
    untied(random_ids(), labels=random_ids()).loss.backward()
    assert head.grad is not None and embed.grad is not None and not torch.equal(head.grad, embed.grad)
    untied.save_pretrained(tmp_path)
    loaded = MiniMindForCausalLM.from_pretrained(tmp_path)
    assert not loaded.config.tie_word_embeddings and loaded.lm_head.weight is not loaded.model.embed_tokens.weight
    # exact: safetensors stores float32 bit for bit
    assert torch.equal(loaded.lm_head.weight, head) and torch.equal(loaded.model.embed_tokens.weight, embed)


def test_moe_variants_are_config_options():
    ids = random_ids()
    for options in [dict(num_experts_per_tok=2), dict(norm_topk_prob=False), dict(router_aux_loss_coef=0.0)]:
        model = MiniMindForCausalLM(tiny_config(use_moe=True, **options)).train()
        out = model(ids, labels=ids)
        assert torch.isfinite(out.loss)
        # exact: a coefficient of 0 times a finite loss is 0; any other coefficient gives a positive loss
        assert (out.aux_loss.item() == 0) == (options.get("router_aux_loss_coef", 1) == 0)
