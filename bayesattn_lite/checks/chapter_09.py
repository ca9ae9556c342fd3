"""Checks of the coding exercises of chapter 9 (one check per exercise, on the engine of ``_engine``).

- ``check_advantage_share``  the monitor's advantage share of one head, from its attention and
                             compatibility maps (``monitor.summarise``'s ``advantage_share``)
- ``check_settle_step``      the settle step of a change rate against its own peak, with the rule that
                             a settled state must last (``diagnostics.settle`` without smoothing)

Both answers are numbers (``Spec`` with ``numbers=True``): a float, a 0-d tensor or array; nan (or
None, for the settle step) stands for "none".
"""

import math

import numpy as np
import torch

from .. import attention, diagnostics, monitor
from ._engine import DTYPE, Flaw, Output, Spec, generator, make_case, not_callable, peaked_attention, run

__all__ = ["check_advantage_share", "check_settle_step"]


# ----------------------------------------------------------------------------- advantage share

def _advantage_share(inp, **knobs):
    """The share with knobs, as a 0-d float64 array (what the engine compares)."""
    return np.asarray(_share(inp, **knobs), dtype=float)


def _share(inp, weighted=True, absolute=True, absolute_b=True, per_query=False, centre="attended"):
    """The share with knobs; without knobs it is the monitor's own (``monitor.summarise``)."""
    alpha, b = inp["alpha"], inp["b"]
    if weighted and absolute and absolute_b and not per_query and centre == "attended":
        # b = u v^T with u = b and v = the identity: the monitor's summary of these maps, as one head
        T = b.shape[-1]
        v = torch.eye(T, dtype=b.dtype).expand(b.shape[0], T, T)
        _, _, stats = monitor.summarise(alpha[:, None], b[:, None], v[:, None])
        return stats["advantage_share"]
    if centre == "attended":
        _, advantage = attention.score_gradient(alpha, b)
    else:  # the plain mean of b over the keys the query sees
        visible = (alpha > 0).to(b.dtype)
        advantage = (b * visible).sum(-1, keepdim=True) / visible.sum(-1, keepdim=True) - b
    size_a = advantage.abs() if absolute else advantage
    size_b = b.abs() if absolute_b else b
    if weighted:
        size_a, size_b = alpha * size_a, alpha * size_b
    if per_query:
        return float((size_a.sum(-1) / size_b.sum(-1)).mean())
    return float(size_a.sum() / size_b.sum())


_SHARE = Output(
    "advantage_share", (),
    "the definition of the advantage share in the chapter's list of summaries (monitor.summarise's "
    "advantage_share)",
    _advantage_share,
    [Flaw("absolute", False, "your share is zero: without the absolute value of the advantage, the "
          "attention-weighted advantages of every query add up to exactly 0 (the exercise above). The share "
          "measures their size, not their sum."),
     Flaw("weighted", False, "the attention weights are missing: you added up |A| and |b| over every key, "
          "masked ones included. A key moves a query's attention through its score gradient, which carries "
          "the weight alpha_ij: weight both the numerator and the denominator by alpha."),
     Flaw("per_query", True, "you averaged one ratio per query. The share is one ratio of two sums over all "
          "sequences, queries and keys, so that the queries with a large compatibility count more (and a "
          "query whose b is tiny cannot swing it)."),
     Flaw("centre", "mean", "the advantage is measured from the wrong centre: you subtracted b from the plain "
          "mean of b over the visible keys. The advantage of a key is its distance from the *attended* mean, "
          "the mean of b under the query's own attention row."),
     Flaw("absolute_b", False, "the denominator has no absolute value: compatibilities of both signs cancel in "
          "the sum of alpha * b, so the share can exceed 1 or turn negative. Both sums measure sizes: "
          "|A| above, |b| below.")],
    hint="both sums run over every sequence, query and key, and both weigh a key by the query's attention to it; "
         "the numerator adds up sizes of advantages, the denominator sizes of compatibilities.",
)


def _advantage_share_spec():
    signature = {"alpha": ("B", "T", "T"), "b": ("B", "T", "T")}
    cases = []
    for n, (B, T) in enumerate([(2, 5), (3, 7), (1, 6), (4, 4)]):
        gen = generator(9100 + n)
        alpha = torch.stack([peaked_attention(T, n + m, gen) for m in range(B)])  # causal and full rows mixed
        b = torch.randn(B, T, T, generator=gen, dtype=DTYPE) * torch.rand(B, T, 1, generator=gen, dtype=DTYPE) * 3
        inputs = {"alpha": alpha, "b": b}
        causal = sum(bool((a.triu(1) == 0).all()) for a in alpha)
        about = f"B={B} sequences of T={T}, {causal} of them causal"
        cases.append(make_case(signature, inputs, [_advantage_share(inputs)], about))
    return Spec("advantage_share", signature, [_SHARE], cases, numbers=True)


def check_advantage_share(fn):
    """Check ``fn(alpha, b) -> share`` (a number): the monitor's advantage share of one head, from attention
    maps ``alpha`` (B, T, T) (rows sum to 1; zeros where the causal mask hides a key) and compatibility maps
    ``b`` (B, T, T), b_ij = u_i . v_j (``monitor.summarise``'s ``advantage_share``)."""
    return run(_advantage_share_spec(), fn)


# ----------------------------------------------------------------------------- settle step

def _settle_step(inp, **knobs):
    """The settle step with knobs, as a 0-d float64 array (nan: not settled)."""
    return np.asarray(_settle(inp, **knobs), dtype=float)


def _settle(inp, stays=True, relative="peak", min_span=True, after_last_above=True):
    """The settle step with knobs; without knobs it is ``diagnostics.settle`` with no smoothing."""
    steps, rates, fraction, span = inp["steps"], inp["rates"], float(inp["fraction"]), float(inp["min_span"])
    if stays and relative == "peak" and min_span and after_last_above:
        result = diagnostics.settle(steps, rates, fractions=(fraction,), window=1, min_span=span)
        at = result["settled"][fraction]
        return math.nan if at is None else float(at)
    k = int(np.argmax(rates))
    threshold = fraction * (rates[k] if relative == "peak" else rates[0])
    below = rates[k:] < threshold
    if stays:
        above = np.nonzero(~below)[0]
        if above[-1] == len(below) - 1:
            return math.nan
        at = above[-1] + (1 if after_last_above else 0)
    else:
        if not below.any():
            return math.nan
        at = int(np.argmax(below))
    step = float(steps[k + at])
    latest = steps[-1] - span * (steps[-1] - steps[0])
    return math.nan if min_span and step > latest else step


_SETTLE = Output(
    "settle step", (),
    "diagnostics.settle(steps, rates, fractions=(fraction,), window=1, min_span=min_span)['settled'][fraction] "
    "(nan or None: not settled)",
    _settle_step,
    [Flaw("stays", False, "you returned the first step at which the rate dips below the threshold. A settled "
          "rate must *stay* below it to the end of the run: a later bump above the threshold resets the clock, "
          "so look for the last record above it."),
     Flaw("relative", "first", "the threshold is a fraction of the first rate, not of the rate's own peak. A "
          "rate often starts low and rises (warm-up, attention that has not yet found anything), so its peak is "
          "the scale to compare with."),
     Flaw("min_span", False, "the minimum span is ignored: a settle step in the last min_span of the run "
          "(measured from steps[0] to steps[-1]) is a dip that had no time to last, and counts as not settled."),
     Flaw("after_last_above", False, "one record too early: you returned the last step at which the rate is "
          "still at or above the threshold. The rate settles at the record *after* it, the first one from which "
          "it stays below.")],
)


def _settle_cases():
    """(steps, rates, fraction, min_span, what the problem is): each one tells a mistake from the answer."""
    t = np.arange(1, 41) * 10.0                                   # records every 10 steps, from step 10
    rise_fall = np.where(t < 60, 0.02 + t / 600, 0.12 * np.exp(-(t - 60) / 60)) + 0.002
    bump = rise_fall.copy()
    bump[18] = 0.3 * bump.max()                                   # above 20% of the peak once, after a dip
    late = np.concatenate([np.linspace(0.05, 1.0, 5), np.linspace(0.9, 0.25, 30), [0.15, 0.12, 0.1, 0.1, 0.1]])
    never = 0.5 + 0.4 * np.exp(-np.arange(30) / 8)
    floor = np.concatenate([[0.3, 0.6, 1.0], 1.0 * np.exp(-np.arange(1, 25) / 4) + 0.08])
    return [
        (t, bump, 0.2, 0.2, "a rate that dips below 20% of its peak, then rises above it once more"),
        (np.arange(0, 400, 10.0), late, 0.2, 0.2, "a rate that falls below 20% of its peak only in the last fifth"),
        (np.arange(50, 1550, 50.0), never, 0.2, 0.3, "a rate that never falls far from its peak"),
        (np.arange(0, 27, 1.0) * 20, floor, 0.1, 0.25, "a rate that rises, falls and levels off at a floor; "
                                                      "fraction 0.1, min_span 0.25"),
    ]


def _settle_step_spec():
    signature = {"steps": ("n",), "rates": ("n",), "fraction": (), "min_span": ()}
    cases = []
    for steps, rates, fraction, span, about in _settle_cases():
        inputs = {"steps": steps, "rates": rates, "fraction": fraction, "min_span": span}
        cases.append(make_case(signature, inputs, [_settle_step(inputs)], about))
    return Spec("settle_step", signature, [_SETTLE], cases, numbers=True)


def check_settle_step(fn):
    """Check ``fn(steps, rates, fraction, min_span) -> step``: the first step after the peak of ``rates``
    from which the rate stays below ``fraction`` x its peak to the end of the run, or None (nan) when there
    is none or when it comes later than ``steps[-1] - min_span * (steps[-1] - steps[0])``
    (``diagnostics.settle`` with ``window=1``, i.e. no smoothing)."""
    if (verdict := not_callable("settle_step", ["steps", "rates", "fraction", "min_span"], fn)) is not None:
        return verdict
    learner = getattr(fn, "learner_function", fn)
    answers = []

    def none_is_nan(*args):  # "not settled" may be None, as diagnostics.settle says it
        got = learner(*args)
        answers.append(got)
        return math.nan if got is None else got

    none_is_nan.__name__ = getattr(learner, "__name__", "settle_step")
    result = run(_settle_step_spec(), none_is_nan)
    if not result and answers and all(a is None for a in answers):
        result.message = ("your function returned None (not settled) on every problem, but some of these rates do "
                          "settle: does it end with `return step`? The first difference: " + result.message)
    return result
