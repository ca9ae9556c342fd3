"""The check of chapter 5's M-step exercise: the reference passes, each usual mistake is named in words,
and a function that raises or returns the wrong thing gets a readable verdict, never a traceback."""

import torch

from bayesattn_lite import checks, em
from checking import failed


def right(x, resp):
    N = resp.sum(0)
    means = resp.T @ x / N[:, None]
    variance = (resp * torch.cdist(x, means) ** 2).sum() / x.numel()
    return means, variance, N / len(x)


def mine(x, resp, by_n=False, no_d=False, unsquared=False, masses=False):
    n, d = x.shape
    N = resp.sum(0)
    means = resp.T @ x / (n if by_n else N[:, None])
    dist = torch.cdist(x, means)
    variance = (resp * (dist if unsquared else dist ** 2)).sum() / (n if no_d else n * d)
    return means, variance, N if masses else N / n


def test_the_reference_and_em_m_step_pass():
    assert checks.check_mixture_m_step(right)
    assert checks.check_mixture_m_step(lambda x, resp: em.m_step(x, resp))        # variance as a float
    assert checks.check_mixture_m_step(lambda x, resp: tuple(t.numpy() if isinstance(t, torch.Tensor) else t
                                                             for t in right(x, resp)))
    result = checks.check_mixture_m_step(lambda x, resp: [*right(x, resp)[:1], right(x, resp)[1].item(),
                                                           right(x, resp)[2]])
    assert result and "4 random inputs" in result.message


def test_each_mistake_is_named():
    failed(checks.check_mixture_m_step(lambda x, r: mine(x, r, by_n=True)),
           "means and variance are wrong", "divided by the number of points n", "responsibility mass")
    failed(checks.check_mixture_m_step(lambda x, r: mine(x, r, no_d=True)),
           "means and weights are right", "variance is wrong", "d times too large")
    failed(checks.check_mixture_m_step(lambda x, r: mine(x, r, unsquared=True)), "not squared distances")
    failed(checks.check_mixture_m_step(lambda x, r: mine(x, r, masses=True)),
           "weights is wrong", "do not sum to 1")
    message = failed(checks.check_mixture_m_step(lambda x, r: mine(x, r, no_d=True, unsquared=True)),
                     "two mistakes at once", "d times too large", "not squared distances").message
    assert "resp.T @ x" not in message.split(" Compare with ")[0]


def test_transposed_responsibilities_get_a_readable_verdict():
    failed(checks.check_mixture_m_step(lambda x, r: (r @ x, 1.0, r.sum(0))),
           "raised RuntimeError", "resp (", "transpose", "the points are the first axis of both")

    def weights_per_point(x, r):
        means, variance, _ = right(x, r)
        return means, variance, r.sum(1) / len(x)

    failed(checks.check_mixture_m_step(weights_per_point), "weights", "not per point")
    failed(checks.check_mixture_m_step(lambda x, r: (right(x, r)[0].T, *right(x, r)[1:])), "Transposed")


def test_an_unknown_mistake_says_where_and_hints_before_the_formula():
    def old_means(x, r):  # a variance around the origin: no named mistake
        means, _, weights = right(x, r)
        return means, (r * torch.cdist(x, torch.zeros_like(means)) ** 2).sum() / x.numel(), weights

    message = failed(checks.check_mixture_m_step(old_means), "variance is wrong", "Hint:", "NEW means").message
    assert message.index("Hint:") < message.index("Compare with")


def test_a_function_that_raises_or_returns_nonsense_gets_a_verdict():
    def broken(x, resp):
        raise ValueError("not yet")

    failed(checks.check_mixture_m_step(broken), "raised ValueError", "not yet")
    failed(checks.check_mixture_m_step(lambda x, r: None), "expected a tuple of 3 tensors")
    failed(checks.check_mixture_m_step(lambda x, r: right(x, r)[:2]), "expected a tuple of 3 tensors")
    failed(checks.check_mixture_m_step(lambda x, r: (*right(x, r)[:2], "w")), "weights", "str")
    failed(checks.check_mixture_m_step(lambda x, r: tuple(t.float() for t in right(x, r))), "dtype")
    failed(checks.check_mixture_m_step(42), "expected your function mixture_m_step(x, resp), got 42")


def test_a_wrong_single_number_is_described_without_an_index():
    def off(x, resp):
        means, variance, masses = right(x, resp)
        return means, variance * 1.37 + 0.01, masses  # no known mistake, no constant factor
    message = failed(checks.check_mixture_m_step(off), "variance is wrong", "largest absolute error").message
    assert "at index" not in message.split("variance is wrong", 1)[1] and "multiple" not in message
