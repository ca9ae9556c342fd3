"""The check of chapter 6's coding exercise on the exact Bayes predictor (``checks.check_forward_filter``):
the right answer passes, each named mistake is named in words, and nothing raises."""

import numpy as np
import pytest
import torch

from bayesattn_lite import checks, tasks
from bayesattn_lite.checks import chapter_06
from checking import failed


def forward_filter(x, means, P, noise, step="next", transpose=False, normalise=True, variance=True):
    """A learner's numpy forward filter, written independently of the check, with its mistakes as knobs."""
    sq = ((x[:, None, :] - means[None, :, :]) ** 2).sum(-1)
    lik = np.exp(-(sq - sq.min(axis=1, keepdims=True)) / (2 * (noise**2 if variance else noise)))
    if not normalise:
        lik = np.exp(-sq / (2 * noise**2))
    belief, out = np.full(len(P), 1.0 / len(P)), []
    for t in range(len(x)):
        now = belief * lik[t]
        if normalise:
            now = now / now.sum()
        belief = now @ (P.T if transpose else P)
        out.append(now if step == "current" else belief)
    return np.array(out)


def test_the_reference_passes_and_is_the_package_predictor():
    assert checks.check_forward_filter(forward_filter)
    assert "check_forward_filter" in checks.__all__
    # the check's own numpy filter (used to name mistakes) equals the package's on every problem
    spec = chapter_06._forward_filter_spec()
    for case in spec.cases:
        assert np.allclose(chapter_06._filter_with(*case.inputs.values()), case.expected[0], rtol=1e-12, atol=1e-14)
        assert not np.allclose(case.inputs["P"], case.inputs["P"].T)   # a transpose shows
        assert np.allclose(case.expected[0].sum(axis=1), 1.0)


def test_the_reference_matches_the_chapters_chain():
    """On the chapter's chain (seed 42's training sequence, shortened) the learner's function equals the
    package's posterior, and a tensor answer is accepted as numbers."""
    chain = tasks.StickyMarkovChain()
    x, _ = chain.sample(300, seed=42)
    mine = forward_filter(x.double().numpy(), chain.means.numpy(), chain.transition_matrix, chain.noise)
    assert np.allclose(mine, chain.posterior(x).numpy(), atol=1e-12)
    assert checks.check_forward_filter(lambda *a: torch.as_tensor(forward_filter(*a)))


@pytest.mark.parametrize("knobs, phrases", [
    (dict(step="current"), ["current symbol", "next symbol", "one step through the chain"]),
    (dict(transpose=True), ["transpose of P", "rows of P"]),
    (dict(normalise=False), ["do not sum to 1", "Renormalise"]),
    (dict(variance=False), ["wrong power", "standard deviation", "variance"]),
])
def test_each_mistake_is_named(knobs, phrases):
    failed(checks.check_forward_filter(lambda *a: forward_filter(*a, **knobs)), *phrases)


def test_two_mistakes_at_once_are_both_named():
    failed(checks.check_forward_filter(lambda *a: forward_filter(*a, step="current", transpose=True)),
           "two mistakes at once", "current symbol", "transpose of P")


def test_a_filter_that_never_renormalises_is_named_whatever_its_likelihood_constant():
    def unnormalised(x, means, P, noise):   # likelihoods normalised over the symbols, the belief never
        sq = ((x[:, None, :] - means[None, :, :]) ** 2).sum(-1)
        lik = np.exp(-sq / (2 * noise**2))
        lik = lik / lik.sum(axis=1, keepdims=True)
        belief, out = np.full(len(P), 1.0 / len(P)), []
        for t in range(len(x)):
            belief = (belief * lik[t]) @ P
            out.append(belief)
        return np.array(out)
    failed(checks.check_forward_filter(unnormalised), "do not sum to 1", "Renormalise")


@pytest.mark.parametrize("fn, phrases", [
    (lambda x, means, P, noise: 1 / 0, ["raised ZeroDivisionError", "T=6 positions"]),
    (lambda x, means, P, noise: None, ["None", "return"]),
    (lambda x, means, P, noise: np.zeros((len(P), len(P))), ["expected shape"]),
    (lambda x, means, P, noise: np.full((len(x), len(P)), 1.0 / len(P)), ["on problem 1", "StickyMarkovChain.posterior"]),
    (lambda x, means, P, noise: "p", ["expected numbers"]),
    (lambda x, means: x, ["raised TypeError"]),
])
def test_a_broken_function_gets_a_readable_failure(fn, phrases):
    failed(checks.check_forward_filter(fn), *phrases)


def test_the_check_does_not_touch_its_inputs():
    def in_place(x, means, P, noise):
        out = forward_filter(x, means, P, noise)
        x[:] = 0.0
        P[:] = 0.0
        return out
    assert checks.check_forward_filter(in_place)
    assert checks.check_forward_filter(forward_filter)
