"""Checks of the coding exercises of chapter 4 (one check per exercise, on the engine of ``_engine``):
the exact posterior of the sources task, and the share of variance of each principal component of
a cloud of values."""

import math

import torch

from .. import diagnostics, tasks
from ._engine import DTYPE, Flaw, Output, Spec, generator, make_case, run

__all__ = ["check_sources_posterior", "check_variance_shares"]


# ----------------------------------------------------------------------------- the exact posterior of the sources task

def _sources_task(inp):
    """The package's task with the exercise's arguments (``tasks.SourcesTask``)."""
    x = inp["x"]
    return tasks.SourcesTask(means=inp["means"], distractor=inp["distractor"], signal_prob=float(inp["rho"]),
                             noise=float(inp["sigma"]), seq_len=x.shape[0])


def _posterior(inp, accumulate=True, distractor=True, axis=-1, logs=True, noise_power=2):
    """p(z | x_0..t) for one sequence, (T, K): ``tasks.SourcesTask.posterior`` without knobs; each knob
    turned is one of the usual mistakes."""
    if accumulate and distractor and axis == -1 and logs and noise_power == 2:
        return _sources_task(inp).posterior(inp["x"][None])[0]
    x, means, mu_d = inp["x"], inp["means"], inp["distractor"]
    rho, var = float(inp["rho"]), float(inp["sigma"]) ** noise_power   # the variance when noise_power is 2
    log_source = -((x[:, None, :] - means[None]) ** 2).sum(-1) / (2 * var)       # (T, K)
    log_distractor = -((x - mu_d) ** 2).sum(-1, keepdim=True) / (2 * var)        # (T, 1)
    loglik = (torch.logaddexp(math.log(rho) + log_source, math.log1p(-rho) + log_distractor)
              if distractor else log_source)
    if not logs:  # the likelihoods themselves added up over the positions
        lik = torch.exp(loglik)
        lik = lik.cumsum(0) if accumulate else lik
        return lik / lik.sum(-1, keepdim=True)
    return torch.softmax(loglik.cumsum(0) if accumulate else loglik, dim=axis)


_POSTERIOR = Output(
    "posterior", ("T", "K"),
    "the formula of the section 'A task whose posterior we know': per position the mixture likelihood "
    "of each source, combined over the positions seen so far, then normalised over the sources",
    _posterior,
    [Flaw("accumulate", False, "each row uses only its own observation: that is p(z | x_t), what one observation "
                               "alone says. Row t should combine every observation up to and including x_t "
                               "(the product over s <= t): a running total over the positions, in log space."),
     Flaw("distractor", False, "the distractor term of the mixture is missing: you scored each observation as "
                               "if it surely came from the source. With probability 1 - rho it came from the "
                               "distractor. That part of its likelihood is the same for every source, but it "
                               "is added inside the mixture, not multiplied, so it does not cancel: it stops "
                               "one distractor that happens to lie near a source from pulling the posterior "
                               "there."),
     Flaw("axis", 0, "normalised over the wrong axis: every column sums to 1, so you divided over the positions. "
                     "Each row, one position t, is a distribution over the K sources: normalise over the last "
                     "axis."),
     Flaw("logs", False, "you added up the likelihoods of the positions, not their logarithms. Independent "
                         "observations multiply their likelihoods, so it is the log-likelihoods that add up "
                         "(and a sum of logs does not underflow as a long product would)."),
     Flaw("noise_power", 1, "the noise enters the likelihood with the wrong power: a Gaussian's exponent divides "
                            "the squared distance by 2 sigma^2, twice the variance, not by 2 sigma.")],
    transpose_hint="Transposed: one row per position t, one column per source z.",
    shape_hints={("K",): "One distribution a position: return all T rows, not only the last one.",
                 ("T", "K", "d_x"): "Sum the squared differences over the coordinates (the last axis)."},
)


def _sources_posterior_spec():
    signature = {"x": ("T", "d_x"), "means": ("K", "d_x"), "distractor": ("d_x",), "rho": (), "sigma": ()}
    cases = []
    # (T, d_x, K, rho, sigma): every size differs within a row, and T > K so that a transpose shows
    for n, (T, d_x, K, rho, sigma) in enumerate([(6, 4, 3, 0.3, 1.0), (9, 5, 2, 0.5, 1.3), (7, 8, 5, 0.25, 0.9),
                                                  (11, 6, 4, 0.6, 1.2)]):
        gen = generator(1400 + n)
        directions = torch.randn(K + 1, d_x, generator=gen, dtype=DTYPE)
        directions = 2.0 * directions / directions.norm(dim=1, keepdim=True)  # the chapter's |mu| = 2
        z = int(torch.randint(0, K, (1,), generator=gen))
        is_signal = torch.rand(T, generator=gen, dtype=DTYPE) < rho
        is_signal[1] = True  # at least one signal position
        centres = torch.where(is_signal[:, None], directions[z], directions[K])
        x = centres + sigma * torch.randn(T, d_x, generator=gen, dtype=DTYPE)
        inputs = {"x": x, "means": directions[:K], "distractor": directions[K],
                  "rho": torch.tensor(rho, dtype=DTYPE), "sigma": torch.tensor(sigma, dtype=DTYPE)}
        expected = _sources_task(inputs).posterior(x[None])[0]
        cases.append(make_case(signature, inputs, [expected], f"T={T}, K={K}, rho={rho}, sigma={sigma}"))
    return Spec("sources_posterior", signature, [_POSTERIOR], cases,
                "x is (T, d_x) and means (K, d_x): compare every observation with every source by broadcasting, "
                "x[:, None, :] - means[None, :, :] is (T, K, d_x).")


def check_sources_posterior(fn):
    """Check ``fn(x, means, distractor, rho, sigma) -> posterior`` (T, K): the exact posterior
    p(z | x_0..t) of chapter 4's sources task at every position of one sequence
    (``tasks.SourcesTask.posterior``)."""
    return run(_sources_posterior_spec(), fn)


# ----------------------------------------------------------------------------- the variance of each principal component

def _shares(inp, centre=0, square=True, largest_first=True):
    """The share of the total variance of each principal component, largest first, (d,):
    ``diagnostics.pca(points)["explained"]`` without knobs; each knob turned is one of the usual mistakes."""
    points = inp["points"]
    if centre == 0 and square and largest_first:
        return torch.from_numpy(diagnostics.pca(points, 1)["explained"])
    if centre is not None:
        points = points - points.mean(dim=centre, keepdim=True)
    s = torch.linalg.svdvals(points)
    var = s ** 2 if square else s
    shares = var / var.sum()
    return shares if largest_first else shares.flip(0)


_SHARES = Output(
    "shares", ("d",),
    "the variance of the centred cloud along each principal direction, as a share of the total, largest first "
    "(diagnostics.pca(points)['explained'])",
    _shares,
    [Flaw("centre", None, "the cloud is not centred: without subtracting its mean, the first 'component' points "
                          "at the mean and takes a share that is not variance at all. Subtract the mean point "
                          "(the average over the rows) first."),
     Flaw("centre", 1, "centred over the wrong axis: you subtracted from each point the mean of its own "
                       "coordinates. Centre each coordinate over the points: the mean is taken over the rows "
                       "(dim=0), one mean per coordinate."),
     Flaw("square", False, "the singular values themselves are not variances: the variance along a principal "
                           "direction grows with the square of its singular value (a factor 1/n or 1/(n - 1) "
                           "cancels in a share)."),
     Flaw("largest_first", False, "smallest first: torch.linalg.eigh and eigvalsh return the eigenvalues in "
                                  "ascending order. Put the largest first, so that shares[:2] are the top two "
                                  "components.")],
    shape_hints={("n",): "One share per coordinate direction, not per point: an SVD of the (n, d) cloud has "
                         "min(n, d) = d singular values.",
                 ("d", "d"): "One number per component: the shares, not the directions (eigenvectors)."},
)


def _variance_shares_spec():
    signature = {"points": ("n", "d")}
    cases = []
    for n, (n_points, d) in enumerate([(12, 5), (20, 3), (15, 6), (30, 4)]):
        gen = generator(1500 + n)
        scales = torch.linspace(3.0, 0.3, d, dtype=DTYPE)  # clearly different variances along d directions
        rotation, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=DTYPE))
        mean = 3.0 * torch.randn(d, generator=gen, dtype=DTYPE)  # far from the origin: centring matters
        points = mean + (torch.randn(n_points, d, generator=gen, dtype=DTYPE) * scales) @ rotation.T
        inputs = {"points": points}
        expected = _shares(inputs)
        cases.append(make_case(signature, inputs, [expected], f"{n_points} points in d={d}"))
    return Spec("variance_shares", signature, [_SHARES], cases,
                "points is (n, d), one point per row; centre it over the rows, then its singular values "
                "(torch.linalg.svdvals) or the eigenvalues of its (d, d) scatter matrix give the variances.")


def check_variance_shares(fn):
    """Check ``fn(points) -> shares`` (d,): the share of the total variance of each principal component
    of an (n, d) cloud of points (n > d), largest first (``diagnostics.pca(points)['explained']``)."""
    return run(_variance_shares_spec(), fn)
