"""EM for a Gaussian mixture with one shared spherical variance, the reference point of chapter 5.

    E-step:  r_ik = pi_k N(x_i; mu_k, s2 I) / sum_k' pi_k' N(x_i; mu_k', s2 I)   (responsibilities)
    M-step:  mu_k = sum_i r_ik x_i / N_k,  N_k = sum_i r_ik,  pi_k = N_k / n,
             s2 = sum_ik r_ik ||x_i - mu_k||^2 / (n d)

The M-step for a mean is one gradient-ascent step on the log-likelihood with a step size chosen per
component: grad_k = sum_i r_ik (x_i - mu_k) / s2, and mu_k + (s2 / N_k) grad_k is exactly the M-step
(``mean_gradient`` and ``gradient_fit`` make that comparison runnable). This is the sense in which a
larger learning rate on the "prototypes" (the values of a head) moves plain gradient descent towards EM.

Everything is float64 torch; x is (n, d).
"""

import itertools
import math
from dataclasses import dataclass

import torch

from . import _validate


def _check_x(x):
    x = _validate.tensor("x", x, 2, floating=True)
    if x.shape[0] < 1:
        _validate.fail("x", "a tensor of shape (n, d) with n >= 1 points", x)
    return x.to(torch.float64)


def _check_means(means, d):
    means = _validate.tensor("means", means, 2, floating=True)
    if means.shape[1] != d:
        _validate.fail("means", f"a tensor of shape (K, d={d})", means)
    return means.to(torch.float64)


def _check_variance(variance):
    return _validate.positive("variance", variance)


def _log_joint(x, means, variance, weights):
    """log pi_k + log N(x_i; mu_k, variance I), (n, K)."""
    d = x.shape[1]
    sq = torch.cdist(x, means).pow(2)
    return torch.log(weights) - sq / (2 * variance) - 0.5 * d * math.log(2 * math.pi * variance)


def e_step(x, means, variance, weights=None):
    """Responsibilities (n, K) and the mean log-likelihood per point (nats)."""
    x = _check_x(x)
    means = _check_means(means, x.shape[1])
    variance = _check_variance(variance)
    K = means.shape[0]
    weights = (torch.full((K,), 1.0 / K, dtype=torch.float64, device=x.device) if weights is None
               else _validate.tensor("weights", weights).to(x.device, torch.float64))
    _validate.shape("weights", weights, (K,), f"K={K} non-negative numbers summing to 1, shape")
    if (weights < 0).any() or abs(weights.sum().item() - 1) > 1e-6:
        _validate.fail("weights", f"K={K} non-negative numbers summing to 1",
                       f"[{', '.join(f'{w:.4g}' for w in weights.tolist())}] (sum {weights.sum().item():.6g})",
                       described=True)
    log_joint = _log_joint(x, means, variance, weights)
    log_norm = torch.logsumexp(log_joint, dim=1, keepdim=True)
    return torch.exp(log_joint - log_norm), log_norm.mean().item()


def m_step(x, resp, fit_variance=True, variance=None):
    """Means, variance (or the given one when ``fit_variance`` is False) and weights from responsibilities."""
    x = _check_x(x)
    fit_variance = _validate.boolean("fit_variance", fit_variance)
    if not isinstance(resp, torch.Tensor) or resp.dim() != 2 or resp.shape[0] != x.shape[0]:
        _validate.fail("resp", f"a torch.Tensor of shape (n={x.shape[0]}, K)", resp)
    resp = resp.to(x.device, torch.float64)
    sums = resp.sum(1)
    negative = (resp < -1e-12).any()
    if negative or not torch.allclose(sums, torch.ones_like(sums), atol=1e-6):
        _validate.fail("resp", "rows of probabilities (non-negative, summing to 1)",
                       "a negative entry" if negative else
                       f"row sums from {sums.min().item():.6g} to {sums.max().item():.6g}", described=True)
    counts = resp.sum(0).clamp_min(1e-12)
    means = resp.T @ x / counts[:, None]
    if fit_variance:
        variance = (resp * torch.cdist(x, means).pow(2)).sum().item() / (x.shape[0] * x.shape[1])
    return means, _check_variance(variance), counts / x.shape[0]


def mean_gradient(x, resp, means, variance):
    """d(sum_i log p(x_i)) / d mu_k = sum_i r_ik (x_i - mu_k) / variance, (K, d): each mean is pulled
    towards the points it is responsible for, weighted by how responsible it is."""
    x = _check_x(x)
    means = _check_means(means, x.shape[1])
    variance = _check_variance(variance)
    resp = _validate.tensor("resp", resp, 2)
    if tuple(resp.shape) != (x.shape[0], means.shape[0]):
        _validate.fail("resp", f"shape (n={x.shape[0]}, K={means.shape[0]}): one row per point, one column per mean", resp)
    resp = resp.to(x.device, torch.float64)
    return (resp.T @ x - resp.sum(0)[:, None] * means) / variance


@dataclass
class GMMFit:
    means: torch.Tensor          # (K, d)
    variance: float
    weights: torch.Tensor        # (K,)
    resp: torch.Tensor           # (n, K), at the final means
    log_likelihood: list         # mean log-likelihood per point, one per iteration (before its update) and the final
    means_path: torch.Tensor     # (n_iter + 1, K, d)


def initial_means(x, n_components, seed=0):
    """K distinct data points chosen at random (reproducible by seed)."""
    x = _check_x(x)
    n_components = _validate.integer("n_components", n_components, 1, x.shape[0])
    gen = torch.Generator().manual_seed(_validate.seed("seed", seed))
    return x[torch.randperm(x.shape[0], generator=gen).to(x.device)[:n_components]].clone()


def fit(x, n_components, n_iter=30, init=None, variance=1.0, fit_variance=True, seed=0):
    """EM from ``init`` means (default: random data points). The variance starts at ``variance`` and is
    re-estimated each M-step unless ``fit_variance`` is False."""
    x = _check_x(x)
    fit_variance = _validate.boolean("fit_variance", fit_variance)
    n_components = _validate.integer("n_components", n_components, 1, x.shape[0])
    n_iter = _validate.integer("n_iter", n_iter, 1)
    means = initial_means(x, n_components, _validate.seed("seed", seed)) if init is None \
        else _check_means(init, x.shape[1]).clone()
    if means.shape[0] != n_components:
        _validate.fail("init", f"{n_components} means (one per component)", means.shape[0])
    variance = _check_variance(variance)
    weights = torch.full((n_components,), 1.0 / n_components, dtype=torch.float64, device=x.device)
    path, log_lik = [means.clone()], []
    for _ in range(n_iter):
        resp, ll = e_step(x, means, variance, weights)
        log_lik.append(ll)
        means, variance, weights = m_step(x, resp, fit_variance, variance)
        path.append(means.clone())
    resp, ll = e_step(x, means, variance, weights)
    log_lik.append(ll)
    return GMMFit(means, variance, weights, resp, log_lik, torch.stack(path))


def gradient_fit(x, init, variance, lr, n_iter=30):
    """Gradient ascent on the means only (responsibilities recomputed every step, variance and
    weights fixed): the "plain gradient descent" counterpart of ``fit``. ``lr`` is per point: the
    step is lr * mean_gradient / n."""
    x = _check_x(x)
    means = _check_means(init, x.shape[1]).clone()
    variance = _check_variance(variance)
    lr = _validate.positive("lr", lr)
    n_iter = _validate.integer("n_iter", n_iter, 1)
    path, log_lik = [means.clone()], []
    for _ in range(n_iter):
        resp, ll = e_step(x, means, variance)
        log_lik.append(ll)
        means = means + lr * mean_gradient(x, resp, means, variance) / x.shape[0]
        path.append(means.clone())
    resp, ll = e_step(x, means, variance)
    log_lik.append(ll)
    K = means.shape[0]
    uniform = torch.full((K,), 1.0 / K, dtype=torch.float64, device=x.device)
    return GMMFit(means, variance, uniform, resp, log_lik, torch.stack(path))


def match(found, reference):
    """The permutation p (a list) that minimises sum_k ||found[p[k]] - reference[k]||: which fitted
    component is which true one. Exhaustive, so for K <= 8."""
    found = _validate.tensor("found", found).to(torch.float64)
    reference = _validate.tensor("reference", reference).to(torch.float64)
    if found.dim() != 2 or found.shape != reference.shape:
        _validate.fail("found, reference", "two (K, d) tensors of one shape",
                       f"{tuple(found.shape)} and {tuple(reference.shape)}", described=True)
    K = found.shape[0]
    if K > 8:  # K! permutations are tried
        _validate.fail("found, reference", "K <= 8 components (exhaustive search)", K)
    dist = torch.cdist(reference, found)
    best = min(itertools.permutations(range(K)), key=lambda p: sum(dist[k, p[k]].item() for k in range(K)))
    return list(best)


def fit_best(x, n_components, restarts=5, seed=0, **kwargs):
    """``fit`` from ``restarts`` random initialisations (seeds seed, seed+1, ...); the one with the
    highest final log-likelihood. EM only climbs to a local maximum, so restarts are the usual cure."""
    restarts = _validate.integer("restarts", restarts, 1)
    seed = _validate.seed("seed", seed)
    fits = [fit(x, n_components, seed=seed + k, **kwargs) for k in range(restarts)]
    return max(fits, key=lambda f: f.log_likelihood[-1])
