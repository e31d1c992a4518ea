"""MiniMindConfig: every size and switch of the model in one object (chapter 1)."""
import math

from transformers import PretrainedConfig

YARN_DEFAULTS = {
    "beta_fast": 32, "beta_slow": 1, "factor": 16,
    "original_max_position_embeddings": 2048, "attention_factor": 1.0, "type": "yarn",
}


class MiniMindConfig(PretrainedConfig):
    """Hyper-parameters of MiniMind; the defaults are the 63.9M "minimind-3" model.

    Field names and defaults follow MiniMind's `model_minimind.py`, so its `config.json` files load unchanged.
    """
    model_type = "minimind"

    def __init__(
        self,
        hidden_size=768,
        num_hidden_layers=8,
        use_moe=False,
        vocab_size=6400,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=None,
        intermediate_size=None,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        inference_rope_scaling=None,
        dropout=0.0,
        flash_attn=True,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
        num_experts=4,
        num_experts_per_tok=1,
        moe_intermediate_size=None,
        norm_topk_prob=True,
        router_aux_loss_coef=5e-4,
        rope_scaling=None,
        **kwargs,
    ):
        super().__init__(bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         tie_word_embeddings=tie_word_embeddings, **kwargs)
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.use_moe = use_moe
        self.vocab_size = vocab_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim if head_dim is not None else _default_head_dim(hidden_size, num_attention_heads)
        # region ffn width
        # Widen by pi, then round up to a multiple of 64: 768 -> ceil(2412.7 / 64) * 64 = 2432.
        self.intermediate_size = intermediate_size or math.ceil(hidden_size * math.pi / 64) * 64
        # endregion
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.inference_rope_scaling = yarn_switch(inference_rope_scaling, rope_scaling)
        self.dropout = dropout
        self.flash_attn = flash_attn
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.moe_intermediate_size = moe_intermediate_size or self.intermediate_size
        self.norm_topk_prob = norm_topk_prob
        self.router_aux_loss_coef = router_aux_loss_coef
        check_config(self)

    @property
    def yarn(self):
        """YaRN parameters when `inference_rope_scaling` is on, else None (chapter 3)."""
        if not self.inference_rope_scaling:
            return None
        if isinstance(self.inference_rope_scaling, dict):
            return check_yarn({**YARN_DEFAULTS, **self.inference_rope_scaling})
        return dict(YARN_DEFAULTS)

    @property
    def rope_scaling(self):
        """Upstream MiniMind's name for the same dict: the YaRN parameters, or None."""
        return self.yarn


def yarn_switch(inference_rope_scaling, rope_scaling):
    """The YaRN switch (False, True or overrides), reconciled with `rope_scaling`.

    Upstream MiniMind's config.json carries both, rope_scaling derived from the switch.
    """
    if rope_scaling is None:
        return inference_rope_scaling or False
    if not isinstance(rope_scaling, dict):
        raise ValueError(f"rope_scaling must be a dict (YaRN), got {rope_scaling!r}")
    if inference_rope_scaling is False:
        raise ValueError("rope_scaling asks for YaRN but inference_rope_scaling=False")
    types = {rope_scaling.get("type"), rope_scaling.get("rope_type")} - {None}
    if len(types) > 1:
        raise ValueError(f"rope_scaling names two types: {sorted(types)}")
    given = {k: v for k, v in rope_scaling.items() if k != "rope_type"}
    given["type"] = types.pop() if types else None
    params = check_yarn({**YARN_DEFAULTS, **given})
    if isinstance(inference_rope_scaling, dict):
        switch = check_yarn({**YARN_DEFAULTS, **inference_rope_scaling})
        differ = sorted(k for k in params if params[k] != switch[k])
        if differ:
            raise ValueError(f"rope_scaling, inference_rope_scaling differ on {differ}")
    return True if params == YARN_DEFAULTS else params


def check_yarn(params: dict) -> dict:
    """Raise a ValueError naming a YaRN parameter MiniMind cannot use; else params."""
    unknown = sorted(set(params) - set(YARN_DEFAULTS))
    if unknown:
        raise ValueError(f"unsupported YaRN parameters {unknown}")
    if params["type"] != "yarn":
        raise ValueError(f"rope scaling type {params['type']!r} is not 'yarn'")
    if not params["factor"] >= 1:
        raise ValueError(f"YaRN factor must be >= 1, got {params['factor']}")
    if not params["original_max_position_embeddings"] > 0:
        raise ValueError("YaRN original_max_position_embeddings must be > 0, got "
                         f"{params['original_max_position_embeddings']}")
    return params


def _default_head_dim(hidden_size, num_attention_heads):
    if num_attention_heads <= 0 or hidden_size % num_attention_heads:
        raise ValueError(
            f"hidden_size={hidden_size} is not divisible by num_attention_heads={num_attention_heads}, "
            "so the hidden vector cannot be split into equal heads; pass head_dim explicitly or change one of them")
    return hidden_size // num_attention_heads


def check_config(config):
    """Raise a ValueError naming the first inconsistent field."""
    problems = []
    if config.num_key_value_heads <= 0 or config.num_attention_heads % config.num_key_value_heads:
        problems.append(f"num_attention_heads={config.num_attention_heads} is not divisible by "
                        f"num_key_value_heads={config.num_key_value_heads} (GQA shares each KV head "
                        "among an equal group of query heads)")
    if config.head_dim % 2:
        problems.append(f"head_dim={config.head_dim} is odd; RoPE rotates pairs of dimensions")
    if config.use_moe and not 0 < config.num_experts_per_tok <= config.num_experts:
        problems.append(f"num_experts_per_tok={config.num_experts_per_tok} must be in 1..num_experts={config.num_experts}")
    if problems:
        raise ValueError("; ".join(problems))
    if isinstance(config.inference_rope_scaling, dict):
        check_yarn({**YARN_DEFAULTS, **config.inference_rope_scaling})
