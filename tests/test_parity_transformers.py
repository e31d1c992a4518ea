"""MiniMind against an independent implementation: transformers' Qwen3 / Qwen3-MoE (same architecture family)."""
import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from model_helpers import tiny_model
from minimind.rope import precompute_freqs_cis, yarn_frequencies

TOL = 1e-5


def qwen3_kwargs(config, rope_parameters=None):
    return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
                num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
                max_position_embeddings=config.max_position_embeddings, rms_norm_eps=config.rms_norm_eps,
                tie_word_embeddings=True, hidden_act="silu",
                rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": config.rope_theta})


def dense_reference(model, rope_parameters=None):
    config = Qwen3Config(intermediate_size=model.config.intermediate_size,
                         **qwen3_kwargs(model.config, rope_parameters))
    reference = Qwen3ForCausalLM._from_config(config, attn_implementation="eager").eval()
    reference.load_state_dict(model.state_dict(), strict=True)
    return reference


def moe_reference(model):
    c = model.config
    config = Qwen3MoeConfig(num_experts=c.num_experts, num_experts_per_tok=c.num_experts_per_tok,
                            moe_intermediate_size=c.moe_intermediate_size, norm_topk_prob=c.norm_topk_prob,
                            decoder_sparse_step=1, mlp_only_layers=[], **qwen3_kwargs(c))
    reference = Qwen3MoeForCausalLM._from_config(config, attn_implementation="eager").eval()
    state = {k: v for k, v in model.state_dict().items() if ".experts." not in k}
    for i, layer in enumerate(model.model.layers):  # per-expert Linears -> transformers' stacked expert tensors
        experts = layer.mlp.experts
        state[f"model.layers.{i}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([e.gate_proj.weight, e.up_proj.weight]) for e in experts])
        state[f"model.layers.{i}.mlp.experts.down_proj"] = torch.stack([e.down_proj.weight for e in experts])
    reference.load_state_dict(state, strict=True)
    return reference


@torch.no_grad()
def test_dense_logits_match_qwen3(ids):
    model = tiny_model()
    delta = (model(ids).logits - dense_reference(model)(ids).logits).abs().max()
    assert delta <= TOL, f"max |Δlogits| = {delta:.2e}"


@torch.no_grad()
def test_moe_logits_match_qwen3_moe(ids):
    for top_k in (1, 2):
        model = tiny_model(use_moe=True, num_experts_per_tok=top_k)
        reference = moe_reference(model)
        ours = model(ids).logits
        assert ours.abs().mean() > 0.1  # weights are large enough that a mismatch would show
        delta = (ours - reference(ids).logits).abs().max()
        assert delta <= TOL, f"top_k={top_k}: max |Δlogits| = {delta:.2e}"


def yarn_parameters(config):
    y = config.yarn
    return {"rope_type": "yarn", "rope_theta": config.rope_theta, "factor": y["factor"],
            "original_max_position_embeddings": y["original_max_position_embeddings"],
            "beta_fast": y["beta_fast"], "beta_slow": y["beta_slow"], "attention_factor": y["attention_factor"]}


def test_yarn_tables_match_transformers():
    model = tiny_model(inference_rope_scaling=True, max_position_embeddings=32768)
    c = model.config
    config = Qwen3Config(**qwen3_kwargs(c, yarn_parameters(c)))
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    freqs, attn_factor = yarn_frequencies(c.head_dim, c.rope_theta, c.max_position_embeddings, c.yarn)
    assert torch.equal(freqs, inv_freq) and attn_factor == attention_factor
    # Tables: float32 angles t * theta lose ~t * 6e-8 rad, so compare where that is below the tolerance.
    positions = 4096
    angles = torch.outer(torch.arange(positions).float(), inv_freq)
    cos, sin = precompute_freqs_cis(c.head_dim, c.max_position_embeddings, c.rope_theta, c.yarn)
    assert (cos[:positions] - torch.cat([angles.cos(), angles.cos()], -1) * attention_factor).abs().max() <= TOL
    assert (sin[:positions] - torch.cat([angles.sin(), angles.sin()], -1) * attention_factor).abs().max() <= TOL


@pytest.mark.parametrize("head_dim, base, original, factor", [
    (64, 1e4, 256, 2), (64, 1e6, 256, 4), (96, 1e6, 2048, 16), (96, 5e5, 4096, 32), (128, 1e4, 2048, 4)])
def test_yarn_frequencies_are_bit_identical_to_transformers(head_dim, base, original, factor):
    """Same float steps as transformers, so an exported model's tables are the same bits (not just close)."""
    yarn = {"factor": factor, "original_max_position_embeddings": original, "beta_fast": 32.0, "beta_slow": 1.0}
    config = Qwen3Config(head_dim=head_dim, max_position_embeddings=original * factor,
                         rope_parameters={"rope_type": "yarn", "rope_theta": base, "attention_factor": 1.0, **yarn})
    inv_freq, _ = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    assert torch.equal(yarn_frequencies(head_dim, base, original * factor, yarn)[0], inv_freq)


@torch.no_grad()
def test_yarn_model_matches_qwen3_with_yarn(ids):
    model = tiny_model(inference_rope_scaling=True, max_position_embeddings=32768)
    reference = dense_reference(model, yarn_parameters(model.config))
    delta = (model(ids).logits - reference(ids).logits).abs().max()
    assert delta <= TOL, f"max |Δlogits| = {delta:.2e}"



def uneven_positions(seq_len):
    """[2, S] position_ids that are no shift of 0..S-1 (RoPE sees only differences):
    row 0 counts in threes from 500, row 1 restarts at 0 halfway."""
    steps = torch.arange(seq_len)
    half = seq_len // 2
    restarted = torch.cat([steps[:half], steps[:seq_len - half]])
    return torch.stack([500 + 3 * steps, restarted])


@torch.no_grad()
def test_position_ids_match_qwen3(ids):
    model = tiny_model(max_position_embeddings=1024)
    reference = dense_reference(model)
    plain = model(ids).logits
    shifted = ids.new_tensor(range(ids.shape[1]))[None].expand_as(ids) + 500
    uneven = uneven_positions(ids.shape[1])
    for positions in (shifted, uneven, uneven[:1]):  # [1, S] serves every row
        ours = model(ids, position_ids=positions).logits
        theirs = reference(ids, position_ids=positions).logits
        delta = (ours - theirs).abs().max()
        # fp32 rounding of two implementations
        assert delta <= TOL, f"max |Δlogits| = {delta:.2e}"
    # a shift turns every query and key alike: the logits move by rounding only (fp32
    # angles near position 500 lose ~500 * 6e-8 rad); uneven positions change them
    shifted_delta = (model(ids, position_ids=shifted).logits - plain).abs().max()
    assert shifted_delta <= 1e-4
    assert (model(ids, position_ids=uneven).logits - plain).abs().max() > 1e-2


@torch.no_grad()
def test_position_ids_with_a_cache_equal_the_full_forward(ids):
    model = tiny_model(max_position_embeddings=1024)
    positions = uneven_positions(ids.shape[1])
    full = model(ids, position_ids=positions).logits
    out = model(ids[:, :7], position_ids=positions[:, :7], use_cache=True)
    steps = [out.logits]
    for t in range(7, ids.shape[1]):
        out = model(ids[:, t:t + 1], past_key_values=out.past_key_values,
                    use_cache=True, position_ids=positions[:, t:t + 1])
        steps.append(out.logits)
    # fp32 rounding: one SDPA call over 11 keys against one call per step
    assert (torch.cat(steps, 1) - full).abs().max() <= TOL


@pytest.mark.parametrize("use_moe", [False, True])
@torch.no_grad()
def test_hidden_states_match_qwen3(ids, use_moe):
    model = tiny_model(use_moe=use_moe)
    reference = moe_reference(model) if use_moe else dense_reference(model)
    ours = model(ids, output_hidden_states=True).hidden_states
    theirs = reference(ids, output_hidden_states=True).hidden_states
    assert len(ours) == len(theirs) == model.config.num_hidden_layers + 1
    for layer, (a, b) in enumerate(zip(ours, theirs)):
        delta = (a - b).abs().max()
        # fp32 rounding of two implementations
        assert delta <= TOL, f"hidden_states[{layer}]: max |Δ| = {delta:.2e}"
    # without the flag: the final, normed states as one tensor, the tuple's last entry
    assert torch.equal(model(ids).hidden_states, ours[-1])  # the same computation
