import torch

from minimind.norm import RMSNorm


def test_matches_torch_rmsnorm():
    x = torch.randn(3, 5, 64)
    ours, ref = RMSNorm(64, eps=1e-6), torch.nn.RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_(), ref.weight.copy_(ours.weight)
    # torch's own rms_norm kernel (fused on GPU) vs ours: a 64-term float32 mean and rsqrt, a few ulps (~5e-7)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-5)


def test_equals_layernorm_on_zero_mean_input():
    x = torch.randn(4, 32)
    x = x - x.mean(-1, keepdim=True)
    ln = torch.nn.LayerNorm(32, eps=1e-6, elementwise_affine=False)
    # LayerNorm subtracts its own float32 mean (~1e-8, not 0) and divides in its own kernel: ~1e-7 relative
    torch.testing.assert_close(RMSNorm(32, eps=1e-6)(x), ln(x), atol=1e-6, rtol=1e-5)


def test_unit_rms_and_dtype_kept():
    x = (torch.randn(2, 7, 96) * 30).to(torch.bfloat16)
    y = RMSNorm(96)(x)
    assert y.dtype == torch.bfloat16
    # each output is rounded to bfloat16 (relative error <= 2^-8 = 3.9e-3), so the RMS is within that of 1
    torch.testing.assert_close(y.float().pow(2).mean(-1).sqrt(), torch.ones(2, 7), atol=5e-3, rtol=0)


def test_eps_keeps_zero_vector_finite():
    assert torch.equal(RMSNorm(8)(torch.zeros(1, 8)), torch.zeros(1, 8))  # exact: 0 * rsqrt(eps) is 0
    assert RMSNorm(8, eps=0.0)(torch.zeros(1, 8)).isnan().all()
