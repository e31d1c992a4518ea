import torch

from minimind.rope import apply_rotary_pos_emb, precompute_freqs_cis, rope_frequencies, rotate_half, yarn_ramp


def test_table_shapes_and_layout():
    cos, sin = precompute_freqs_cis(96, 32768, 1e6)
    assert cos.shape == sin.shape == (32768, 96)
    # exact: the two halves are one table concatenated twice, and cos(0) = 1
    assert torch.equal(cos[:, :48], cos[:, 48:]) and torch.equal(cos[0], torch.ones(96))
    # position x frequency rounded once in float32 (or computed in float64) before cos
    torch.testing.assert_close(cos[7, :48], torch.cos(7 * rope_frequencies(96, 1e6)),
                               atol=1e-6, rtol=0)


def test_rotate_half_is_complex_multiplication():
    x, angle = torch.randn(10, 16), torch.rand(16 // 2) * 6
    cos, sin = torch.cat([angle.cos()] * 2), torch.cat([angle.sin()] * 2)
    rotated = x * cos + rotate_half(x) * sin
    z = torch.complex(x[:, :8], x[:, 8:]) * torch.polar(torch.ones(8), angle)
    # complex multiplication against the real form: float32 rounding of products ~3
    torch.testing.assert_close(rotated, torch.cat([z.real, z.imag], -1), atol=1e-5, rtol=1e-5)


def test_dot_product_depends_only_on_distance():
    cos, sin = precompute_freqs_cis(32, 512, 1e4)
    q, k = torch.randn(1, 1, 1, 32), torch.randn(1, 1, 1, 32)

    def score(m, n):
        qm, _ = apply_rotary_pos_emb(q, q, cos[m:m + 1], sin[m:m + 1])
        _, kn = apply_rotary_pos_emb(k, k, cos[n:n + 1], sin[n:n + 1])
        return (qm * kn).sum()

    for m, n in [(5, 2), (105, 102), (300, 297)]:
        # equal in exact arithmetic; float32 angles m·θ lose digits as m grows (~3e-5 at 300)
        torch.testing.assert_close(score(m, n), score(3, 0), atol=1e-4, rtol=0)


def test_yarn_ramp_endpoints():
    ramp = yarn_ramp(96, 1e6, 2048, 32, 1)
    assert ramp[0] == 0 and ramp[-1] == 1 and (ramp.diff() >= 0).all()


def test_yarn_leaves_fast_pairs_and_divides_slow_ones():
    plain, _ = precompute_freqs_cis(96, 32768, 1e6)
    yarn_cos, _ = precompute_freqs_cis(96, 32768, 1e6, dict(original_max_position_embeddings=2048, factor=16,
                                                             beta_fast=32, beta_slow=1, attention_factor=1.0))
    assert torch.equal(plain[:, 0], yarn_cos[:, 0])  # exact: the fastest pair's frequency is untouched
    slow = 1 / 1e6 ** (94 / 96)
    # a small angle (~1e-3 rad) computed two ways in float32; cos is 1-Lipschitz
    torch.testing.assert_close(yarn_cos[16000, 47], torch.cos(torch.tensor(16000 * slow / 16)),
                               atol=1e-5, rtol=0)
