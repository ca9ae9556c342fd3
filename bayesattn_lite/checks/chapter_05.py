"""Checks of the coding exercises of chapter 5 (one check per exercise, on the engine of ``_engine``)."""

import numbers

import numpy as np
import torch

from .. import em
from ._engine import DTYPE, Flaw, Output, Spec, generator, make_case, not_callable, run

__all__ = ["check_mixture_m_step"]


# ----------------------------------------------------------------------------- the M-step of a mixture

def _m_step(inp, mass="own", weights="shares", dim=True, squared=True):
    """(means, variance, weights) of the M-step from responsibilities: ``em.m_step`` when no knob is
    turned, else that answer with the usual mistakes: each mean divided by the number of points
    (``mass="n"``), the masses returned as weights (``weights="masses"``), the variance not divided by the
    dimension (``dim=False``) or averaged over distances instead of squared distances (``squared=False``)."""
    x, resp = inp["x"], inp["resp"]
    if mass == "own" and weights == "shares" and dim and squared:
        means, variance, shares = em.m_step(x, resp)
        return means, torch.tensor(variance, dtype=DTYPE), shares
    n, d = x.shape
    counts = resp.sum(0)
    means = resp.T @ x / (n if mass == "n" else counts[:, None])
    dist = torch.cdist(x, means)
    variance = (resp * (dist.pow(2) if squared else dist)).sum() / (n * (d if dim else 1))
    return means, variance, counts / n if weights == "shares" else counts


def _output(label, dims, index, formula, flaws, hint, **extra):
    return Output(label, dims, formula, lambda inp, **knobs: _m_step(inp, **knobs)[index], flaws, hint=hint, **extra)


_BY_N = Flaw("mass", "n", "each mean was divided by the number of points n. A mean is a responsibility-weighted "
                          "average of the points, so its divisor is the responsibility mass of its own component: "
                          "divided by n, a component that owns a tenth of the points lands a tenth of the way "
                          "from the origin to its points. The variance is off too: it is measured from those means.")

_MEANS = _output(
    "means", ("K", "d"), 0,
    "means = resp.T @ x / N[:, None] with N = resp.sum(0), the responsibility mass of each component",
    [_BY_N],
    "each component's mean is a weighted average of all n points, the weights being its column of resp.",
    transpose_hint="Transposed: one row per component, one column per coordinate (like em.m_step's means).",
)

_VARIANCE = _output(
    "variance", (), 1,
    "variance = (resp * torch.cdist(x, means) ** 2).sum() / (n * d), with the new means",
    [_BY_N,
     Flaw("dim", False, "the variance is d times too large: sigma^2 is the variance of ONE coordinate (the "
                        "covariance is sigma^2 times the identity), while a squared distance adds up all d "
                        "coordinates. Average over the coordinates as well as over the points."),
     Flaw("squared", False, "you averaged distances, not squared distances: a variance is a mean of squares "
                            "(torch.cdist returns the distance itself).")],
    "sigma^2 is shared by all components and all coordinates: a responsibility-weighted average of squared "
    "distances to the NEW means, per point and per coordinate.",
)

_WEIGHTS = _output(
    "weights", ("K",), 2,
    "weights = N / n with N = resp.sum(0): the share of the points each component owns",
    [Flaw("weights", "masses", "the mixing weights do not sum to 1: you returned each component's responsibility "
                               "mass, which sums to n. The weights are a distribution over the K components: the "
                               "share of the points each one owns.")],
    "the weights must be a distribution over the K components (non-negative, summing to 1).",
    shape_hints={("n",): "One weight per component, not per point: resp's rows (points) each sum to 1, so a "
                         "sum over the components gives n ones. Sum over the points instead (a column of resp)."},
)


def _m_step_spec():
    signature = {"x": ("n", "d"), "resp": ("n", "K")}
    cases = []
    for c, (n, d, K) in enumerate([(7, 3, 2), (9, 4, 5), (6, 5, 3), (11, 2, 4)]):  # n, d, K all differ
        gen = generator(1500 + c)
        x = 1.5 * torch.randn(n, d, generator=gen, dtype=DTYPE) + 0.5
        resp = torch.softmax(2.0 * torch.randn(n, K, generator=gen, dtype=DTYPE), dim=1)
        inputs = {"x": x, "resp": resp}
        cases.append(make_case(signature, inputs, _m_step(inputs), f"n={n} points, d={d}, K={K}"))
    return Spec("mixture_m_step", signature, [_MEANS, _VARIANCE, _WEIGHTS], cases,
                "x is (n, d) and resp (n, K): the points are the first axis of both, so a sum over the points "
                "contracts those two axes (one product with a transpose gives a (K, d) result).")


def _numbers_as_tensors(fn):
    """``fn`` with a plain number it returns (the variance, as ``em.m_step`` returns it) made a float64
    tensor, so that the engine compares it like the other outputs. Called inside the engine, so whatever
    ``fn`` raises still becomes a verdict."""
    fn = getattr(fn, "learner_function", fn)

    def call(*args):
        got = fn(*args)
        if isinstance(got, (tuple, list)):
            got = tuple(torch.tensor(float(v), dtype=DTYPE)
                        if isinstance(v, (numbers.Real, np.number)) and not isinstance(v, bool) else v
                        for v in got)
        return got

    return call


def check_mixture_m_step(fn):
    """Check ``fn(x, resp) -> (means, variance, weights)``: the M-step of a spherical Gaussian mixture with
    one shared variance, from the points x (n, d) and the responsibilities resp (n, K), as ``em.m_step``:
    means (K, d), the variance (a number or a 0-d tensor) and the mixing weights (K,)."""
    if (verdict := not_callable("mixture_m_step", ["x", "resp"], fn)) is not None:
        return verdict
    return run(_m_step_spec(), _numbers_as_tensors(fn))
