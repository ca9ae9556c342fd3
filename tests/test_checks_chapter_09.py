"""The checks of chapter 9's coding exercises: the reference passes, each usual mistake is named in words,
and a function that raises or returns the wrong thing gets a readable verdict (never a traceback)."""

import math

import numpy as np
import pytest
import torch

from bayesattn_lite import attention, checks, diagnostics, monitor
from checking import failed


def test_the_checks_are_exported():
    assert {"check_advantage_share", "check_settle_step"} <= set(checks.__all__)


# ----------------------------------------------------------------------------- advantage share

def share(alpha, b, weighted=True, absolute=True, absolute_b=True, per_query=False, centre="attended"):
    """A learner's advantage share, with the usual mistakes as switches."""
    if centre == "attended":
        mean = (alpha * b).sum(-1, keepdim=True)
    else:
        visible = (alpha > 0).to(b.dtype)
        mean = (b * visible).sum(-1, keepdim=True) / visible.sum(-1, keepdim=True)
    advantage = mean - b
    a, c = (advantage.abs() if absolute else advantage), (b.abs() if absolute_b else b)
    if weighted:
        a, c = alpha * a, alpha * c
    if per_query:
        return (a.sum(-1) / c.sum(-1)).mean()
    return a.sum() / c.sum()


def test_advantage_share_reference_passes_as_a_tensor_a_float_or_an_array():
    assert checks.check_advantage_share(share)
    assert checks.check_advantage_share(lambda alpha, b: share(alpha, b).item())
    assert checks.check_advantage_share(lambda alpha, b: share(alpha, b).numpy())


def test_advantage_share_is_the_monitors_summary_on_a_real_head():
    gen = torch.Generator().manual_seed(0)
    alpha = torch.softmax(torch.randn(3, 2, 6, 6, generator=gen, dtype=torch.float64)
                          .masked_fill(~attention.causal_mask(6), float("-inf")), -1)
    u = torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64)
    b, _, stats = monitor.summarise(alpha, u, v)
    assert math.isclose(float(share(alpha, b)), stats["advantage_share"], rel_tol=1e-12)


@pytest.mark.parametrize("fn, phrases", [
    (lambda a, b: share(a, b, absolute=False), ["your share is zero", "add up to exactly 0"]),
    (lambda a, b: share(a, b, weighted=False), ["attention weights are missing"]),
    (lambda a, b: share(a, b, per_query=True), ["one ratio per query"]),
    (lambda a, b: share(a, b, centre="mean"), ["wrong centre", "*attended* mean"]),
    (lambda a, b: share(a, b, absolute_b=False), ["denominator has no absolute value"]),
    (lambda a, b: share(a, b, weighted=False, per_query=True), ["two mistakes at once", "attention weights",
                                                                "one ratio per query"]),
    (lambda a, b: 2 * share(a, b), ["on problem 1", "Hint: both sums", "list of summaries"]),
    (lambda a, b: a * b, ["expected shape ()"]),
    (lambda a, b: 1 / 0, ["raised ZeroDivisionError"]),
    (lambda a: a, ["raised TypeError", "positional argument"]),
    (lambda a, b: None, ["None"]),
])
def test_advantage_share_mistakes_are_named(fn, phrases):
    failed(checks.check_advantage_share(fn), *phrases)


def test_a_number_that_matches_no_known_mistake_is_not_given_an_index():
    message = failed(checks.check_advantage_share(lambda a, b: 2 * share(a, b))).message
    assert "you returned" in message and "at index" not in message


def test_advantage_share_check_does_not_touch_the_callers_data_or_pass_on_an_inplace_edit():
    def inplace(alpha, b):
        alpha.zero_()  # the learner's function scribbles over its inputs: the check's copies suffer, not the check
        return torch.tensor(0.5, dtype=torch.float64)
    failed(checks.check_advantage_share(inplace))
    assert checks.check_advantage_share(share)


# ----------------------------------------------------------------------------- settle step

def settle_right(steps, rates, fraction, min_span):
    return diagnostics.settle(steps, rates, fractions=(fraction,), window=1, min_span=min_span)["settled"][fraction]


def settle_mine(steps, rates, fraction, min_span, stays=True, relative="peak", span=True, shift=1):
    """A learner's loop, with the usual mistakes as switches; None when not settled."""
    steps, rates = np.asarray(steps), np.asarray(rates)
    k = int(np.argmax(rates))
    threshold = fraction * (rates[k] if relative == "peak" else rates[0])
    at = None
    if stays:
        for i in range(len(rates) - 1, k - 1, -1):
            if rates[i] >= threshold:
                at = None if i == len(rates) - 1 else steps[i + shift]
                break
    else:
        at = next((steps[i] for i in range(k, len(rates)) if rates[i] < threshold), None)
    if at is not None and span and at > steps[-1] - min_span * (steps[-1] - steps[0]):
        return None
    return at


def test_settle_step_reference_passes_with_none_or_nan_for_not_settled():
    assert checks.check_settle_step(settle_right)
    assert checks.check_settle_step(settle_mine)
    assert checks.check_settle_step(lambda *args: math.nan if settle_mine(*args) is None else settle_mine(*args))
    assert checks.check_settle_step(lambda *args: torch.tensor(float("nan") if settle_mine(*args) is None
                                                               else float(settle_mine(*args))))


@pytest.mark.parametrize("fn, phrases", [
    (lambda *a: settle_mine(*a, stays=False), ["dips below the threshold", "*stay* below"]),
    (lambda *a: settle_mine(*a, relative="first"), ["fraction of the first rate", "own peak"]),
    (lambda *a: settle_mine(*a, span=False), ["minimum span is ignored"]),
    (lambda *a: settle_mine(*a, shift=0), ["one record too early"]),
    (lambda *a: settle_mine(*a, span=False, shift=0), ["two mistakes at once", "minimum span", "too early"]),
    (lambda *a: None, ["returned None (not settled) on every problem", "return step"]),
    (lambda s, r, f, m: s[-1], ["on problem 1", "diagnostics.settle"]),
    (lambda s, r, f, m: s, ["expected shape ()"]),
    (lambda s, r, f, m: "step 200", ["got str"]),
    (lambda s, r: 0, ["raised TypeError"]),
    (lambda s, r, f, m: 1 / 0, ["raised ZeroDivisionError"]),
])
def test_settle_step_mistakes_are_named(fn, phrases):
    failed(checks.check_settle_step(fn), *phrases)


def test_settle_step_problems_tell_every_mistake_from_the_answer():
    """Each mistake changes the answer on at least one problem, and the problems hold settled and
    not-settled rates alike."""
    from bayesattn_lite.checks import chapter_09
    spec = chapter_09._settle_step_spec()
    expected = [float(case.expected[0]) for case in spec.cases]
    assert any(math.isnan(e) for e in expected) and any(not math.isnan(e) for e in expected)
    for flaw in spec.outputs[0].flaws:
        wrong = [float(spec.outputs[0].compute(case.inputs, **{flaw.knob: flaw.value})) for case in spec.cases]
        assert not np.allclose(wrong, expected, equal_nan=True), flaw.knob
