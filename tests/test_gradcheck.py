"""bayesattn_lite.gradcheck: bad inputs name the argument (the references themselves: test_attention.py)."""

import pytest
import torch

from bayesattn_lite import gradcheck


@pytest.mark.parametrize("call, name", [
    (lambda: gradcheck.finite_difference("f", torch.randn(3), (0,)), "f"),
    (lambda: gradcheck.finite_difference(lambda t: "loss", torch.randn(3), (0,)), "f"),
    (lambda: gradcheck.finite_difference(lambda t: t, torch.randn(3), (0,)), "f"),
    (lambda: gradcheck.finite_difference(lambda t: t.sum(), torch.randn(3), (5,)), "index"),
    (lambda: gradcheck.finite_difference(lambda t: t.sum(), torch.randn(3), (0,), eps=0), "eps"),
    (lambda: gradcheck.relative_error(torch.tensor([float("nan")]), torch.tensor([1.0])), "a"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"{name}.*expected"):
        call()


def test_scalar_results_of_any_kind_are_accepted():
    t = torch.randn(3, dtype=torch.float64)
    for f in (lambda t: t.sum(), lambda t: t.sum().reshape(1), lambda t: float(t.sum())):
        assert abs(gradcheck.finite_difference(f, t, (1,), eps=1e-4) - 1.0) < 1e-8


def test_finite_difference_refuses_nan_in_and_out_but_takes_a_masked_score():
    """NaN in the tensor, or an f that returns NaN or inf, used to give NaN as the derivative."""
    t = torch.tensor([0.5, float("-inf")], dtype=torch.float64)   # a masked score is -inf
    assert gradcheck.finite_difference(lambda s: torch.logsumexp(s, 0), t, 0) == pytest.approx(1.0, abs=1e-8)
    with pytest.raises(ValueError, match="tensor: expected no NaN entries"):
        gradcheck.finite_difference(lambda s: s.sum(), torch.tensor([1.0, float("nan")], dtype=torch.float64), 0)
    with pytest.raises(ValueError, match="f: expected a function returning a finite number"):
        gradcheck.finite_difference(lambda s: s.sum() * float("nan"), torch.tensor([0.5, 1.0], dtype=torch.float64), 0)
