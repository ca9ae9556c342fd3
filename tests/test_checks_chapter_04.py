"""The checks of chapter 4's coding exercises: the reference passes, each usual mistake is named in
words, and a function that raises gets a readable verdict instead of a traceback."""

import math

import numpy as np
import pytest
import torch

from bayesattn_lite import checks, diagnostics, tasks
from bayesattn_lite.checks import chapter_04
from checking import failed


def test_the_checks_are_exported():
    assert set(chapter_04.__all__) == {"check_sources_posterior", "check_variance_shares"}
    for name in chapter_04.__all__:
        assert getattr(checks, name) is getattr(chapter_04, name)


# ----------------------------------------------------------------------------- the exact posterior of the sources task

def _log_parts(x, means, distractor, sigma):
    var = float(sigma) ** 2
    log_source = -((x[:, None, :] - means[None]) ** 2).sum(-1) / (2 * var)
    log_distractor = -((x - distractor) ** 2).sum(-1, keepdim=True) / (2 * var)
    return log_source, log_distractor


def _loglik(x, means, distractor, rho, sigma):
    log_source, log_distractor = _log_parts(x, means, distractor, sigma)
    return torch.logaddexp(torch.log(rho) + log_source, torch.log1p(-rho) + log_distractor)


def posterior_right(x, means, distractor, rho, sigma):
    return torch.softmax(_loglik(x, means, distractor, rho, sigma).cumsum(0), dim=-1)


def posterior_from_the_package(x, means, distractor, rho, sigma):
    task = tasks.SourcesTask(means=means, distractor=distractor, signal_prob=float(rho), noise=float(sigma),
                             seq_len=x.shape[0])
    return task.posterior(x[None])[0]


def test_posterior_reference_and_a_written_answer_pass():
    result = checks.check_sources_posterior(posterior_from_the_package)
    assert result and "✅" in repr(result) and "4 random inputs" in result.message
    assert checks.check_sources_posterior(posterior_right)
    assert checks.check_sources_posterior(lambda *a: posterior_right(*a).numpy())  # numpy is fine
    # the constants dropped by the package (the Gaussians' normalisation) change nothing
    assert checks.check_sources_posterior(
        lambda x, m, d, rho, s: torch.softmax((_loglik(x, m, d, rho, s) - 0.5 * x.shape[1] * math.log(2 * math.pi * s ** 2))
                                              .cumsum(0), dim=-1))


@pytest.mark.parametrize("fn, phrases", [
    (lambda x, m, d, rho, s: torch.softmax(_loglik(x, m, d, rho, s), dim=-1),
     ["only its own observation", "running total"]),
    (lambda x, m, d, rho, s: torch.softmax(_log_parts(x, m, d, s)[0].cumsum(0), dim=-1),
     ["distractor term of the mixture is missing"]),
    (lambda x, m, d, rho, s: torch.softmax(torch.log(rho) + _log_parts(x, m, d, s)[0].cumsum(0), dim=-1),
     ["distractor term of the mixture is missing"]),
    (lambda x, m, d, rho, s: torch.softmax(_loglik(x, m, d, rho, s).cumsum(0), dim=0),
     ["wrong axis", "over the K sources"]),
    (lambda x, m, d, rho, s: (lambda p: p / p.sum(-1, keepdim=True))(_loglik(x, m, d, rho, s).exp().cumsum(0)),
     ["likelihoods", "logarithms"]),
    (lambda x, m, d, rho, s: torch.softmax(_loglik(x, m, d, rho, s ** 0.5).cumsum(0), dim=-1),   # over 2 sigma
     ["wrong power", "2 sigma^2"]),
    (lambda x, m, d, rho, s: torch.softmax(_log_parts(x, m, d, s)[0], dim=-1),
     ["two mistakes", "only its own observation", "distractor term"]),
])
def test_posterior_mistakes_are_named(fn, phrases):
    failed(checks.check_sources_posterior(fn), *phrases)


def test_posterior_messages_do_not_give_the_answer_away():
    for flaw in chapter_04._POSTERIOR.flaws:
        assert "logaddexp" not in flaw.words and "cumsum" not in flaw.words and "softmax(" not in flaw.words


@pytest.mark.parametrize("fn, phrases", [
    (lambda x, m, d, rho, s: posterior_right(x, m, d, rho, s)[-1], ["shape (6, 3) (T, K)", "all T rows"]),
    (lambda x, m, d, rho, s: posterior_right(x, m, d, rho, s).T, ["got (3, 6) = (K, T)", "ransposed"]),
    (lambda x, m, d, rho, s: posterior_right(x, m, d, rho, s).float(), ["float64"]),
    (lambda x, m, d, rho, s: None, ["got None"]),
    (lambda x, m, d, rho, s: torch.zeros(x.shape[0], m.shape[0], dtype=x.dtype), ["all zeros"]),
])
def test_posterior_wrong_shapes_and_types_are_explained(fn, phrases):
    failed(checks.check_sources_posterior(fn), *phrases)


def test_posterior_function_that_raises_gets_a_verdict():
    failed(checks.check_sources_posterior(lambda x, m, d, rho, s: x @ m), "your function raised RuntimeError",
           "x (6, 4) = (T, d_x)", "broadcasting")
    failed(checks.check_sources_posterior(lambda *a: 1 / 0), "ZeroDivisionError")
    failed(checks.check_sources_posterior(lambda x: x), "TypeError")


def test_posterior_problems_tell_every_mistake_apart():
    """Each mistake, alone, gives numbers different from the reference and from every other mistake on
    some problem, so the verdict that names it is the only one that fits."""
    spec = chapter_04._sources_posterior_spec()
    answers = {"right": [c.expected[0] for c in spec.cases]}
    for flaw in chapter_04._POSTERIOR.flaws:
        answers[flaw.knob] = [chapter_04._posterior(c.inputs, **{flaw.knob: flaw.value}) for c in spec.cases]
    names = list(answers)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert any(not torch.allclose(p, q, rtol=1e-6, atol=1e-9) for p, q in zip(answers[a], answers[b])), (a, b)


# ----------------------------------------------------------------------------- the variance of each principal component

def shares_right(points):
    s = torch.linalg.svdvals(points - points.mean(0))
    return s ** 2 / (s ** 2).sum()


def shares_by_eigh(points):
    c = points - points.mean(0)
    var = torch.linalg.eigvalsh(c.T @ c).flip(0)
    return var / var.sum()


def test_shares_reference_and_written_answers_pass():
    result = checks.check_variance_shares(lambda p: diagnostics.pca(p, 1)["explained"])
    assert result and "4 random inputs" in result.message
    assert checks.check_variance_shares(shares_right)
    assert checks.check_variance_shares(shares_by_eigh)
    assert checks.check_variance_shares(lambda p: torch.from_numpy(np.linalg.svd(
        (p - p.mean(0)).numpy(), compute_uv=False) ** 2).div_(((p - p.mean(0)) ** 2).sum()))


@pytest.mark.parametrize("fn, phrases", [
    (lambda p: (lambda s: s ** 2 / (s ** 2).sum())(torch.linalg.svdvals(p)), ["not centred"]),
    (lambda p: (lambda s: s ** 2 / (s ** 2).sum())(torch.linalg.svdvals(p - p.mean(1, keepdim=True))),
     ["wrong axis", "over the rows"]),
    (lambda p: (lambda s: s / s.sum())(torch.linalg.svdvals(p - p.mean(0))), ["square"]),
    (lambda p: (lambda c: torch.linalg.eigvalsh(c.T @ c) / (c ** 2).sum())(p - p.mean(0)), ["ascending order"]),
    (lambda p: (lambda v: v / v.sum())(torch.linalg.eigvalsh(p.T @ p)), ["two mistakes", "not centred", "ascending"]),
])
def test_shares_mistakes_are_named(fn, phrases):
    failed(checks.check_variance_shares(fn), *phrases)


@pytest.mark.parametrize("fn, phrases", [
    (lambda p: shares_right(p)[:2], ["expected a tensor of shape (5,) (d,), got (2,)"]),
    (lambda p: torch.linalg.eigh((p - p.mean(0)).T @ (p - p.mean(0)))[1], ["shape (5,)", "eigenvectors"]),
    (lambda p: shares_right(p).tolist(), ["got a list"]),
    (lambda p: shares_right(p)[:2].sum().item(), ["got float"]),
])
def test_shares_wrong_shapes_and_types_are_explained(fn, phrases):
    failed(checks.check_variance_shares(fn), *phrases)


def test_shares_function_that_raises_gets_a_verdict():
    failed(checks.check_variance_shares(lambda p: p @ p), "your function raised RuntimeError", "points (12, 5) = (n, d)")
    failed(checks.check_variance_shares(lambda p, k: p), "TypeError")


@pytest.mark.parametrize("check", [checks.check_sources_posterior, checks.check_variance_shares])
def test_the_checks_never_raise(check):
    class Weird:
        def __getattr__(self, name):
            raise RuntimeError("weird")

    for fn in (None, 3, "f", lambda *a: Weird(), lambda *a: float("nan"), lambda *a: torch.tensor(float("nan"))):
        result = check(fn)
        assert isinstance(result, checks.CheckResult) and not result
