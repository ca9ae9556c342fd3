"""The toy task of chapters 4 and 5: hidden sources among distractors, with an exact posterior.

Each sequence belongs to one of K hidden sources z (uniform prior). At every position t, with
probability ``signal_prob`` the observation comes from the source, otherwise from a distractor
that carries no information about z::

    x_t = mu_z + noise * eps_t           (signal,     probability rho)
    x_t = mu_D + noise * eps_t           (distractor, probability 1 - rho),   eps_t ~ N(0, I)

The target at every position is the source itself, y_t = z, so the Bayes-optimal prediction at
position t is the posterior over sources given everything seen so far,

    p(z | x_0..t)  ~  prod_{s <= t} [rho N(x_s; mu_z) + (1 - rho) N(x_s; mu_D)],

which ``posterior`` computes in log space. A causal head sees exactly x_0..t at position t, so it
can be scored against this posterior in bits. A good head has to route: attend to the signal
positions (content-based: their keys differ from the distractors') and read their values.
"""

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SourcesTask:
    """The generative model. ``means`` is (K, d_x), one row per source; ``distractor`` is (d_x,)."""

    means: torch.Tensor
    distractor: torch.Tensor
    signal_prob: float
    noise: float
    seq_len: int

    @property
    def n_sources(self):
        return self.means.shape[0]

    @property
    def d_x(self):
        return self.means.shape[1]


def _check_int(what, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what}: expected an int >= {minimum}, got {value!r}")


def _check_float(what, value, low, high, low_open=True):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low < value if low_open else low <= value) and value <= high
    if not ok:
        raise ValueError(f"{what}: expected a number in {'(' if low_open else '['}{low}, {high}], got {value!r}")


def make_task(n_sources=3, d_x=12, seq_len=16, signal_prob=0.4, noise=1.0, separation=3.0, seed=0):
    """Draw K source means and one distractor mean, each at distance ``separation`` from the origin.

    Random directions in d_x >= K + 1 dimensions are nearly orthogonal, so every pair of means is
    about separation * sqrt(2) apart: a single observation is informative but ambiguous, and a few
    signal positions pin the source down.
    """
    _check_int("n_sources", n_sources, 2)
    _check_int("d_x", d_x, n_sources + 1)
    _check_int("seq_len", seq_len, 1)
    _check_float("signal_prob", signal_prob, 0.0, 1.0)
    _check_float("noise", noise, 0.0, math.inf)
    _check_float("separation", separation, 0.0, math.inf)
    gen = torch.Generator().manual_seed(seed)
    directions = torch.randn(n_sources + 1, d_x, generator=gen, dtype=torch.float64)
    directions = separation * directions / directions.norm(dim=1, keepdim=True)
    return SourcesTask(means=directions[:n_sources], distractor=directions[n_sources],
                       signal_prob=float(signal_prob), noise=float(noise), seq_len=seq_len)


def sample(task, n_seqs, seed=0, dtype=torch.float32):
    """``n_seqs`` sequences: x (B, T, d_x), y (B, T) (the source, the same along a sequence),
    and is_signal (B, T) (True where x_t came from the source rather than the distractor)."""
    _check_int("n_seqs", n_seqs, 1)
    gen = torch.Generator().manual_seed(seed)
    B, T = n_seqs, task.seq_len
    z = torch.randint(0, task.n_sources, (B,), generator=gen)
    is_signal = torch.rand(B, T, generator=gen, dtype=torch.float64) < task.signal_prob
    centres = torch.where(is_signal[..., None], task.means[z][:, None, :], task.distractor)
    x = centres + task.noise * torch.randn(B, T, task.d_x, generator=gen, dtype=torch.float64)
    return x.to(dtype), z[:, None].expand(B, T).clone(), is_signal


def _check_x(task, x):
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != task.d_x:
        raise ValueError(f"x: expected a tensor of shape (B, T, d_x={task.d_x}), "
                         f"got {getattr(x, 'shape', type(x).__name__)}")


def log_likelihoods(task, x):
    """log p(x_t | z) for every position and source, (B, T, K), float64 (constants dropped)."""
    _check_x(task, x)
    x = x.to(torch.float64)
    var = task.noise ** 2
    log_source = -((x[..., None, :] - task.means) ** 2).sum(-1) / (2 * var)       # (B, T, K)
    log_distractor = -((x - task.distractor) ** 2).sum(-1, keepdim=True) / (2 * var)  # (B, T, 1)
    if task.signal_prob == 1:  # no distractors at all (log(1 - rho) would be log 0)
        return log_source
    return torch.logaddexp(math.log(task.signal_prob) + log_source,
                           math.log1p(-task.signal_prob) + log_distractor)


def posterior(task, x):
    """The exact posterior p(z | x_0..t) at every position, (B, T, K), float64: what a causal
    Bayes-optimal predictor outputs."""
    return torch.softmax(log_likelihoods(task, x).cumsum(dim=1), dim=-1)


def observation_posterior(task, x):
    """p(z | x_t) from one observation alone, (B, T, K): how much a single value can know."""
    return torch.softmax(log_likelihoods(task, x), dim=-1)


def entropy(p, dim=-1):
    """Shannon entropy in nats along ``dim`` (0 log 0 = 0)."""
    p = p.to(torch.float64)
    return -(p * torch.log(p.clamp_min(1e-300))).sum(dim)


def bayes_loss(task, x, y):
    """The cross-entropy (nats) of the exact posterior on (x, y): the floor no model can beat on average."""
    post = posterior(task, x)
    if tuple(y.shape) != tuple(post.shape[:2]):
        raise ValueError(f"y: expected shape {tuple(post.shape[:2])}, got {tuple(y.shape)}")
    return -torch.log(post.gather(-1, y[..., None].long()).clamp_min(1e-300)).mean().item()


def kl_to_posterior_bits(task, x, logits):
    """Mean KL(p_Bayes || p_model) in bits over positions: how far a model is from the exact posterior."""
    post = posterior(task, x)
    if tuple(logits.shape) != tuple(post.shape):
        raise ValueError(f"logits: expected shape {tuple(post.shape)} (B, T, K), got {tuple(logits.shape)}")
    log_model = torch.log_softmax(logits.detach().to(torch.float64), dim=-1)
    kl = (post * (torch.log(post.clamp_min(1e-300)) - log_model)).sum(-1)
    return kl.mean().item() / math.log(2)
