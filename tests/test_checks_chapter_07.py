"""The check of chapter 7's exercise on the error in bits (``checks.check_kl_bits``): the reference
passes, each usual mistake is named in words, and a function that raises or returns nonsense gets a
readable verdict, never a traceback."""

import math

import numpy as np
import pytest
import torch

from bayesattn_lite import checks, comparison, converged, diagnostics, wind_tunnels
from checking import failed


def _kl(logits, posterior, mask, bits=True, forward=True, normalise=True, scored_only=True, xlogy=True):
    """The learner's answer, right by default, with one of the usual mistakes on request."""
    log_q = torch.log_softmax(logits, -1) if normalise else logits
    if forward:
        p_log_p = torch.xlogy(posterior, posterior) if xlogy else posterior * torch.log(posterior)
        kl = (p_log_p - torch.where(posterior > 0, posterior * log_q, torch.zeros_like(posterior))).sum(-1)
    else:
        q = log_q.exp()
        kl = (q * (log_q - torch.log(posterior))).sum(-1)
    kl = kl[mask].mean() if scored_only else kl.mean()
    return (kl / (math.log(2) if bits else 1.0)).item()


def test_kl_bits_reference_numpy_and_tensor_answers_pass():
    result = checks.check_kl_bits(_kl)
    assert result and "✅" in result._repr_markdown_() and "3 problems" in result.message
    assert checks.check_kl_bits(lambda *args: torch.tensor(_kl(*args), dtype=torch.float64))
    assert checks.check_kl_bits(lambda *args: np.float64(_kl(*args)))


@pytest.mark.parametrize("mistake, phrases", [
    ({"bits": False}, ["in nats", "ln 2"]),
    ({"forward": False}, ["wrong direction", "weighted by the posterior"]),
    ({"normalise": False}, ["logits were used as log-probabilities", "last axis"]),
    ({"scored_only": False}, ["averaged over every position", "mask is True"]),
])
def test_kl_bits_mistakes_are_named(mistake, phrases):
    failed(checks.check_kl_bits(lambda *args: _kl(*args, **mistake)), *phrases)


def test_kl_bits_two_mistakes_at_once_are_both_named():
    failed(checks.check_kl_bits(lambda *args: _kl(*args, bits=False, normalise=False)),
           "two mistakes at once", "in nats", "log-probabilities")


def test_kl_bits_zero_log_zero_and_one_number_per_position_are_explained():
    failed(checks.check_kl_bits(lambda *args: _kl(*args, xlogy=False)), "nan where the posterior rules a value out",
           "xlogy", "problem 2 of 3")
    def per_position(logits, posterior, mask):
        return torch.log_softmax(logits, -1)[..., 0][mask]

    failed(checks.check_kl_bits(per_position), "expected shape ()", "one number for the whole batch")


def test_kl_bits_unknown_mistake_points_at_the_package_function():
    failed(checks.check_kl_bits(lambda *args: 2 * _kl(*args)), "you returned", "diagnostics.kl_bits")


def raises(logits, posterior, mask):
    return (logits @ posterior).sum()   # (B, T, C) @ (B, T, C): a shape error


@pytest.mark.parametrize("fn, phrases", [
    (raises, ["your function raised RuntimeError", "B = 3 sequences"]),
    (lambda logits, posterior, mask: None, ["got None", "return"]),
    (lambda logits, posterior, mask: "0.5 bits", ["got str"]),
    (lambda logits: 0.0, ["raised TypeError"]),
])
def test_kl_bits_never_raises(fn, phrases):
    failed(checks.check_kl_bits(fn), *phrases)


def test_kl_bits_check_is_exported_and_agrees_with_the_chapters_evaluation():
    assert "check_kl_bits" in checks.__all__
    # on a real wind-tunnel batch the reference is what comparison.evaluate reports as kl_bits
    task = wind_tunnels.wind_tunnel("bijection", "small")
    model = converged.load_pretrained("transformer", "bijection", 0)
    batch = task.sample(32, seed=comparison.EVAL_SEED)
    with torch.no_grad():
        logits = model(batch.tokens).double()
    mine = _kl(logits, batch.posterior.double(), batch.mask)
    assert mine == pytest.approx(diagnostics.kl_bits(logits, batch).item(), rel=1e-9)
    assert mine == pytest.approx(comparison.evaluate(model, task, n_seqs=32)["kl_bits"], rel=1e-5)
