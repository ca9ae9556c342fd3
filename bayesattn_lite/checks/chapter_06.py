"""Checks of the coding exercises of chapter 6 (one check per exercise, on the engine of ``_engine``).

- ``check_forward_filter``: the exact Bayes predictor of a hidden Markov chain seen through Gaussian
  noise, as a forward filter: for every position t, p(s_{t+1} | x_0..x_t). The reference is the
  package's ``tasks.StickyMarkovChain.posterior``, run on the problem's own symbol means and
  transition matrix; the problems use transition matrices that are *not* symmetric (the sticky
  chain's is), so that a transposed propagation shows.
"""

import numpy as np
import torch

from .. import tasks
from ._engine import LEARNER_ERRORS, CheckResult, Flaw, Output, Spec, make_case, rng, run

__all__ = ["check_forward_filter"]


# ----------------------------------------------------------------------------- forward filter (chapter 6)

def _package_filter(x, means, P, noise):
    """The package's exact predictor, ``StickyMarkovChain.posterior``, on these means and this P.

    The chain is built with the problem's sizes and noise, then given the problem's symbol means and
    transition matrix (the two attributes ``posterior`` reads), so any row-stochastic P can be used."""
    n, d = np.shape(means)
    chain = tasks.StickyMarkovChain(n_symbols=n, d_embed=d, noise=float(noise))
    chain.means = torch.as_tensor(np.asarray(means, dtype=np.float64))
    chain.transition_matrix = np.asarray(P, dtype=np.float64)
    return chain.posterior(torch.as_tensor(np.asarray(x, dtype=np.float64))).numpy()


def _filter_with(x, means, P, noise, step="next", transpose=False, normalise=True, variance=True):
    """The forward filter with one knob turned: the mistakes the check recognises.

    ``step="current"`` records the belief about the current symbol instead of the next one;
    ``transpose`` propagates with P.T; ``normalise=False`` never divides the belief by its sum
    ("plain": likelihoods exp(-|x - mu|^2 / 2 sigma^2); "gauss": with the Gaussian density's constant);
    ``variance=False`` divides the squared distance by 2 sigma instead of 2 sigma^2."""
    x, means, P = (np.asarray(a, dtype=np.float64) for a in (x, means, P))
    n, d = means.shape
    spread = noise**2 if variance else noise
    sq = ((x[:, None, :] - means[None, :, :]) ** 2).sum(-1)                # (T, n)
    if normalise is True:
        lik = np.exp(-(sq - sq.min(axis=1, keepdims=True)) / (2 * spread))  # shifted: the shift cancels
    else:
        lik = np.exp(-sq / (2 * spread))
        if normalise == "gauss":
            lik = lik / (2 * np.pi * spread) ** (d / 2)
    move = P.T if transpose else P
    prior, out = np.full(n, 1.0 / n), np.empty((len(x), n))
    for t in range(len(x)):
        belief = prior * lik[t]
        if normalise is True:
            belief = belief / belief.sum()
        prior = belief @ move
        out[t] = belief if step == "current" else prior
    return out


def _forward_filter(inp, **knobs):
    args = (inp["x"], inp["means"], inp["P"], inp["noise"])
    return _filter_with(*args, **knobs) if knobs else _package_filter(*args)


_FORWARD = Output(
    "p", ("T", "n"),
    "tasks.StickyMarkovChain.posterior: row t is p(s_{t+1} | x_0..x_t), a belief that starts uniform, is "
    "updated with each x_t and then moved one step through the chain",
    _forward_filter,
    [Flaw("step", "current",
          "you returned the belief about the current symbol s_t (after seeing x_t), but the exercise asks for "
          "the next symbol s_{t+1}: the target is y_t = s_{t+1}. Carry the belief one step through the chain "
          "before you record row t."),
     Flaw("transpose", True,
          "the belief moved with the transpose of P. P[i, j] is the probability of going from i to j, so a "
          "belief over the current symbol spreads along the rows of P: it is a row vector on the left of P, "
          "summed over the current symbol i. (The sticky chain's P is symmetric, which hides this mistake "
          "there; the check's matrices are not.)"),
     Flaw("normalise", False,
          "the rows do not sum to 1: the belief is never divided by its sum, so each row also carries the "
          "probability of the observations seen so far. Renormalise the belief after each update with x_t "
          "(this also keeps a long sequence from underflowing to 0)."),
     Flaw("normalise", "gauss",
          "the rows do not sum to 1: the belief is never divided by its sum, so each row also carries the "
          "probability of the observations seen so far. Renormalise the belief after each update with x_t "
          "(this also keeps a long sequence from underflowing to 0)."),
     Flaw("variance", False,
          "the noise enters the likelihood with the wrong power: `noise` is the standard deviation of the "
          "observation noise, and a Gaussian's exponent divides the squared distance by twice the variance.")],
)

_NOT_NORMALISED = _FORWARD.flaws[2].words


def _forward_filter_spec():
    signature = {"x": ("T", "d"), "means": ("n", "d"), "P": ("n", "n"), "noise": ()}
    draw = rng(601)
    cases = []
    for T, n, d, noise in [(6, 3, 4, 0.8), (7, 5, 2, 1.5), (5, 4, 6, 0.7)]:   # T, n, d all differ
        P = draw.uniform(0.05, 1.0, size=(n, n)) + 2.0 * np.eye(n)             # sticky, and not symmetric
        P = P / P.sum(axis=1, keepdims=True)
        means = draw.standard_normal((n, d))
        s = [int(draw.integers(n))]
        for _ in range(T - 1):
            s.append(int(draw.choice(n, p=P[s[-1]])))
        x = means[s] + noise * draw.standard_normal((T, d))
        inputs = {"x": x, "means": means, "P": P, "noise": noise}
        cases.append(make_case(signature, inputs, [_forward_filter(inputs)],
                               f"T={T} positions, n={n} symbols, d={d}, noise {noise}"))
    return Spec("forward_filter", signature, [_FORWARD], cases, numbers=True)


def _rows_proportional(fn, spec):
    """True when ``fn`` answers every problem with rows that are positive multiples of the reference's
    rows (a filter that never renormalises, whatever constant its likelihoods carry). Never raises."""
    fn = getattr(fn, "learner_function", fn)
    try:
        for case in spec.cases:
            got = fn(*(np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in case.inputs.values()))
            if isinstance(got, torch.Tensor):
                got = got.detach().cpu().double().numpy()
            got, right = np.asarray(got, dtype=float), case.expected[0]
            if got.shape != right.shape or not np.isfinite(got).all() or (got <= 0).any():
                return False
            scale = got.sum(axis=1, keepdims=True)
            if np.allclose(scale, 1.0) or not np.allclose(got / scale, right, rtol=1e-6, atol=1e-9):
                return False
        return True
    except LEARNER_ERRORS:  # the learner's function may raise anything: that is no evidence either way
        return False


def check_forward_filter(fn):
    """Check ``fn(x, means, P, noise) -> p`` (T, n): row t is the exact predictive distribution of the next
    symbol, p(s_{t+1} = j | x_0..x_t), of a hidden Markov chain with transition matrix ``P`` (n, n), a
    uniform belief over s_0, and observations x_t = means[s_t] + noise * N(0, I) (``x`` (T, d), ``means``
    (n, d)); the reference is ``tasks.StickyMarkovChain.posterior``. Numpy in, numbers out."""
    spec = _forward_filter_spec()
    result = run(spec, fn)
    if not result.passed and _NOT_NORMALISED not in result.message and _rows_proportional(fn, spec):
        return CheckResult(spec.name, False, _NOT_NORMALISED)
    return result
