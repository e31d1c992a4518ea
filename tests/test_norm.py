import torch

from minimind.norm import RMSNorm


def test_matches_torch_rmsnorm():
    x = torch.randn(3, 5, 64)
    ours, ref = RMSNorm(64, eps=1e-6), torch.nn.RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_(), ref.weight.copy_(ours.weight)
    assert torch.allclose(ours(x), ref(x), atol=1e-6)


def test_equals_layernorm_on_zero_mean_input():
    x = torch.randn(4, 32)
    x = x - x.mean(-1, keepdim=True)
    ln = torch.nn.LayerNorm(32, eps=1e-6, elementwise_affine=False)
    assert torch.allclose(RMSNorm(32, eps=1e-6)(x), ln(x), atol=1e-5)


def test_unit_rms_and_dtype_kept():
    x = (torch.randn(2, 7, 96) * 30).to(torch.bfloat16)
    y = RMSNorm(96)(x)
    assert y.dtype == torch.bfloat16
    assert torch.allclose(y.float().pow(2).mean(-1).sqrt(), torch.ones(2, 7), atol=1e-2)


def test_eps_keeps_zero_vector_finite():
    assert torch.equal(RMSNorm(8)(torch.zeros(1, 8)), torch.zeros(1, 8))
    assert RMSNorm(8, eps=0.0)(torch.zeros(1, 8)).isnan().all()
