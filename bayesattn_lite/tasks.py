"""Sequence tasks whose Bayes-optimal prediction is known exactly.

The paper's *sticky Markov chain* (section 5.2 of the paper; settings from the authors' public
code, ``vishalmisra/bayesian-wind-tunnel``), and below it Paper I's three *Bayesian wind tunnels*
(``BijectionTask``, ``HMMTask``, ``AssociativeRecallTask``, by name through ``wind_tunnel``)::

    chain = StickyMarkovChain()              # 8 symbols, self-probability 0.3, 20-D embeddings
    x, y = chain.sample(T=2000, seed=42)     # x: (1999, 20) noisy embeddings, y: (1999,) next symbols
    p = chain.bayes_predictive(x)            # (1999, 8): exact p(y_t | x_0..x_t), forward filter

The generative model. A hidden symbol path s_0, s_1, ..., s_{T-1} is a Markov chain with transition
matrix P (first symbol uniform, which is also the stationary law: P is circulant). Position t shows
a noisy view of the *current* symbol and asks for the *next* one::

    x[t] = mu[s_t] + noise * N(0, I),    y[t] = s_{t+1},    t = 0 .. T-2

so x[t] is a noisy view of y[t-1]. The exact predictor is an HMM forward filter with Gaussian
emissions N(mu_s, noise^2 I): filter s_t from x_0..x_t, then push the belief through P.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch


def _fail(what, expected, given):
    raise ValueError(f"{what}: expected {expected}, got {given!r}")


def _check_int(what, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        _fail(what, f"an int >= {minimum}", value)
    return int(value)


def _check_seed(what, seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        _fail(what, "an int in [0, 2**63)", seed)
    return int(seed)


def circular_distance(n):
    """(n, n) matrix of distances between symbols placed on a circle: min(|i-j|, n-|i-j|)."""
    i = np.arange(n)
    d = np.abs(i[:, None] - i[None, :])
    return np.minimum(d, n - d)


def sticky_transition_matrix(n_symbols=8, self_prob=0.3):
    """The authors' transition matrix, row-normalised.

    Row i: ``self_prob`` on i itself, and ``(1 - self_prob) * (1/d_ij) / (1 + sum_j' 1/d_ij')`` on
    each other j (d = circular distance): their normalising sum counts the diagonal with weight 1,
    so the row sums to less than 1 and the final renormalisation raises the diagonal. With the
    paper's settings row 0 is [0.3498, 0.166, 0.083, 0.0553, 0.0415, 0.0553, 0.083, 0.166].
    """
    n = _check_int("n_symbols", n_symbols, 2)
    if isinstance(self_prob, bool) or not isinstance(self_prob, (int, float)) or not 0.0 <= self_prob <= 1.0:
        _fail("self_prob", "a probability in [0, 1]", self_prob)
    d = circular_distance(n).astype(np.float64)
    inverse = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)  # 0 on the diagonal
    P = (1.0 - self_prob) * inverse / (1.0 + inverse.sum(axis=1, keepdims=True))
    np.fill_diagonal(P, self_prob)
    return P / P.sum(axis=1, keepdims=True)


class StickyMarkovChain:
    """The sticky Markov chain of the paper: sampler, transition matrix and exact predictor.

    ``self_prob`` is the authors' stickiness parameter *before* their renormalisation (0.3 gives a
    diagonal of 0.3498 for 8 symbols). ``means`` (the symbol embeddings mu, (n_symbols, d_embed))
    are N(0, 1) entries drawn once from ``torch.Generator().manual_seed(embed_seed)``, so every
    seed's sequence uses the same embeddings. ``noise`` is the standard deviation of the Gaussian
    observation noise.
    """

    def __init__(self, n_symbols=8, self_prob=0.3, d_embed=20, noise=1.0, embed_seed=0):
        self.n_symbols = _check_int("n_symbols", n_symbols, 2)
        self.d_embed = _check_int("d_embed", d_embed, 1)
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (math.isfinite(noise) and noise > 0):
            _fail("noise", "a positive finite standard deviation", noise)
        self.transition_matrix = sticky_transition_matrix(self.n_symbols, self_prob)  # numpy float64
        self.self_prob = float(self_prob)
        self.noise = float(noise)
        self.embed_seed = _check_seed("embed_seed", embed_seed)
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
        through noise, so no model can reach it: ``bayes_predictive`` gives the attainable bound.
        """
        return float(self.row_entropies.mean())

    # ------------------------------------------------------------------------- sampling

    def sample_symbols(self, T, seed):
        """The hidden path s_0..s_{T-1} (int64 numpy), from ``numpy.random.default_rng(seed)``."""
        T = _check_int("T", T, 2)
        rng = np.random.default_rng(_check_seed("seed", seed))
        cumulative = np.cumsum(self.transition_matrix, axis=1)
        cumulative[:, -1] = 1.0  # guard against rounding: every uniform draw lands in some column
        draws = rng.random(T)
        s = np.empty(T, dtype=np.int64)
        s[0] = min(int(draws[0] * self.n_symbols), self.n_symbols - 1)  # uniform first symbol
        for t in range(1, T):
            s[t] = np.searchsorted(cumulative[s[t - 1]], draws[t], side="right")
        return s, rng

    def sample(self, T, seed, dtype=torch.float32, device="cpu"):
        """One sequence of ``T`` symbols as a next-symbol task: ``(x, y)`` with T - 1 rows.

        x[t] = mu[s_t] + noise * N(0, I) (a noisy view of symbol t) and y[t] = s_{t+1}. The path
        and then the noise come from ``numpy.random.default_rng(seed)``: the same seed gives the
        same sequence on every machine.
        """
        s, rng = self.sample_symbols(T, seed)
        eps = rng.standard_normal((T - 1, self.d_embed))
        x = self.means.numpy()[s[:-1]] + self.noise * eps
        return (torch.as_tensor(x, dtype=dtype, device=device),
                torch.as_tensor(s[1:], dtype=torch.int64, device=device))

    # ------------------------------------------------------------------------- exact predictor

    def _check_x(self, x):
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] != self.d_embed:
            _fail("x", f"a torch.Tensor of shape (..., T-1, d_embed={self.d_embed})",
                  tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__)
        if not x.is_floating_point():
            _fail("x.dtype", "a floating-point dtype", x.dtype)

    def bayes_predictive(self, x):
        """Exact p(y_t | x_0..x_t) for every t, by the forward filter; shape (..., T-1, n_symbols).

        Computed in float64 on x's device whatever x's dtype. The belief over the current symbol
        is kept normalised at every step (filtering in probabilities, with the emission
        log-likelihoods shifted by their maximum), so long sequences neither under- nor overflow.
        """
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

    def bayes_metrics(self, x, y):
        """Loss (cross-entropy, nats), predictive entropy (nats) and accuracy of the exact predictor.

        Means over positions (and over any leading axes of x); floats.
        """
        p = self.bayes_predictive(x)
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(p.shape[:-1]):
            _fail("y", f"an integer tensor of shape {tuple(p.shape[:-1])}", getattr(y, "shape", y))
        y = y.to(p.device).long()
        loss = -torch.log(p.gather(-1, y.unsqueeze(-1))).mean()
        entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1).mean()
        accuracy = (p.argmax(-1) == y).double().mean()
        return {"loss": loss.item(), "entropy": entropy.item(), "accuracy": accuracy.item()}


# ============================================================================= Bayesian wind tunnels
#
# Paper I's three tasks, one per inference primitive, each with its exact Bayes posterior so that a
# model can be scored in bits against the optimum. Every task samples a whole batch at once:
#
#     task = wind_tunnel("bijection")              # CPU-sized; wind_tunnel("hmm", "paper") for the GPU
#     batch = task.sample(64, seed=0)              # WindTunnelBatch: tokens, targets, posterior, mask
#
# The targets are samples of the *true* hidden answer (the actual value, the actual hidden state),
# not of the posterior's mode, so the expected cross-entropy is minimised exactly by the posterior:
# a model trained by cross-entropy should learn batch.posterior at every scored position.

IGNORE_INDEX = -100  # targets at positions that are not scored (torch's cross_entropy default)


@dataclass
class WindTunnelBatch:
    """One batch of a wind tunnel. B sequences of T tokens, C = task.n_classes.

    tokens     (B, T) int64 inputs in [0, task.vocab_size)
    targets    (B, T) int64 classes in [0, C) to predict; IGNORE_INDEX (-100) where not scored
    posterior  (B, T, C) float32 exact Bayes posterior of the target given tokens[:, :t+1]; 0 where not scored
    mask       (B, T) bool, True where the position is scored
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    posterior: torch.Tensor
    mask: torch.Tensor

    def to(self, device):
        """A new batch with every tensor on ``device``."""
        return WindTunnelBatch(*(t.to(device) for t in (self.tokens, self.targets, self.posterior, self.mask)))

    def __len__(self):
        return self.tokens.shape[0]


def _generator(seed, generator):
    """The torch.Generator a sampler draws from: a fresh one seeded by ``seed``, the one given, or
    None (torch's global generator) when neither is given."""
    if seed is not None and generator is not None:
        raise ValueError("sample: expected at most one of seed and generator, got both")
    if seed is not None:
        return torch.Generator().manual_seed(_check_seed("seed", seed))
    if generator is not None and not isinstance(generator, torch.Generator):
        _fail("generator", "a torch.Generator", generator)
    return generator


def _check_prob(what, value, low, high, closed_high=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (low <= value and (value <= high if closed_high else value < high)):
        _fail(what, f"a number in [{low}, {high}{']' if closed_high else ')'}", value)
    return float(value)


def _horizon(task, horizon, name, default, minimum, maximum=None):
    """The one keyword a task's ``sample`` accepts to change its length (e.g. HMMTask: K)."""
    unknown = set(horizon) - {name}
    if unknown:
        _fail(f"{type(task).__name__}.sample keyword", f"only {name}=...", sorted(unknown)[0])
    value = _check_int(name, horizon.get(name, default), minimum)
    if maximum is not None and value > maximum:
        _fail(name, f"an int in [{minimum}, {maximum}]", value)
    return value


class _WindTunnel:
    """What the three wind tunnels share: a name and a primitive, a repr of the constructor's
    settings, and the checks at the start of ``sample``, which accepts one keyword (``horizon``,
    e.g. "K" for the HMM) to change the length of the sequences."""

    name = primitive = horizon = None
    settings = ()  # constructor arguments, in order, for repr

    def __repr__(self):
        return f"{type(self).__name__}(" + ", ".join(f"{k}={getattr(self, k):g}" for k in self.settings) + ")"

    def _begin(self, batch_size, seed, generator, horizon, maximum=None):
        """(batch size, horizon value, torch.Generator or None) from ``sample``'s arguments, checked."""
        B = _check_int("batch_size", batch_size, 1)
        length = _horizon(self, horizon, self.horizon, getattr(self, self.horizon), 1, maximum)
        return B, length, _generator(seed, generator)


def _uniform_ints(high, shape, gen):
    return torch.randint(0, high, shape, generator=gen)


def _random_permutations(batch_size, n, gen):
    """(batch_size, n) int64: one independent uniform permutation of 0..n-1 per row."""
    return torch.rand(batch_size, n, generator=gen).argsort(dim=-1)


class BijectionTask(_WindTunnel):
    """Bijection elimination (belief *accumulation*), Paper I's first wind tunnel.

    A fresh uniform bijection pi of {0..V-1} per sequence; L distinct keys k_1..k_L (drawn without
    replacement); the sequence is ``k_1 v_1 k_2 v_2 ... k_L v_L`` with v_i = pi(k_i). Key tokens are
    0..V-1, value tokens V..2V-1 (so vocab_size = 2V); the model is scored at each key token, where it
    must predict v_i (n_classes = V). Having seen i-1 pairs, the answer is uniform over the
    V - i + 1 values not yet used, entropy log2(V - i + 1) bits: the model must accumulate which
    values are gone.

    CPU default V = 8, L = 7 (seq_len 14); ``BijectionTask.paper()`` is V = 20, L = 19 (seq_len 38).
    ``sample(..., L=...)`` draws another number of pairs (1 <= L <= V).
    """

    name, primitive, horizon, settings = "bijection", "accumulation", "L", ("V", "L")

    def __init__(self, V=8, L=None):
        self.V = _check_int("V", V, 2)
        self.L = _check_int("L", self.V - 1 if L is None else L, 1)
        if self.L > self.V:
            _fail("L", f"at most V={self.V} pairs (keys are drawn without replacement)", self.L)
        self.vocab_size, self.n_classes = 2 * self.V, self.V

    @classmethod
    def paper(cls):
        return cls(V=20, L=19)

    @property
    def seq_len(self):
        return 2 * self.L

    def sample(self, batch_size, seed=None, generator=None, **horizon):
        B, L, gen = self._begin(batch_size, seed, generator, horizon, maximum=self.V)
        pi = _random_permutations(B, self.V, gen)
        keys = _random_permutations(B, self.V, gen)[:, :L]
        values = pi.gather(1, keys)
        return self.batch_from_pairs(keys, values)

    def baseline_posterior(self, batch):
        """What a predictor without the primitive (no accumulation) can do: uniform over all V values
        at every scored position (0 elsewhere). Its error is the task's scale: log2 V - log2(V - i + 1)."""
        return batch.mask[..., None].float() / self.V * torch.ones(self.V)

    def batch_from_pairs(self, keys, values):
        """The batch for given (B, L) keys and values (used by sample, and by tests on hand-made cases)."""
        B, L = keys.shape
        tokens = torch.stack([keys, values + self.V], dim=-1).reshape(B, 2 * L)
        # values used before pair i: used[b, i, v] = v in values[b, :i]
        onehot = torch.nn.functional.one_hot(values, self.V).float()
        used = torch.cumsum(onehot, dim=1) - onehot
        free = (used == 0).float()
        posterior = torch.zeros(B, 2 * L, self.V)
        posterior[:, 0::2] = free / free.sum(-1, keepdim=True)
        targets = torch.full((B, 2 * L), IGNORE_INDEX, dtype=torch.int64)
        targets[:, 0::2] = values
        mask = targets != IGNORE_INDEX
        return WindTunnelBatch(tokens, targets, posterior, mask)


def quantised_stochastic_rows(n_rows, n_cols, batch_size, resolution, floor, gen):
    """(batch_size, n_rows, n_cols) float64 row-stochastic matrices, as in Paper I's HMM wind tunnel.

    Each row is Dirichlet(1) (normalised Exp(1) draws), raised to at least ``floor`` and renormalised,
    then rounded to multiples of ``resolution`` and fixed to sum to exactly 1 on that grid: units are
    added to the smallest entries or taken from the largest (never below the floor). Returned with the
    integer grid units, (…, n_cols) int64, which are the tokens the model reads.
    """
    n_units = round(1 / resolution)
    floor_units = round(floor / resolution)
    raw = -torch.log(torch.rand(batch_size, n_rows, n_cols, generator=gen, dtype=torch.float64).clamp_min(1e-300))
    p = raw / raw.sum(-1, keepdim=True)
    p = p.clamp_min(floor)
    p = p / p.sum(-1, keepdim=True)
    units = torch.round(p * n_units).long().clamp_min(floor_units)
    for _ in range(n_cols * n_units):  # each pass moves every unbalanced row one unit toward its total
        diff = n_units - units.sum(-1)
        if not diff.any():
            break
        grow = (diff > 0).long().unsqueeze(-1) * torch.nn.functional.one_hot(units.argmin(-1), n_cols)
        shrink = (diff < 0).long().unsqueeze(-1) * torch.nn.functional.one_hot(units.argmax(-1), n_cols)
        units = units + grow - shrink
    return units.double() / n_units, units


def forward_filter(transition, emission, observations, initial=None):
    """p(s_t | o_0..o_t) for every t: the HMM forward algorithm, normalised at every step.

    transition (B, S, S), emission (B, S, O) row-stochastic; observations (B, K) int64; initial (B, S)
    or None for uniform. Returns (B, K, S) in the dtype of ``transition``.
    """
    B, S, _ = transition.shape
    belief = (torch.full((B, S), 1.0 / S, dtype=transition.dtype) if initial is None else initial)
    out = []
    for t in range(observations.shape[1]):
        if t > 0:
            belief = torch.einsum("bs,bsr->br", belief, transition)  # predict: push through the dynamics
        lik = emission.gather(2, observations[:, t].view(B, 1, 1).expand(B, S, 1)).squeeze(-1)
        belief = belief * lik                                        # update: weigh by the evidence
        belief = belief / belief.sum(-1, keepdim=True)
        out.append(belief)
    return torch.stack(out, dim=1)


class HMMTask(_WindTunnel):
    """HMM filtering (belief *transport*), Paper I's second wind tunnel.

    Per sequence: a transition matrix A (S x S) and an emission matrix E (S x O), rows Dirichlet(1),
    floored at ``floor`` and rounded to ``resolution`` (``quantised_stochastic_rows``); a hidden path
    s_0 ~ uniform, s_t ~ A[s_{t-1}]; observations o_t ~ E[s_t], t = 0..K-1.

    Tokenisation (ours; the authors add marker tokens, which carry no information at fixed positions):
    the S*S entries of A row by row, then the S*O entries of E row by row, each as the token of its
    grid level (probability p -> token round(p / resolution), 0..1/resolution), then the K
    observations as tokens 1/resolution + 1 + o. So vocab_size = 1/resolution + 1 + O and
    seq_len = S*S + S*O + K. Scored: each observation position, target the true hidden state s_t
    (n_classes = S), posterior the exact filter p(s_t | A, E, o_0..o_t) computed from the *rounded*
    matrices the model reads (``forward_filter``).

    CPU default S = O = 3, K = 12, resolution 0.05 (21 probability tokens); ``HMMTask.paper()`` is
    S = O = 5, K = 20, resolution 0.01, as Paper I. ``sample(..., K=30)`` evaluates at a longer
    horizon than trained (a model needs max_len >= the longer seq_len).
    """

    name, primitive, horizon, settings = "hmm", "transport", "K", ("S", "O", "K", "resolution", "floor")

    def __init__(self, S=3, O=3, K=12, resolution=0.05, floor=0.05):
        self.S, self.O, self.K = _check_int("S", S, 2), _check_int("O", O, 2), _check_int("K", K, 1)
        self.resolution = _check_prob("resolution", resolution, 0.0, 0.5, closed_high=True)
        if self.resolution == 0 or abs(1 / self.resolution - round(1 / self.resolution)) > 1e-9:
            _fail("resolution", "1/n for an integer n >= 2 (e.g. 0.05 or 0.01)", resolution)
        self.floor = _check_prob("floor", floor, 0.0, 1.0)
        units = self.floor / self.resolution
        if abs(units - round(units)) > 1e-9 or self.floor * max(self.S, self.O) > 1:
            _fail("floor", f"a multiple of resolution={self.resolution:g} with floor * max(S, O) <= 1", floor)
        self.n_levels = round(1 / self.resolution) + 1
        self.vocab_size, self.n_classes = self.n_levels + self.O, self.S
        self.prefix_len = self.S * self.S + self.S * self.O

    @classmethod
    def paper(cls):
        return cls(S=5, O=5, K=20, resolution=0.01, floor=0.05)

    @property
    def seq_len(self):
        return self.prefix_len + self.K

    def sample(self, batch_size, seed=None, generator=None, **horizon):
        B, K, gen = self._begin(batch_size, seed, generator, horizon)
        A, A_units = quantised_stochastic_rows(self.S, self.S, B, self.resolution, self.floor, gen)
        E, E_units = quantised_stochastic_rows(self.S, self.O, B, self.resolution, self.floor, gen)
        states = torch.empty(B, K, dtype=torch.int64)
        obs = torch.empty(B, K, dtype=torch.int64)
        rows = torch.arange(B)
        state = _uniform_ints(self.S, (B,), gen)
        for t in range(K):
            if t > 0:
                state = torch.multinomial(A[rows, state], 1, generator=gen).squeeze(-1)
            states[:, t] = state
            obs[:, t] = torch.multinomial(E[rows, state], 1, generator=gen).squeeze(-1)
        return self.batch_from_parts(A_units, E_units, obs, states)

    def baseline_posterior(self, batch):
        """What a predictor without the primitive (no transport) can do: p(s_t | E, o_t) from the
        current observation alone, the filter with every step's prior reset to uniform (0 where not scored)."""
        E = (batch.tokens[:, self.S * self.S:self.prefix_len].double() * self.resolution).view(-1, self.S, self.O)
        obs = (batch.tokens[:, self.prefix_len:] - self.n_levels).clamp(0, self.O - 1)
        lik = E.gather(2, obs[:, None, :].expand(-1, self.S, -1)).transpose(1, 2)    # (B, K, S)
        out = torch.zeros(batch.posterior.shape)
        out[:, self.prefix_len:] = (lik / lik.sum(-1, keepdim=True)).float()
        return out * batch.mask[..., None]

    def batch_from_parts(self, A_units, E_units, observations, states):
        """The batch for given grid units of A (B, S, S) and E (B, S, O), observations and states (B, K)."""
        B, K = observations.shape
        A = A_units.double() * self.resolution
        E = E_units.double() * self.resolution
        prefix = torch.cat([A_units.reshape(B, -1), E_units.reshape(B, -1)], dim=1)
        tokens = torch.cat([prefix, observations + self.n_levels], dim=1)
        T = self.prefix_len + K
        posterior = torch.zeros(B, T, self.S)
        posterior[:, self.prefix_len:] = forward_filter(A, E, observations).float()
        targets = torch.full((B, T), IGNORE_INDEX, dtype=torch.int64)
        targets[:, self.prefix_len:] = states
        return WindTunnelBatch(tokens, targets, posterior, targets != IGNORE_INDEX)


class AssociativeRecallTask(_WindTunnel):
    """Associative recall with noisy bindings (random-access *binding*), our third wind tunnel.

    Per sequence each of ``n_keys`` keys has a hidden true value v*(k), uniform over ``n_values``.
    The sequence is ``n_pairs`` pairs ``k_1 w_1 k_2 w_2 ...``: keys drawn uniformly *with*
    replacement, so a key may be shown several times or never; each shown value w_i is the true
    value v*(k_i) with probability 1 - noise, and otherwise one of the other n_values - 1 values,
    uniformly. Key tokens are 0..n_keys-1, value tokens n_keys..n_keys+n_values-1.

    Scored: every key token, target the true value v*(k_i) (n_classes = n_values). The exact
    posterior reads only the earlier pairs with the *same* key: if among them value v was shown
    c_v times out of n,

        p(v*(k_i) = v | context) ∝ (1 - noise)^c_v * (noise / (n_values - 1))^(n - c_v),

    uniform (log2 n_values bits) at a key's first appearance, sharp after concordant repeats, spread
    after conflicting ones. So the posterior is non-trivial everywhere, and a model must find the
    earlier pairs of this key by content (binding) and count their values (accumulation).
    With noise = 0 it is the classic recall: one-hot after the first sighting.

    The authors' recall task has no noise (its posterior is one-hot); ours is a documented choice.
    CPU default 6 keys, 6 values, 12 pairs, noise 0.2 (seq_len 24); ``paper()`` is 20 keys,
    20 values, 40 pairs, noise 0.1 (Paper I's V = 20 scale). ``sample(..., n_pairs=...)`` changes
    the number of pairs.
    """

    name, primitive, horizon, settings = "recall", "binding", "n_pairs", ("n_keys", "n_values", "n_pairs", "noise")

    def __init__(self, n_keys=6, n_values=6, n_pairs=12, noise=0.2):
        self.n_keys = _check_int("n_keys", n_keys, 1)
        self.n_values = _check_int("n_values", n_values, 2)
        self.n_pairs = _check_int("n_pairs", n_pairs, 1)
        self.noise = _check_prob("noise", noise, 0.0, (self.n_values - 1) / self.n_values)
        self.vocab_size, self.n_classes = self.n_keys + self.n_values, self.n_values

    @classmethod
    def paper(cls):
        return cls(n_keys=20, n_values=20, n_pairs=40, noise=0.1)

    @property
    def seq_len(self):
        return 2 * self.n_pairs

    def sample(self, batch_size, seed=None, generator=None, **horizon):
        B, n, gen = self._begin(batch_size, seed, generator, horizon)
        true_values = _uniform_ints(self.n_values, (B, self.n_keys), gen)
        keys = _uniform_ints(self.n_keys, (B, n), gen)
        answer = true_values.gather(1, keys)
        corrupt = torch.rand(B, n, generator=gen) < self.noise
        shift = torch.randint(1, self.n_values, (B, n), generator=gen)  # another value, uniformly
        shown = torch.where(corrupt, (answer + shift) % self.n_values, answer)
        return self.batch_from_pairs(keys, shown, answer)

    def baseline_posterior(self, batch):
        """What a predictor without the primitive (no binding) can do: uniform over the values at every
        scored position (0 elsewhere); it cannot find the earlier pairs of the key it is asked about."""
        return batch.mask[..., None].float() / self.n_values * torch.ones(self.n_values)

    def batch_from_pairs(self, keys, shown, answer):
        """The batch for given (B, n) keys, shown values and true values of those keys."""
        B, n = keys.shape
        M = self.n_values
        tokens = torch.stack([keys, shown + self.n_keys], dim=-1).reshape(B, 2 * n)
        earlier = torch.ones(n, n).tril(-1).bool()                       # j < i
        same = (keys[:, :, None] == keys[:, None, :]) & earlier          # (B, i, j): earlier pair, same key
        counts = same.double() @ torch.nn.functional.one_hot(shown, M).double()   # c_v, (B, n, M)
        seen = counts.sum(-1, keepdim=True)
        log_lik = (torch.xlogy(counts, torch.tensor(1 - self.noise, dtype=torch.float64))
                   + torch.xlogy(seen - counts, torch.tensor(self.noise / (M - 1), dtype=torch.float64)))
        posterior = torch.zeros(B, 2 * n, M)
        posterior[:, 0::2] = torch.softmax(log_lik, dim=-1).float()
        targets = torch.full((B, 2 * n), IGNORE_INDEX, dtype=torch.int64)
        targets[:, 0::2] = answer
        return WindTunnelBatch(tokens, targets, posterior, targets != IGNORE_INDEX)


WIND_TUNNELS = {"bijection": BijectionTask, "hmm": HMMTask, "recall": AssociativeRecallTask}


def wind_tunnel(name, size="cpu"):
    """A wind tunnel by name ("bijection", "hmm", "recall"), CPU-sized (``size="cpu"``, the
    constructor defaults) or at the paper's sizes (``size="paper"``, for a GPU)."""
    if name not in WIND_TUNNELS:
        _fail("name", f"one of {sorted(WIND_TUNNELS)}", name)
    if size not in ("cpu", "paper"):
        _fail("size", "'cpu' or 'paper'", size)
    cls = WIND_TUNNELS[name]
    return cls.paper() if size == "paper" else cls()
