"""EM for a Gaussian mixture with one shared spherical variance, the reference point of chapter 5.

    E-step:  r_ik = pi_k N(x_i; mu_k, s2 I) / sum_k' pi_k' N(x_i; mu_k', s2 I)   (responsibilities)
    M-step:  mu_k = sum_i r_ik x_i / N_k,  N_k = sum_i r_ik,  pi_k = N_k / n,
             s2 = sum_ik r_ik ||x_i - mu_k||^2 / (n d)

The M-step for a mean is one gradient-ascent step on the log-likelihood with a step size chosen per
component: grad_k = sum_i r_ik (x_i - mu_k) / s2, and mu_k + (s2 / N_k) grad_k is exactly the M-step
(``mean_gradient`` and ``gradient_fit`` make that comparison runnable). This is the sense in which a
larger learning rate on the "prototypes" (the values of a head) moves plain gradient descent towards EM.

Everything is float64 torch; x is (n, d) (a numpy array is taken too). The shapes are declared in
the signatures (``help(e_step)`` shows them) and checked at each call.
"""

import itertools
import math
from dataclasses import dataclass

import torch

from . import _validate
from ._types import Array, Flag, Float, Positive, Seed, Tensor, Whole, checked


def _float64(name, t, device=None):
    """``t`` (a tensor or numpy array, its shape checked by the signature) as a finite float64 tensor."""
    t = torch.as_tensor(t).to(device=device, dtype=torch.float64)
    return _validate.finite_values(name, t)


def _points(x):
    if x.shape[0] < 1 or x.shape[1] < 1:
        _validate.fail("x", "a tensor of shape (n, d) with n >= 1 points of d >= 1 dimensions", x)
    return _float64("x", x)


def _weights(weights, K, device):
    """Mixing weights as a float64 tensor: uniform when None, else K non-negative numbers summing to 1."""
    if weights is None:
        return torch.full((K,), 1.0 / K, dtype=torch.float64, device=device)
    weights = _float64("weights", weights, device)
    if weights.shape != (K,) or (weights < 0).any() or abs(weights.sum().item() - 1) > 1e-6:
        _validate.fail("weights", f"K={K} non-negative numbers summing to 1",
                       f"[{', '.join(f'{w:.4g}' for w in weights.tolist())}] (sum {weights.sum().item():.6g})",
                       described=True)
    return weights


def _log_joint(x, means, variance, weights):
    """log pi_k + log N(x_i; mu_k, variance I), (n, K)."""
    d = x.shape[1]
    sq = torch.cdist(x, means).pow(2)
    return torch.log(weights) - sq / (2 * variance) - 0.5 * d * math.log(2 * math.pi * variance)


@checked
def e_step(x: Float[Array, "n d"], means: Float[Array, "K d"], variance: Positive,
           weights: Float[Array, " K"] | None = None):
    """Responsibilities (n, K) and the mean log-likelihood per point (nats)."""
    x = _points(x)
    means = _float64("means", means, x.device)
    K = means.shape[0]
    weights = _weights(weights, K, x.device)
    log_joint = _log_joint(x, means, variance, weights)
    log_norm = torch.logsumexp(log_joint, dim=1, keepdim=True)
    return torch.exp(log_joint - log_norm), log_norm.mean().item()


@checked
def m_step(x: Float[Array, "n d"], resp: Float[Array, "n K"], fit_variance: Flag = True,
           variance=None):
    """Means, variance (or the given one when ``fit_variance`` is False) and weights from responsibilities."""
    x = _points(x)
    resp = _float64("resp", resp, x.device)
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
        if variance == 0:   # EM's degenerate fixed point: name the inputs that lead there, not the output
            _validate.fail("x", "points that do not all coincide with their components' means (give more distinct "
                           "points, or fit_variance=False)", "points whose fitted variance is 0", described=True)
    return means, _validate.positive("variance", variance), counts / x.shape[0]


@checked
def mean_gradient(x: Float[Array, "n d"], resp: Float[Array, "n K"],
                  means: Float[Array, "K d"], variance: Positive) -> Float[Tensor, "K d"]:
    """d(sum_i log p(x_i)) / d mu_k = sum_i r_ik (x_i - mu_k) / variance, (K, d): each mean is pulled
    towards the points it is responsible for, weighted by how responsible it is."""
    x = _points(x)
    resp, means = _float64("resp", resp, x.device), _float64("means", means, x.device)
    return (resp.T @ x - resp.sum(0)[:, None] * means) / variance


@dataclass
class GMMFit:
    means: torch.Tensor          # (K, d)
    variance: float
    weights: torch.Tensor        # (K,)
    resp: torch.Tensor           # (n, K), at the final means
    log_likelihood: list         # mean log-likelihood per point, one per iteration (before its update) and the final
    means_path: torch.Tensor     # (n_iter + 1, K, d)


@checked
def initial_means(x: Float[Array, "n d"], n_components, seed: Seed = 0) -> Float[Tensor, "K d"]:
    """K distinct data points chosen at random (reproducible by seed)."""
    x = _points(x)
    n_components = _validate.integer("n_components", n_components, 1, x.shape[0])
    distinct, label = torch.unique(x, dim=0, return_inverse=True)
    if distinct.shape[0] < n_components:
        _validate.fail("x", f"at least n_components={n_components} distinct points (one per mean)",
                       f"{distinct.shape[0]} distinct point(s)", described=True)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(x.shape[0], generator=gen).to(x.device)
    # the first n_components distinct points in that random order (with no repeated point: order[:n_components])
    first = torch.full((distinct.shape[0],), x.shape[0], device=x.device).scatter_reduce(
        0, label[order], torch.arange(x.shape[0], device=x.device), "amin")
    return x[order[first.sort().values[:n_components]]].clone()


@checked
def fit(x: Float[Array, "n d"], n_components, n_iter: Whole(1) = 30, init: Float[Array, "K d"] | None = None,
        variance: Positive = 1.0, fit_variance: Flag = True, seed=0, weights: Float[Array, " K"] | None = None,
        fit_weights: Flag = True) -> "GMMFit":
    """EM from ``init`` means (default: random data points). The variance starts at ``variance`` and is
    re-estimated each M-step unless ``fit_variance`` is False. The mixing weights start at ``weights``
    (default uniform) and are re-estimated unless ``fit_weights`` is False: then, with the variance
    fixed too, EM climbs the same objective as ``gradient_fit`` with the same weights."""
    x = _points(x)
    n_components = _validate.integer("n_components", n_components, 1, x.shape[0])
    means = initial_means(x, n_components, seed) if init is None \
        else _float64("init", init, x.device).clone()
    if means.shape[0] != n_components:
        _validate.fail("init", f"{n_components} means (one per component)", means.shape[0])
    same = (means[:, None] == means[None]).all(-1).triu(1).nonzero()   # pairs i < j of equal rows
    if len(same):   # identical means get identical responsibilities: EM never separates them
        _validate.fail("init", "distinct means (EM never separates two identical ones)",
                       f"rows {int(same[0, 0])} and {int(same[0, 1])} equal", described=True)
    weights = _weights(weights, n_components, x.device)
    path, log_lik = [means.clone()], []
    for _ in range(n_iter):
        resp, ll = e_step(x, means, variance, weights)
        log_lik.append(ll)
        means, variance, fitted_weights = m_step(x, resp, fit_variance, variance)
        weights = fitted_weights if fit_weights else weights
        path.append(means.clone())
    resp, ll = e_step(x, means, variance, weights)
    log_lik.append(ll)
    return GMMFit(means, variance, weights, resp, log_lik, torch.stack(path))


@checked
def gradient_fit(x: Float[Array, "n d"], init: Float[Array, "K d"], variance: Positive, lr: Positive,
                 n_iter: Whole(1) = 30, weights: Float[Array, " K"] | None = None) -> "GMMFit":
    """Gradient ascent on the means only (responsibilities recomputed every step, variance and
    ``weights`` fixed; default uniform): the "plain gradient descent" counterpart of ``fit``. ``lr``
    is per point: the step is lr * mean_gradient / n."""
    x = _points(x)
    means = _float64("init", init, x.device).clone()
    path, log_lik = [means.clone()], []
    weights = _weights(weights, means.shape[0], x.device)
    for _ in range(n_iter):
        resp, ll = e_step(x, means, variance, weights)
        log_lik.append(ll)
        means = means + lr * mean_gradient(x, resp, means, variance) / x.shape[0]
        path.append(means.clone())
    resp, ll = e_step(x, means, variance, weights)
    log_lik.append(ll)
    return GMMFit(means, variance, weights, resp, log_lik, torch.stack(path))


@checked
def match(found: Float[Array, "K d"], reference: Float[Array, "K d"]) -> list:
    """The permutation p (a list) that minimises sum_k ||found[p[k]] - reference[k]||: which fitted
    component is which true one. Exhaustive, so for K <= 8."""
    found, reference = _float64("found", found), _float64("reference", reference, found.device)
    K = found.shape[0]
    if K > 8:  # K! permutations are tried
        _validate.fail("found, reference", "K <= 8 components (exhaustive search)", K)
    dist = torch.cdist(reference, found)
    best = min(itertools.permutations(range(K)), key=lambda p: sum(dist[k, p[k]].item() for k in range(K)))
    return list(best)


@checked
def fit_best(x, n_components, restarts: Whole(1) = 5, seed: Seed = 0, **kwargs):
    """``fit`` from ``restarts`` random initialisations (seeds seed, seed+1, ..., modulo 2**63: each a
    valid seed); the one with the highest final log-likelihood. EM only climbs to a local maximum, so
    restarts are the usual cure."""
    fits = [fit(x, n_components, seed=(seed + k) % 2**63, **kwargs) for k in range(restarts)]
    return max(fits, key=lambda f: f.log_likelihood[-1])
