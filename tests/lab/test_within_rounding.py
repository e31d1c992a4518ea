"""lab.within_rounding: differences printed as verdicts, so a notebook's output is the same on every CPU."""
import math

from minimind.lab import within_rounding


def test_noise_below_the_bound_prints_only_the_bound():
    # 1.9e-06 and 2.9e-06 are what two CPUs printed for the same cell: both must read alike
    assert within_rounding(1.9e-6) == within_rounding(2.9e-6) == "≤ 1e-05 (float32 rounding)"
    assert within_rounding(0.0) == within_rounding(1e-5) == "≤ 1e-05 (float32 rounding)"
    assert within_rounding(3e-7, bound=1e-6, what="bf16") == "≤ 1e-06 (bf16)"


def test_a_real_difference_prints_one_digit():
    assert within_rounding(7.9e-2) == "= 8e-02"
    assert within_rounding(3.3) == "= 3e+00"
    assert within_rounding(2e-5) == "= 2e-05"  # just above the bound is not hidden
    assert within_rounding(-4e-3) == "= -4e-03"
    assert within_rounding(math.nan) == "= nan"  # never claims agreement for NaN
