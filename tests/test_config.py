import json
import math

import pytest

from minimind import MiniMindConfig


def test_defaults_are_minimind_3():
    c = MiniMindConfig()
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (768, 8, 8, 4)
    assert c.head_dim == 96 and c.vocab_size == 6400 and c.rms_norm_eps == 1e-6 and c.rope_theta == 1e6
    assert c.intermediate_size == 2432 == math.ceil(768 * math.pi / 64) * 64
    assert c.max_position_embeddings == 32768 and c.tie_word_embeddings and c.dropout == 0.0
    assert (c.bos_token_id, c.eos_token_id) == (1, 2)
    assert (c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size) == (4, 1, 2432)
    assert c.norm_topk_prob and c.router_aux_loss_coef == 5e-4
    assert c.yarn is None


def test_yarn_defaults():
    y = MiniMindConfig(inference_rope_scaling=True).yarn
    assert y == {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 2048,
                 "attention_factor": 1.0, "type": "yarn"}


def test_round_trip(tmp_path):
    MiniMindConfig(hidden_size=512, use_moe=True).save_pretrained(tmp_path)
    c = MiniMindConfig.from_pretrained(tmp_path)
    assert c.hidden_size == 512 and c.use_moe and c.head_dim == 64 and c.intermediate_size == 1664


@pytest.mark.parametrize("kwargs, message", [
    (dict(hidden_size=770), "hidden_size=770 is not divisible by num_attention_heads=8"),
    (dict(num_key_value_heads=3), "num_attention_heads=8 is not divisible by num_key_value_heads=3"),
    (dict(head_dim=95), "head_dim=95 is odd"),
    (dict(use_moe=True, num_experts_per_tok=5), "num_experts_per_tok=5 must be in 1..num_experts=4"),
])
def test_inconsistent_sizes_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MiniMindConfig(**kwargs)



UPSTREAM_YARN = {  # what upstream's config.json carries as rope_scaling when YaRN is on
    "beta_fast": 32, "beta_slow": 1, "factor": 16,
    "original_max_position_embeddings": 2048, "attention_factor": 1.0, "type": "yarn"}


@pytest.mark.parametrize("switch, rope_scaling", [(False, None), (True, UPSTREAM_YARN)])
def test_upstream_config_json_loads(tmp_path, switch, rope_scaling):
    fields = {"inference_rope_scaling": switch, "rope_scaling": rope_scaling,
              "model_type": "minimind"}
    (tmp_path / "config.json").write_text(json.dumps(fields))
    c = MiniMindConfig.from_pretrained(tmp_path)
    assert c.yarn == c.rope_scaling
    assert c.yarn == MiniMindConfig(inference_rope_scaling=switch).yarn


def test_rope_scaling_sets_the_yarn_parameters(tmp_path):
    c = MiniMindConfig(rope_scaling={"rope_type": "yarn", "factor": 4, "beta_fast": 16})
    assert c.yarn == {**UPSTREAM_YARN, "factor": 4, "beta_fast": 16}
    overrides = MiniMindConfig(inference_rope_scaling={"factor": 4, "beta_fast": 16})
    assert c.yarn == overrides.yarn
    c.save_pretrained(tmp_path)  # saved as inference_rope_scaling, read back the same
    assert MiniMindConfig.from_pretrained(tmp_path).yarn == c.yarn
    both = MiniMindConfig(inference_rope_scaling={"factor": 4},
                          rope_scaling={"type": "yarn", "factor": 4})
    assert both.yarn["factor"] == 4


YARN_4 = {"type": "yarn", "factor": 4}


@pytest.mark.parametrize("kwargs, message", [
    (dict(rope_scaling={**YARN_4, "factor": 0.5}), "YaRN factor must be >= 1, got 0.5"),
    (dict(inference_rope_scaling={"factor": 0.5}), "YaRN factor must be >= 1, got 0.5"),
    (dict(rope_scaling={"type": "linear", "factor": 2}), "type 'linear' is not 'yarn'"),
    (dict(rope_scaling={"rope_type": "dynamic"}), "type 'dynamic' is not 'yarn'"),
    (dict(rope_scaling={"factor": 2}), "rope scaling type None is not 'yarn'"),
    (dict(rope_scaling={**YARN_4, "mscale": 1}), "unsupported YaRN parameters"),
    (dict(rope_scaling="yarn"), "rope_scaling must be a dict"),
    (dict(rope_scaling=UPSTREAM_YARN, inference_rope_scaling=False),
     "rope_scaling asks for YaRN but inference_rope_scaling=False"),
    (dict(rope_scaling=YARN_4, inference_rope_scaling={"factor": 8}),
     r"rope_scaling, inference_rope_scaling differ on \['factor'\]"),
])
def test_bad_rope_scaling_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MiniMindConfig(**kwargs)
