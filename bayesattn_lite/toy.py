"""Kept for one release: the hidden-sources task of chapters 4, 5 and 9 now lives in ``tasks``
(``tasks.sources_task`` and the methods of ``tasks.SourcesTask``), entropy and KL in
``diagnostics``. These functions forward to them."""

from . import diagnostics
from .tasks import SourcesTask, sources_task as make_task  # noqa: F401

__all__ = ["SourcesTask", "make_task", "sample", "log_likelihoods", "posterior", "observation_posterior",
           "entropy", "bayes_loss", "kl_to_posterior_bits"]


def sample(task, n_seqs, seed=0, **kwargs):
    return task.sample(n_seqs, seed=seed, **kwargs)


def log_likelihoods(task, x):
    return task.log_likelihoods(x)


def posterior(task, x):
    return task.posterior(x)


def observation_posterior(task, x):
    return task.observation_posterior(x)


def entropy(p, dim=-1):
    return diagnostics.entropy(p, dim=dim)


def bayes_loss(task, x, y):
    return task.bayes_loss(x, y)


def kl_to_posterior_bits(task, x, logits):
    return task.kl_bits(x, logits)
