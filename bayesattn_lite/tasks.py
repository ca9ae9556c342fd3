"""Sequence tasks whose Bayes-optimal prediction is known exactly.

The paper's *sticky Markov chain* (section 5.2 of the paper; settings from the authors' public
code, ``vishalmisra/bayesian-wind-tunnel``) and the *hidden sources* task of chapters 4, 5 and 9.
Paper I's three wind tunnels live in ``wind_tunnels``.

Every task of the course, these two and the three wind tunnels, follows one protocol, ``Task``:
``task.sample(n, seed)`` returns a batch whose ``posterior`` is the exact Bayes posterior of what the
model must predict (the same seed gives the same data). Here the batch is a ``Sample``, which also
unpacks as the tuple the chapters use; a wind tunnel's is a ``wind_tunnels.WindTunnelBatch``. (The
seed goes to numpy's generator for the chain and to torch's for the sources, as the chapters'
published numbers were drawn.)::

    chain = StickyMarkovChain()              # 8 symbols, self-probability 0.3, 20-D embeddings
    x, y = chain.sample(T=2000, seed=42)     # x: (1999, 20) noisy embeddings, y: (1999,) next symbols
    p = chain.sample(T=2000, seed=42).posterior  # (1999, 8): exact p(y_t | x_0..x_t), forward filter

    task = sources_task()                    # hidden sources among distractors (chapters 4, 5, 9)
    cued = cued_sources_task()               # two sources and a cue naming the target (chapter 4b)
    x, y, is_signal = task.sample(256, seed=0)
    p = task.posterior(x)                    # (256, 16, 3): exact p(z | x_0..x_t), as .posterior gives

The generative model. A hidden symbol path s_0, s_1, ..., s_{T-1} is a Markov chain with transition
matrix P (first symbol uniform, which is also the stationary law: P is circulant). Position t shows
a noisy view of the *current* symbol and asks for the *next* one::

    x[t] = mu[s_t] + noise * N(0, I),    y[t] = s_{t+1},    t = 0 .. T-2

so x[t] is a noisy view of y[t-1]. The exact predictor is an HMM forward filter with Gaussian
emissions N(mu_s, noise^2 I): filter s_t from x_0..x_t, then push the belief through P.
"""

import functools
import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from . import _validate, diagnostics
from ._types import Array, Float, Int, Positive, Real, Seed, Tensor, Whole, checked, declared_fields


@runtime_checkable
class Task(Protocol):
    """What every task of the course offers: ``sample(n, seed)``, a batch of size ``n`` (sequences, or
    one sequence's length for the chain) drawn from ``seed``, whose ``posterior`` attribute is the
    exact Bayes posterior of its targets. (A Protocol: the tasks do not inherit from it, they match it.)"""

    def sample(self, n, seed):
        ...


@dataclass(eq=False)
class Sample:
    """A sample of the chain or of the sources task: inputs ``x``, targets ``y`` (and for the sources
    task ``is_signal``), and ``posterior``, the exact p(y | what the model has seen) in float64, computed
    by the task's filter the first time it is read. It unpacks (and indexes) as the tuple the chapters
    use: ``x, y = chain.sample(T, seed)``, ``x, y, is_signal = task.sample(n, seed)``."""

    x: torch.Tensor
    y: torch.Tensor
    task: object = field(repr=False)
    is_signal: torch.Tensor = None

    @functools.cached_property
    def posterior(self):
        return self.task.posterior(self.x)

    def _parts(self):
        return (self.x, self.y) if self.is_signal is None else (self.x, self.y, self.is_signal)

    def __iter__(self):
        return iter(self._parts())

    def __getitem__(self, index):
        return self._parts()[index]


@checked
def circular_distance(n: Whole(1)):
    """(n, n) matrix of distances between symbols placed on a circle: min(|i-j|, n-|i-j|)."""
    i = np.arange(n)
    d = np.abs(i[:, None] - i[None, :])
    return np.minimum(d, n - d)


@checked
def sticky_transition_matrix(n_symbols: Whole(2) = 8, self_prob: Real(0.0, 1.0) = 0.3):
    """The authors' transition matrix, row-normalised.

    Row i: ``self_prob`` on i itself, and ``(1 - self_prob) * (1/d_ij) / (1 + sum_j' 1/d_ij')`` on
    each other j (d = circular distance): their normalising sum counts the diagonal with weight 1,
    so the row sums to less than 1 and the final renormalisation raises the diagonal. With the
    paper's settings row 0 is [0.3498, 0.166, 0.083, 0.0553, 0.0415, 0.0553, 0.083, 0.166].
    """
    n = n_symbols
    d = circular_distance(n).astype(np.float64)
    inverse = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)  # 0 on the diagonal
    P = (1.0 - self_prob) * inverse / (1.0 + inverse.sum(axis=1, keepdims=True))
    np.fill_diagonal(P, self_prob)
    return P / P.sum(axis=1, keepdims=True)


@checked
class StickyMarkovChain:
    """The sticky Markov chain of the paper: sampler, transition matrix and exact predictor.

    ``self_prob`` is the authors' stickiness parameter *before* their renormalisation (0.3 gives a
    diagonal of 0.3498 for 8 symbols). ``means`` (the symbol embeddings mu, (n_symbols, d_embed))
    are N(0, 1) entries drawn once from ``torch.Generator().manual_seed(embed_seed)``, so every
    seed's sequence uses the same embeddings. ``noise`` is the standard deviation of the Gaussian
    observation noise.
    """

    @checked
    def __init__(self, n_symbols: Whole(2) = 8, self_prob: Real(0.0, 1.0) = 0.3, d_embed: Whole(1) = 20, noise=1.0,
                 embed_seed: Seed = 0):
        self.n_symbols = n_symbols
        self.d_embed = d_embed
        self.noise = _validate.positive("noise (the observation noise's standard deviation)", noise)
        self.transition_matrix = sticky_transition_matrix(self.n_symbols, self_prob)  # numpy float64
        self.self_prob = self_prob
        self.embed_seed = embed_seed
        gen = torch.Generator().manual_seed(self.embed_seed)
        self.means = torch.randn(self.n_symbols, self.d_embed, generator=gen, dtype=torch.float64)

    def __repr__(self):
        return (f"StickyMarkovChain(n_symbols={self.n_symbols}, self_prob={self.self_prob:g}, "
                f"d_embed={self.d_embed}, noise={self.noise:g}, embed_seed={self.embed_seed})")

    # ------------------------------------------------------------------------- entropies

    @property
    def row_entropies(self):
        """Entropy (nats) of each row of the transition matrix."""
        P = self.transition_matrix
        return -(P * np.log(np.where(P > 0, P, 1.0))).sum(axis=1)

    @property
    def h_min(self):
        """The paper's lower bound: mean row entropy (1.8292 nats for the paper's chain).

        It is the loss of a predictor that *knows* the current symbol; the inputs only show it
        through noise, so no model can reach it: ``posterior`` gives the attainable bound.
        """
        return float(self.row_entropies.mean())

    # ------------------------------------------------------------------------- sampling

    @checked
    def sample_symbols(self, T: Whole(2), seed: Seed):
        """The hidden path s_0..s_{T-1} (int64 numpy), from ``numpy.random.default_rng(seed)``."""
        rng = np.random.default_rng(seed)
        cumulative = np.cumsum(self.transition_matrix, axis=1)
        cumulative[:, -1] = 1.0  # guard against rounding: every uniform draw lands in some column
        draws = rng.random(T)
        s = np.empty(T, dtype=np.int64)
        s[0] = min(int(draws[0] * self.n_symbols), self.n_symbols - 1)  # uniform first symbol
        for t in range(1, T):
            s[t] = np.searchsorted(cumulative[s[t - 1]], draws[t], side="right")
        return s, rng

    def sample(self, T, seed, dtype=torch.float32, device="cpu"):
        """One sequence of ``T`` symbols as a next-symbol task: a ``Sample`` ``(x, y)`` with T - 1 rows,
        and its exact ``posterior`` (``self.posterior(x)``).

        x[t] = mu[s_t] + noise * N(0, I) (a noisy view of symbol t) and y[t] = s_{t+1}. The path
        and then the noise come from ``numpy.random.default_rng(seed)``: the same seed gives the
        same sequence on every machine.
        """
        dtype = _validate.float_dtype("dtype", dtype)  # integer embeddings would be truncated noise
        device = _validate.device("device", device)
        s, rng = self.sample_symbols(T, seed)
        eps = rng.standard_normal((T - 1, self.d_embed))
        x = self.means.numpy()[s[:-1]] + self.noise * eps
        return Sample(torch.as_tensor(x, dtype=dtype, device=device),
                      torch.as_tensor(s[1:], dtype=torch.int64, device=device), self)

    # ------------------------------------------------------------------------- exact predictor

    def _check_x(self, x):
        """What the signature cannot say: x's width is this chain's, and its values are finite."""
        if x.shape[-1] != self.d_embed:
            _validate.fail("x", f"shape (..., T-1, d_embed={self.d_embed})", x)
        _validate.finite_values("x", x)

    @checked
    def posterior(self, x: Float[Array, "*B N d_embed"]) -> Float[Tensor, "*B N n_symbols"]:
        """Exact p(y_t | x_0..x_t) for every t, by the forward filter; shape (..., T-1, n_symbols).

        Computed in float64 on x's device whatever x's dtype. The belief over the current symbol
        is kept normalised at every step (filtering in probabilities, with the emission
        log-likelihoods shifted by their maximum), so long sequences neither under- nor overflow.
        """
        x = torch.as_tensor(x)
        self._check_x(x)
        x = x.to(torch.float64)
        mu = self.means.to(x.device)
        P = torch.as_tensor(self.transition_matrix, device=x.device)
        # log N(x_t; mu_s, noise^2 I) up to a constant in s: the constant cancels in the posterior
        loglik = -((x.unsqueeze(-2) - mu) ** 2).sum(-1) / (2 * self.noise**2)    # (..., N, n)
        lik = torch.exp(loglik - loglik.amax(dim=-1, keepdim=True))
        prior = torch.full(x.shape[:-2] + (self.n_symbols,), 1.0 / self.n_symbols,
                           dtype=torch.float64, device=x.device)
        predictive = torch.empty_like(lik)
        for t in range(x.shape[-2]):
            posterior = prior * lik[..., t, :]                                    # p(s_t | x_0..x_t)
            posterior = posterior / posterior.sum(-1, keepdim=True)
            prior = posterior @ P                                                 # p(s_{t+1} | x_0..x_t)
            predictive[..., t, :] = prior
        return predictive

    @checked
    def bayes_metrics(self, x: Float[Tensor, "*B N d_embed"], y: Int[Tensor, "*B N"]) -> dict:
        """Loss (cross-entropy, nats), predictive entropy (nats) and accuracy of the exact predictor.

        Means over positions (and over any leading axes of x); floats.
        """
        p = self.posterior(x)
        _validate.labels("y", y, self.n_symbols)
        y = y.to(p.device).long()
        loss = -torch.log(p.gather(-1, y.unsqueeze(-1))).mean()
        entropy = diagnostics.entropy(p).mean()
        accuracy = (p.argmax(-1) == y).double().mean()
        return {"loss": loss.item(), "entropy": entropy.item(), "accuracy": accuracy.item()}


# ============================================================================= hidden sources
#
# The task of chapters 4, 5 and 9. Each sequence belongs to one of K hidden sources z (uniform
# prior). At every position, with probability ``signal_prob`` the observation comes from the
# source, otherwise from a distractor that carries no information about z:
#
#     x_t = mu_z + noise * eps_t           (signal,     probability rho)
#     x_t = mu_D + noise * eps_t           (distractor, probability 1 - rho),   eps_t ~ N(0, I)
#
# The target at every position is the source itself, y_t = z, so the Bayes-optimal prediction at
# position t is the posterior over sources given everything seen so far,
#
#     p(z | x_0..t)  ~  prod_{s <= t} [rho N(x_s; mu_z) + (1 - rho) N(x_s; mu_D)],
#
# computed in log space. A causal head sees exactly x_0..t at position t, so it can be scored
# against this posterior in bits. A good head has to route: attend to the signal positions
# (content-based: their keys differ from the distractors') and read their values.

@checked
def _sources_shapes(means: Float[Tensor, "K d_x"], distractor: Float[Tensor, " d_x"]):
    """A ``SourcesTask``'s shapes, in the annotations: ``checked`` names a field whose shape is wrong."""


@checked
@dataclass(frozen=True)
class SourcesTask:
    """The generative model. ``means`` is (K, d_x), one row per source; ``distractor`` is (d_x,).
    Make one with ``sources_task``."""

    means: torch.Tensor
    distractor: torch.Tensor
    signal_prob: Real(0.0, 1.0, low_open=True)
    noise: Positive
    seq_len: Whole(1)

    def __post_init__(self):
        """The fields checked where they are set, also for a task built directly (not by ``sources_task``)."""
        _sources_shapes(self.means, self.distractor)
        declared_fields(self)   # frozen: the checked value replaces the given one

    @property
    def n_sources(self):
        return self.means.shape[0]

    @property
    def d_x(self):
        return self.means.shape[1]

    @checked
    def sample(self, n_seqs: Whole(1), seed: Seed = 0, dtype=torch.float32):
        """``n_seqs`` sequences, a ``Sample``: x (B, T, d_x), y (B, T) (the source, the same along a
        sequence), is_signal (B, T) (True where x_t came from the source rather than the distractor)
        and the exact ``posterior`` (B, T, K)."""
        B, T = n_seqs, self.seq_len
        dtype = _validate.float_dtype("dtype", dtype)
        gen = torch.Generator().manual_seed(seed)
        z = torch.randint(0, self.n_sources, (B,), generator=gen)
        is_signal = torch.rand(B, T, generator=gen, dtype=torch.float64) < self.signal_prob
        centres = torch.where(is_signal[..., None], self.means[z][:, None, :], self.distractor)
        x = centres + self.noise * torch.randn(B, T, self.d_x, generator=gen, dtype=torch.float64)
        return Sample(x.to(dtype), z[:, None].expand(B, T).clone(), self, is_signal)

    @checked
    def _densities(self, x: Float[Array, "B T d_x"]):
        """log N(x_t; mu_z, noise^2 I) for every source, (B, T, K), and log N(x_t; mu_D, noise^2 I),
        (B, T, 1), float64, constants dropped (the same in both)."""
        if x.shape[-1] != self.d_x:
            _validate.fail("x", f"shape (B, T, d_x={self.d_x})", x)
        x = _validate.finite_values("x", torch.as_tensor(x)).to(torch.float64)
        var = self.noise ** 2
        means, distractor = self.means.to(x.device), self.distractor.to(x.device)  # x may be on a GPU
        log_source = -((x[..., None, :] - means) ** 2).sum(-1) / (2 * var)       # (B, T, K)
        log_distractor = -((x - distractor) ** 2).sum(-1, keepdim=True) / (2 * var)  # (B, T, 1)
        return log_source, log_distractor

    def log_likelihoods(self, x: Float[Array, "B T d_x"]) -> Float[Tensor, "B T K"]:
        """log p(x_t | z) for every position and source, (B, T, K), float64 (constants dropped)."""
        log_source, log_distractor = self._densities(x)
        if self.signal_prob == 1:  # no distractors at all (log(1 - rho) would be log 0)
            return log_source
        return torch.logaddexp(math.log(self.signal_prob) + log_source,
                               math.log1p(-self.signal_prob) + log_distractor)

    def posterior(self, x: Float[Array, "B T d_x"]) -> Float[Tensor, "B T K"]:
        """The exact posterior p(z | x_0..t) at every position, (B, T, K), float64: what a causal
        Bayes-optimal predictor outputs."""
        return torch.softmax(self.log_likelihoods(x).cumsum(dim=1), dim=-1)

    def signal_log_odds(self, x: Float[Array, "B T d_x"]) -> Float[Tensor, "B T"]:
        """log p(signal | x_t) / p(distractor | x_t) for every observation alone, (B, T), float64:
        how sure one observation is that it came from a source (chapter 4's content oracle); +inf
        everywhere when ``signal_prob`` is 1 (no distractors: every observation is a source's)."""
        log_source, log_distractor = self._densities(x)
        if self.signal_prob == 1:
            return torch.full(log_source.shape[:2], math.inf, dtype=log_source.dtype, device=log_source.device)
        signal = torch.logsumexp(log_source, -1) + math.log(self.signal_prob / self.n_sources)
        return signal - (log_distractor[..., 0] + math.log1p(-self.signal_prob))

    def observation_posterior(self, x: Float[Array, "B T d_x"]) -> Float[Tensor, "B T K"]:
        """p(z | x_t) from one observation alone, (B, T, K): how much a single value can know."""
        return torch.softmax(self.log_likelihoods(x), dim=-1)

    @checked
    def bayes_loss(self, x: Float[Array, "B T d_x"], y: Int[Tensor, "B T"]) -> float:
        """The cross-entropy (nats) of the exact posterior on (x, y): the floor no model can beat on average."""
        post = self.posterior(x)
        _validate.labels("y", y, self.n_sources)
        return -torch.log(post.gather(-1, y[..., None].long()).clamp_min(1e-300)).mean().item()

    @checked
    def kl_bits_by_position(self, logits: Float[Tensor, "B T K"], x: Float[Array, "B T d_x"]) -> Float[Tensor, " T"]:
        """KL(p_Bayes || p_model) in bits at every position, the mean over the sequences: (T,) float64.
        Arguments in ``diagnostics.kl_bits``'s order: the model's logits (B, T, K), then the data."""
        post = self.posterior(x)
        if logits.shape[-1] != self.n_sources:
            _validate.fail("logits", f"shape (B, T, K={self.n_sources}): one logit per source", logits)
        _validate.finite_values("logits", logits)
        log_model = torch.log_softmax(logits.detach().to(post.device, torch.float64), dim=-1)
        return diagnostics.kl_divergence(post, log_model, bits=True).mean(0)

    def kl_bits(self, logits: Float[Tensor, "B T K"], x: Float[Array, "B T d_x"]) -> float:
        """Mean KL(p_Bayes || p_model) in bits over positions: how far a model is from the exact posterior."""
        return self.kl_bits_by_position(logits, x).mean().item()


@checked
def sources_task(n_sources: Whole(2) = 3, d_x=12, seq_len=16, signal_prob=0.4, noise=1.0, separation: Positive = 3.0,
                 seed: Seed = 0):
    """Draw K source means and one distractor mean, each at distance ``separation`` from the origin.

    Random directions in d_x >= K + 1 dimensions are nearly orthogonal, so every pair of means is
    about separation * sqrt(2) apart: a single observation is informative but ambiguous, and a few
    signal positions pin the source down.
    """
    d_x = _validate.integer("d_x", d_x, n_sources + 1)
    gen = torch.Generator().manual_seed(seed)
    directions = torch.randn(n_sources + 1, d_x, generator=gen, dtype=torch.float64)
    directions = separation * directions / directions.norm(dim=1, keepdim=True)
    return SourcesTask(means=directions[:n_sources], distractor=directions[n_sources],
                       signal_prob=signal_prob, noise=noise, seq_len=seq_len)


@checked
@dataclass(frozen=True)
class CuedSourcesTask:
    """Chapter 4's toy with its distractor replaced by a second source, and a cue: a task in which
    the values need routing. Each sequence has two hidden sources (z_A, z_B, independent, uniform
    over the K ``means``) and a cue c (A or B, at every position) that says which one is the
    target. A position comes from the cued source with probability ``signal_prob``, else from the
    other. The content coordinates (all but the last two) are mu_z + noise; the last two are exact:
    +-``tag`` for the stream (A or B) and +-``tag`` for the cue. Averaging over all positions mixes
    the two sources, and a linear readout cannot undo the mix (it would have to multiply the cue by
    the stream tags), so the head must route: attend where stream == cue, which the query can see.

    The cued positions are known from x (stream tag times cue > 0), so the exact posterior is chapter
    4's with the uncued positions left out. Make one with ``cued_sources_task``."""

    means: torch.Tensor   # (K, d_x), zero in the last two (tag) coordinates
    signal_prob: Real(0.0, 1.0, low_open=True)
    noise: Positive
    seq_len: Whole(1)
    tag: Positive

    def __post_init__(self):
        """The fields checked where they are set, as a ``SourcesTask``'s, also for a task built directly."""
        declared_fields(self)

    n_sources, d_x = SourcesTask.n_sources, SourcesTask.d_x
    posterior, observation_posterior = SourcesTask.posterior, SourcesTask.observation_posterior
    bayes_loss, kl_bits_by_position, kl_bits = SourcesTask.bayes_loss, SourcesTask.kl_bits_by_position, SourcesTask.kl_bits

    @checked
    def sample(self, n_seqs: Whole(1), seed: Seed = 0, dtype=torch.float32):
        """``n_seqs`` sequences, a ``Sample``: x (B, T, d_x), y (B, T) (the cued source), is_signal
        (B, T) (True where x_t came from the cued source) and the exact ``posterior`` (B, T, K)."""
        B, T = n_seqs, self.seq_len
        dtype = _validate.float_dtype("dtype", dtype)
        gen = torch.Generator().manual_seed(seed)
        z = torch.randint(0, self.n_sources, (B, 2), generator=gen)           # sources of streams A, B
        cue = torch.randint(0, 2, (B,), generator=gen)                        # 0: A is asked for, 1: B
        is_signal = torch.rand(B, T, generator=gen, dtype=torch.float64) < self.signal_prob
        stream = torch.where(is_signal, cue[:, None], 1 - cue[:, None])       # (B, T): 0 = A, 1 = B
        x = self.means[z.gather(1, stream)] + self.noise * torch.randn(B, T, self.d_x, generator=gen, dtype=torch.float64)
        x[..., -2] = self.tag * (1 - 2 * stream)
        x[..., -1] = self.tag * (1 - 2 * cue)[:, None]
        y = z.gather(1, cue[:, None]).expand(B, T).clone()
        return Sample(x.to(dtype), y, self, is_signal)

    @checked
    def log_likelihoods(self, x: Float[Array, "B T d_x"]) -> Float[Tensor, "B T K"]:
        """log p(x_t | z) for every position and source, (B, T, K), float64 (constants dropped): 0 at
        the positions of the other stream, which say nothing about the cued source."""
        if x.shape[-1] != self.d_x:
            _validate.fail("x", f"shape (B, T, d_x={self.d_x})", x)
        x = _validate.finite_values("x", torch.as_tensor(x)).to(torch.float64)
        content = -((x[..., None, :-2] - self.means[:, :-2].to(x.device)) ** 2).sum(-1) / (2 * self.noise ** 2)
        return content * (x[..., -2:-1] * x[..., -1:] > 0)


@checked
def cued_sources_task(n_sources: Whole(2) = 3, d_x=12, seq_len: Whole(1) = 16,
                      signal_prob: Real(0.0, 1.0, low_open=True) = 0.25, noise: Positive = 1.0,
                      separation: Positive = 2.0, seed: Seed = 0):
    """K source means at distance ``separation`` from the origin in the first d_x - 2 coordinates
    (the last two carry the stream tag and the cue, of size ``separation``). See ``CuedSourcesTask``."""
    d_x = _validate.integer("d_x", d_x, n_sources + 2)
    gen = torch.Generator().manual_seed(seed)
    directions = torch.randn(n_sources, d_x - 2, generator=gen, dtype=torch.float64)
    means = torch.zeros(n_sources, d_x, dtype=torch.float64)
    means[:, :-2] = separation * directions / directions.norm(dim=1, keepdim=True)
    return CuedSourcesTask(means=means, signal_prob=signal_prob, noise=noise, seq_len=seq_len, tag=separation)
