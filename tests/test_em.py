"""Gaussian-mixture EM of bayesattn_lite.em: the E-step is Bayes' rule, EM never lowers the
likelihood, and the M-step is a gradient step with a per-component step size."""

import math

import pytest
import torch

from bayesattn_lite import em


def blobs(n_per=200, seed=0):
    gen = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[4.0, 0.0], [-4.0, 0.0], [0.0, 5.0]], dtype=torch.float64)
    x = torch.cat([c + torch.randn(n_per, 2, generator=gen, dtype=torch.float64) for c in centres])
    return x, centres


def test_e_step_is_bayes_rule():
    x, centres = blobs(5)
    resp, ll = em.e_step(x, centres, 1.0)
    assert torch.allclose(resp.sum(1), torch.ones(len(x), dtype=torch.float64))
    dens = torch.exp(-torch.cdist(x, centres).pow(2) / 2) / (2 * math.pi)  # d = 2, unit variance
    assert torch.allclose(resp, dens / dens.sum(1, keepdim=True))
    assert math.isclose(ll, torch.log(dens.mean(1)).mean().item(), rel_tol=1e-10)


def test_em_never_lowers_the_likelihood_and_finds_the_blobs():
    x, centres = blobs()
    fit = em.fit(x, 3, n_iter=25, seed=1)
    diffs = torch.diff(torch.tensor(fit.log_likelihood))
    assert (diffs > -1e-9).all(), f"log-likelihood fell: {diffs.min()}"
    perm = em.match(fit.means, centres)
    assert torch.allclose(fit.means[perm], centres, atol=0.3)
    assert abs(fit.variance - 1.0) < 0.15
    assert fit.means_path.shape == (26, 3, 2)


def test_m_step_is_a_gradient_step_with_step_size_variance_over_count():
    x, centres = blobs(50)
    means = centres + 0.7
    resp, _ = em.e_step(x, means, 1.3)
    new_means, _, weights = em.m_step(x, resp, fit_variance=False, variance=1.3)
    counts = resp.sum(0)
    step = (1.3 / counts)[:, None] * em.mean_gradient(x, resp, means, 1.3)
    assert torch.allclose(new_means, means + step)
    assert torch.allclose(weights, counts / len(x))


def test_mean_gradient_matches_autograd():
    x, centres = blobs(20)
    means = (centres + 0.5).requires_grad_(True)
    weights = torch.full((3,), 1 / 3, dtype=torch.float64)
    log_joint = torch.log(weights) - torch.cdist(x, means).pow(2) / (2 * 0.8)
    torch.logsumexp(log_joint, 1).sum().backward()
    resp, _ = em.e_step(x, means.detach(), 0.8)
    assert torch.allclose(means.grad, em.mean_gradient(x, resp, means.detach(), 0.8))


def test_small_gradient_steps_climb_more_slowly_than_em():
    x, centres = blobs()
    init = em.initial_means(x, 3, seed=1)
    slow = em.gradient_fit(x, init, 1.0, lr=0.05, n_iter=10)
    fast = em.fit(x, 3, n_iter=10, init=init, variance=1.0, fit_variance=False)
    assert slow.log_likelihood[-1] > slow.log_likelihood[0]
    assert fast.log_likelihood[-1] > slow.log_likelihood[-1] + 0.1


def test_match_finds_the_permutation():
    ref = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    assert em.match(ref[[2, 0, 1]], ref) == [1, 2, 0]


def test_bad_inputs_raise_value_errors():
    x, centres = blobs(5)
    with pytest.raises(ValueError, match="x"):
        em.e_step(x[0], centres, 1.0)
    with pytest.raises(ValueError, match="means"):
        em.e_step(x, centres[:, :1], 1.0)
    with pytest.raises(ValueError, match="variance"):
        em.e_step(x, centres, 0.0)
    with pytest.raises(ValueError, match="weights"):
        em.e_step(x, centres, 1.0, torch.tensor([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match="resp"):
        em.m_step(x, torch.full((len(x), 3), 0.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="n_components"):
        em.fit(x, 0)
    with pytest.raises(ValueError, match="lr"):
        em.gradient_fit(x, centres, 1.0, lr=-1.0)


def test_fit_best_is_at_least_as_good_as_every_restart():
    x, _ = blobs(60)
    best = em.fit_best(x, 3, restarts=4, n_iter=10, seed=5)
    for k in range(4):
        assert best.log_likelihood[-1] >= em.fit(x, 3, n_iter=10, seed=5 + k).log_likelihood[-1] - 1e-12
    with pytest.raises(ValueError, match="restarts"):
        em.fit_best(x, 3, restarts=0)


def test_with_the_weights_held_em_and_gradient_ascent_climb_to_the_same_optimum():
    """Chapter 5's like-for-like race: fit_weights=False keeps EM on gradient_fit's objective (the means
    move, the variance and the given mixing weights stay), so both reach the same log-likelihood."""
    x, centres = blobs()
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)   # not the blobs' equal shares
    init = centres + 0.8
    held = em.fit(x, 3, n_iter=60, init=init, variance=1.0, fit_variance=False, weights=weights, fit_weights=False)
    assert torch.equal(held.weights, weights)
    ascent = em.gradient_fit(x, init, 1.0, lr=1.0, n_iter=600, weights=weights)
    assert torch.equal(ascent.weights, weights)
    assert math.isclose(held.log_likelihood[-1], ascent.log_likelihood[-1], abs_tol=1e-6)
    assert held.log_likelihood[5] > ascent.log_likelihood[5]   # EM gets there in fewer steps
    refitted = em.fit(x, 3, n_iter=60, init=init, variance=1.0, fit_variance=False, weights=weights)
    assert not torch.allclose(refitted.weights, weights)      # the default re-estimates them
    with pytest.raises(ValueError, match="weights"):
        em.gradient_fit(x, init, 1.0, lr=1.0, weights=torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_a_fit_whose_variance_collapses_names_the_points_not_an_argument_never_passed():
    one_point = torch.randn(1, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^x: expected points that do not all coincide with their components' means "
                                         r"\(.*fit_variance=False\), got points whose fitted variance is 0"):
        em.fit(one_point, 1, n_iter=1)
    assert em.fit(one_point, 1, n_iter=1, fit_variance=False).variance == 1.0


def test_fit_best_keeps_the_seeds_it_derives_in_range():
    x, _ = blobs(20)
    best = em.fit_best(x, 2, restarts=2, n_iter=1, seed=2**63 - 1)   # the second restart is seed 0, not 2**63
    assert best.log_likelihood[-1] >= em.fit(x, 2, n_iter=1, seed=0).log_likelihood[-1] - 1e-12


def test_initial_means_are_distinct_points_and_identical_means_are_refused():
    x, _ = blobs(5)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(3))
    assert torch.equal(em.initial_means(x, 3, seed=3), x[order[:3]])   # distinct points: as before
    repeated = torch.cat([x[:1].repeat(10, 1), x[1:3]])                  # 12 points, 3 distinct
    for seed in range(5):
        assert len(torch.unique(em.initial_means(repeated, 3, seed=seed), dim=0)) == 3
    with pytest.raises(ValueError, match=r"^x: expected at least n_components=2 distinct points .*got 1 distinct"):
        em.initial_means(torch.ones(5, 2), 2)
    with pytest.raises(ValueError, match=r"^init: expected distinct means .*got rows 0 and 1 equal"):
        em.fit(x, 2, init=torch.zeros(2, 2))
