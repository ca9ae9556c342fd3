"""Paper I's three *Bayesian wind tunnels*, one per inference primitive, each with its exact Bayes
posterior so that a model can be scored in bits against the optimum (chapters 7-9).

    task = wind_tunnels.wind_tunnel("bijection")   # CPU-sized; wind_tunnel("hmm", "paper") for the GPU
    batch = task.sample(64, seed=0)                # WindTunnelBatch: tokens, targets, posterior, mask

Every task samples a whole batch at once and follows the course's one task protocol
(``tasks.Task``: ``sample(n, seed)`` returns a batch with its exact ``posterior``). The targets are samples of the *true* hidden answer (the
actual value, the actual hidden state), not of the posterior's mode, so the expected cross-entropy is
minimised exactly by the posterior: a model trained by cross-entropy should learn batch.posterior at
every scored position.

Each wind tunnel is one class, registered in ``WIND_TUNNELS``, that also carries what the course
needs to know about it: ``converged_steps`` (the steps of the shipped, converged runs at each
scale) and ``test_horizons()`` (the longer horizons a trained model is also tested at). A training
run draws its batches from ``data_seed(seed, step)``, one stream per run seed.
"""

import inspect
import math
from dataclasses import dataclass
from typing import Annotated

import torch

from . import _validate
from ._types import Float, Int, OneOf, Real, Seed, SeedBelow, Tensor, Whole, checked

IGNORE_INDEX = -100  # targets at positions that are not scored (torch's cross_entropy default)

# ----------------------------------------------------------------------------- the training stream
# A training run draws the batch of each step with its own seed, data_seed(seed, step): one stream
# per run seed, the same after a resume, and far from the held-out seeds (12345, 54321). Under DDP
# each of ``world`` processes draws its own batches; with one process the stream is the same. The
# shipped models were trained on exactly these seeds, so the rule must not change.
DATA_SEED_BASE = 2**40
MAX_STEPS = 2**24  # steps per stream: one more would reach the next run seed's stream
MAX_SEED = 2**16   # run seeds below it keep every stream seed below 2**63 for up to 2**16 processes


@checked
def data_seed(seed: SeedBelow(MAX_SEED), step: Whole(0, MAX_STEPS - 1), rank=0, world: Whole(1, 2**16) = 1):
    """The seed of the training batch of run ``seed`` at ``step``, on process ``rank`` of ``world``:
    DATA_SEED_BASE + (seed * MAX_STEPS + step) * world + rank. Distinct for every (seed, step, rank)."""
    rank = _validate.integer("rank", rank, 0, world - 1)
    return DATA_SEED_BASE + (seed * MAX_STEPS + step) * world + rank


def _indices(what, value, high):
    """An integer tensor (its dtype and shape checked by the signature) with values in [0, high), as int64."""
    if value.numel() and (int(value.min()) < 0 or int(value.max()) >= high):
        _validate.fail(what, f"values in [0, {high - 1}]", f"values from {int(value.min())} to {int(value.max())}",
                       described=True)
    return value.long()  # int32 and int16 too: one_hot and gather want int64


def _distinct_rows(what, value):
    """Refuse a (B, L) tensor with a repeated entry in some row (the first such row named)."""
    ordered = value.sort(dim=-1).values
    repeated = (ordered[:, 1:] == ordered[:, :-1]).any(-1)
    if repeated.any():
        b = int(repeated.nonzero()[0, 0])
        _validate.fail(what, "distinct entries in every row (a bijection maps distinct keys to distinct values)",
                       f"a repeated entry in row {b}: {value[b].tolist()}", described=True)


@dataclass
class WindTunnelBatch:
    """One batch of a wind tunnel. B sequences of T tokens, C = task.n_classes.

    tokens     (B, T) int64 inputs in [0, task.vocab_size)
    targets    (B, T) int64 classes in [0, C) to predict; IGNORE_INDEX (-100) where not scored
    posterior  (B, T, C) float32 exact Bayes posterior of the target given tokens[:, :t+1]; 0 where not scored
    mask       (B, T) bool, True where the position is scored
    task       the name of the task class that made it ("" for a hand-made batch): a task refuses
               another task's batch even when the sizes happen to fit
    """
    _made_by = "task.sample(...)"   # in the message where one was expected (_types.words)

    tokens: torch.Tensor
    targets: torch.Tensor
    posterior: torch.Tensor
    mask: torch.Tensor
    task: str = ""

    def __post_init__(self):
        """Checked once, where it is made (a hand-made batch too): four tensors whose (B, T) agree."""
        for name, ndim in (("tokens", 2), ("targets", 2), ("posterior", 3), ("mask", 2)):
            value = getattr(self, name)
            if (not isinstance(value, torch.Tensor) or value.ndim != ndim or (name == "mask") != (value.dtype == torch.bool)
                    or value.shape[:2] != getattr(self.tokens, "shape", (None,))[:2]):
                _validate.fail(name, f"a{' bool' if name == 'mask' else ''} tensor with {ndim} axes, (B, T) as the "
                                     f"tokens' {tuple(getattr(self.tokens, 'shape', ()))}", value)
        if self.tokens.is_floating_point() or self.tokens.is_complex() or self.tokens.dtype == torch.bool:
            _validate.fail("tokens.dtype", "an integer dtype (token ids, torch.long)", self.tokens.dtype)
        # classes in [0, C), C = the posterior's last axis; IGNORE_INDEX where not scored
        _validate.labels("targets", self.targets[self.targets != IGNORE_INDEX], self.posterior.shape[-1])

    def to(self, device):
        """A new batch with every tensor on ``device``."""
        device = _validate.device("device", device)
        return WindTunnelBatch(*(t.to(device) for t in (self.tokens, self.targets, self.posterior, self.mask)), self.task)

    def __len__(self):
        return self.tokens.shape[0]


@checked
def _generator(seed: Seed | None, generator: torch.Generator | None):
    """The torch.Generator a sampler draws from: a fresh one seeded by ``seed``, the one given, or
    None (torch's global generator) when neither is given."""
    if seed is not None and generator is not None:
        _validate.fail("seed, generator", "at most one of them", "both", described=True)
    if seed is not None:
        return torch.Generator().manual_seed(seed)
    return generator


def _horizon(task, horizon, name, default, minimum, maximum=None):
    """The one keyword a task's ``sample`` accepts to change its length (e.g. HMMTask: K)."""
    unknown = sorted(set(horizon) - {name})
    if unknown:   # as Python says it for a misspelt keyword, with the near one (K for k, seed for sed)
        takes = [p for p in inspect.signature(type(task).sample).parameters if p not in ("self", "horizon")] + [name]
        near = _validate.near_name(unknown[0], takes)
        raise TypeError(f"wind_tunnels.{type(task).__name__}.sample(): got an unexpected keyword argument "
                        f"{unknown[0]!r}" + (f"; did you mean {near!r}?" if near else "") + f" (it takes {', '.join(takes)})")
    value = _validate.integer(name, horizon.get(name, default), minimum)
    if maximum is not None and value > maximum:
        _validate.fail(name, f"an int in [{minimum}, {maximum}]", value)
    return value


class WindTunnel:
    """What the three wind tunnels share: a name and a primitive, a repr of the constructor's
    settings, the checks at the start of ``sample``, which accepts one keyword (``horizon``,
    e.g. "K" for the HMM) to change the length of the sequences, and the test horizons."""

    _made_by = "wind_tunnels.wind_tunnel('hmm')"   # in the message where one was expected (_types.words)
    name = primitive = horizon = None
    settings = ()         # constructor arguments, in order, for repr
    converged_steps = {}  # {"small": steps, "paper": steps} of the converged runs (``converged``)
    test_ratios = ()      # the test horizons, as multiples of the trained one (``test_horizons``)

    def test_horizons(self):
        """The longer horizons a trained model is also tested at, as ``sample`` keywords:
        [{"K": 18}, {"K": 30}] for the HMM at K = 12; none for a task whose horizon cannot grow."""
        trained = getattr(self, self.horizon)
        return [{self.horizon: int(round(r * trained))} for r in self.test_ratios]

    def __repr__(self):
        return f"{type(self).__name__}(" + ", ".join(f"{k}={getattr(self, k):g}" for k in self.settings) + ")"

    @checked
    def _check_batch(self, batch: WindTunnelBatch):
        """A WindTunnelBatch of this task: made by this kind of task (``batch.task``, where it says), with
        this task's n_classes and tokens in its vocabulary (what a hand-made batch can be checked for)."""
        if batch.task and batch.task != type(self).__name__:
            _validate.fail("batch", f"a WindTunnelBatch of this task ({self!r}.sample(...))",
                           f"a batch of {batch.task}", described=True)
        top = int(batch.tokens.max()) if batch.tokens.numel() else 0
        if batch.posterior.shape[-1] != self.n_classes or top >= self.vocab_size:
            _validate.fail("batch", f"a WindTunnelBatch of this task ({self!r}.sample(...))",
                           f"a batch of {batch.posterior.shape[-1]} classes and tokens up to {top}",
                           described=True)
        return batch

    def _begin(self, batch_size, seed, generator, horizon, maximum=None):
        """(batch size, horizon value, torch.Generator or None) from ``sample``'s arguments, checked."""
        B = _validate.integer("batch_size", batch_size, 1)
        length = _horizon(self, horizon, self.horizon, getattr(self, self.horizon), 1, maximum)
        return B, length, _generator(seed, generator)


def _uniform_ints(high, shape, gen):
    return torch.randint(0, high, shape, generator=gen)


def _random_permutations(batch_size, n, gen):
    """(batch_size, n) int64: one independent uniform permutation of 0..n-1 per row."""
    return torch.rand(batch_size, n, generator=gen).argsort(dim=-1)


@checked
class BijectionTask(WindTunnel):
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
    # within 0.01 bits of the posterior after about half the steps, creeping down as the rate decays
    converged_steps = {"small": 3000, "paper": 50_000}  # Paper I's budget at the paper size

    @checked
    def __init__(self, V: Whole(2) = 8, L=None):
        self.V = V
        self.L = _validate.integer("L", self.V - 1 if L is None else L, 1)
        if self.L > self.V:
            _validate.fail("L", f"at most V={self.V} pairs (keys are drawn without replacement)", self.L)
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

    def token_groups(self):
        """The tokens by role, {name: token ids}: keys 0..V-1, values V..2V-1."""
        return {"keys": list(range(self.V)), "values": list(range(self.V, 2 * self.V))}

    def baseline_posterior(self, batch):
        """What a predictor without the primitive (no accumulation) can do: uniform over all V values
        at every scored position (0 elsewhere). Its error is the task's scale: log2 V - log2(V - i + 1)."""
        batch = self._check_batch(batch)
        return batch.mask[..., None].float() / self.V * torch.ones(self.V)

    @checked
    def batch_from_pairs(self, keys: Int[Tensor, "B L"], values: Int[Tensor, "B L"]) -> WindTunnelBatch:
        """The batch for given (B, L) keys and values (used by sample, and by tests on hand-made cases)."""
        keys = _indices("keys", keys, self.V)
        B, L = keys.shape
        values = _indices("values", values, self.V)
        if not 1 <= L <= self.V:
            _validate.fail("keys", f"(B, L) with 1 <= L <= V={self.V} pairs", keys)
        _distinct_rows("keys", keys)
        _distinct_rows("values", values)
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
        return WindTunnelBatch(tokens, targets, posterior, mask, type(self).__name__)


@checked
def quantised_stochastic_rows(n_rows: Whole(1), n_cols: Whole(1), batch_size: Whole(1),
                              resolution: Real(0, 1, low_open=True),
                              floor, gen: Annotated[torch.Generator, "torch.Generator().manual_seed(0)"] | None):
    """(batch_size, n_rows, n_cols) float64 row-stochastic matrices, as in Paper I's HMM wind tunnel.

    Each row is Dirichlet(1) (normalised Exp(1) draws), raised to at least ``floor`` and renormalised,
    then rounded to multiples of ``resolution`` and fixed to sum to exactly 1 on that grid: units are
    added to the smallest entries or taken from the largest (never below the floor). Returned with the
    integer grid units, (…, n_cols) int64, which are the tokens the model reads.
    """
    floor = _validate.real("floor", floor, 0, 1 / n_cols)   # every entry at least floor: n_cols floors fit in 1
    n_units = round(1 / resolution)
    if not math.isclose(n_units * resolution, 1.0, rel_tol=1e-9):
        _validate.fail("resolution", "1/n for a whole number n (a grid of n units per row)", resolution)
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


@checked
def forward_filter(transition: Float[Tensor, "B S S"], emission: Float[Tensor, "B S O"],
                   observations: Int[Tensor, "B K"], initial: Float[Tensor, "B S"] | None = None) -> Float[Tensor, "B K S"]:
    """p(s_t | o_0..o_t) for every t: the HMM forward algorithm, normalised at every step.

    transition (B, S, S), emission (B, S, O) row-stochastic; observations (B, K) int64; initial (B, S)
    or None for uniform. Returns (B, K, S) in the dtype of ``transition``.
    """
    B, S, O = emission.shape
    if S < 1 or O < 1:
        _validate.fail("emission", "shape (B, S, O) with S >= 1 states and O >= 1 symbols", emission)
    observations = _indices("observations", observations, O)
    matrices = [("transition", transition), ("emission", emission)] + ([("initial", initial)] if initial is not None else [])
    for name, m in matrices:  # probabilities: a belief pushed through anything else is not one
        _validate.finite_values(name, m)
        if (m < 0).any() or ((m.sum(-1) - 1).abs() > 1e-4).any():
            _validate.fail(name, "rows of probabilities (entries >= 0 summing to 1)",
                           f"row sums from {m.sum(-1).min().item():.4g} to {m.sum(-1).max().item():.4g} "
                           f"and a least entry of {m.min().item():.4g}", described=True)
    belief = (torch.full((B, S), 1.0 / S, dtype=transition.dtype) if initial is None else initial)
    out = []
    for t in range(observations.shape[1]):
        if t > 0:
            belief = torch.einsum("bs,bsr->br", belief, transition)  # predict: push through the dynamics
        lik = emission.gather(2, observations[:, t].view(B, 1, 1).expand(B, S, 1)).squeeze(-1)
        belief = belief * lik                                        # update: weigh by the evidence
        _possible(belief, observations, t)
        belief = belief / belief.sum(-1, keepdim=True)
        out.append(belief)
    if not out:   # no observations: no beliefs, (B, 0, S)
        return torch.empty(B, 0, S, dtype=transition.dtype, device=transition.device)
    return torch.stack(out, dim=1)


def _possible(weighed, observations, t):
    """Refuse observation t where no state the filter can be in emits it (its evidence is 0): the
    belief would be 0 / 0, NaN."""
    impossible = weighed.sum(-1) == 0
    if impossible.any():
        b = int(impossible.nonzero()[0, 0])
        _validate.fail(f"observations[{b}, {t}]", "a symbol that some state the chain can be in may emit (emission "
                       "probability > 0)", f"{int(observations[b, t])}, which no such state can emit", described=True)


@checked
class HMMTask(WindTunnel):
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
    # the slowest task, and flat over its second half at the CPU scale
    converged_steps = {"small": 10_000, "paper": 100_000}
    test_ratios = (1.5, 2.5)  # Paper I trains at K = 20 and tests at 30 and 50

    @checked
    def __init__(self, S: Whole(2) = 3, O: Whole(2) = 3, K: Whole(1) = 12, resolution: Real(0.0, 0.5) = 0.05,
                 floor: Real(0.0, 1.0, high_open=True) = 0.05):
        self.S, self.O, self.K = S, O, K
        self.resolution = resolution
        if self.resolution == 0 or abs(1 / self.resolution - round(1 / self.resolution)) > 1e-9:
            _validate.fail("resolution", "1/n for an integer n >= 2 (e.g. 0.05 or 0.01)", resolution)
        self.floor = floor
        units = self.floor / self.resolution
        if abs(units - round(units)) > 1e-9 or self.floor * max(self.S, self.O) > 1:
            _validate.fail("floor", f"a multiple of resolution={self.resolution:g} with floor * max(S, O) <= 1", floor)
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

    def token_groups(self):
        """The tokens by role, {name: token ids}: the probability levels of the matrices, the observations."""
        return {"levels": list(range(self.n_levels)), "observations": list(range(self.n_levels, self.vocab_size))}

    def baseline_posterior(self, batch):
        """What a predictor without the primitive (no transport) can do: p(s_t | E, o_t) from the
        current observation alone, the filter with every step's prior reset to uniform (0 where not scored)."""
        batch = self._check_batch(batch)
        P = self.prefix_len   # another task's batch with as many classes scores other positions
        if batch.tokens.shape[1] <= P or batch.mask[:, :P].any() or not batch.mask[:, P:].all():
            _validate.fail("batch", f"an HMM batch: the A and E prefix ({P} tokens, not scored), then scored "
                           f"observations", f"tokens of shape {tuple(batch.tokens.shape)} with scored positions "
                           f"{batch.mask.any(0).nonzero().flatten().tolist()[:6]}...", described=True)
        E = (batch.tokens[:, self.S * self.S:self.prefix_len].double() * self.resolution).view(-1, self.S, self.O)
        obs = (batch.tokens[:, self.prefix_len:] - self.n_levels).clamp(0, self.O - 1)
        lik = E.gather(2, obs[:, None, :].expand(-1, self.S, -1)).transpose(1, 2)    # (B, K, S)
        out = torch.zeros(batch.posterior.shape)
        out[:, self.prefix_len:] = (lik / lik.sum(-1, keepdim=True)).float()
        return out * batch.mask[..., None]

    @checked
    def batch_from_parts(self, A_units: Int[Tensor, "B S S"], E_units: Int[Tensor, "B _S O"],
                         observations: Int[Tensor, "B K"], states: Int[Tensor, "B K"]) -> WindTunnelBatch:
        """The batch for given grid units of A (B, S, S) and E (B, S, O), observations and states (B, K)."""
        n_units = self.n_levels - 1
        for name, units, cols in (("A_units", A_units, self.S), ("E_units", E_units, self.O)):
            units = _indices(name, units, self.n_levels)
            if units.shape[1:] != (self.S, cols) or (units.sum(-1) != n_units).any():
                _validate.fail(name, f"(B, {self.S}, {cols}) grid units in [0, {n_units}], each row summing to "
                               f"{n_units} (probability 1 at resolution {self.resolution:g})", units)
        observations = _indices("observations", observations, self.O)
        B, K = observations.shape
        _indices("states", states, self.S)
        A = A_units.double() * self.resolution
        E = E_units.double() * self.resolution
        prefix = torch.cat([A_units.reshape(B, -1), E_units.reshape(B, -1)], dim=1)
        tokens = torch.cat([prefix, observations + self.n_levels], dim=1)
        T = self.prefix_len + K
        posterior = torch.zeros(B, T, self.S)
        posterior[:, self.prefix_len:] = forward_filter(A, E, observations).float()
        targets = torch.full((B, T), IGNORE_INDEX, dtype=torch.int64)
        targets[:, self.prefix_len:] = states
        return WindTunnelBatch(tokens, targets, posterior, targets != IGNORE_INDEX, type(self).__name__)


@checked
class AssociativeRecallTask(WindTunnel):
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
    # within 0.01 bits of the posterior after about half the steps, creeping down as the rate decays
    converged_steps = {"small": 4000, "paper": 50_000}

    @checked
    def __init__(self, n_keys: Whole(1) = 6, n_values: Whole(2) = 6, n_pairs: Whole(1) = 12, noise=0.2):
        self.n_keys = n_keys
        self.n_values = n_values
        self.n_pairs = n_pairs
        self.noise = _validate.real("noise", noise, 0.0, (self.n_values - 1) / self.n_values, high_open=True)
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

    def token_groups(self):
        """The tokens by role, {name: token ids}: keys 0..n_keys-1, then the values."""
        return {"keys": list(range(self.n_keys)), "values": list(range(self.n_keys, self.vocab_size))}

    def baseline_posterior(self, batch):
        """What a predictor without the primitive (no binding) can do: uniform over the values at every
        scored position (0 elsewhere); it cannot find the earlier pairs of the key it is asked about."""
        batch = self._check_batch(batch)
        return batch.mask[..., None].float() / self.n_values * torch.ones(self.n_values)

    @checked
    def batch_from_pairs(self, keys: Int[Tensor, "B n"], shown: Int[Tensor, "B n"], answer: Int[Tensor, "B n"]) -> WindTunnelBatch:
        """The batch for given (B, n) keys, shown values and true values of those keys."""
        keys = _indices("keys", keys, self.n_keys)
        B, n = keys.shape
        shown, answer = _indices("shown", shown, self.n_values), _indices("answer", answer, self.n_values)
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
        return WindTunnelBatch(tokens, targets, posterior, targets != IGNORE_INDEX, type(self).__name__)


WIND_TUNNELS = {cls.name: cls for cls in (BijectionTask, HMMTask, AssociativeRecallTask)}


@checked
def wind_tunnel(name: OneOf(sorted(WIND_TUNNELS)), size: OneOf('small', 'paper') = "small"):
    """A wind tunnel by name ("bijection", "hmm", "recall"), CPU-sized (``size="small"``, the
    constructor defaults) or at the paper's sizes (``size="paper"``, for a GPU)."""
    cls = WIND_TUNNELS[name]
    return cls.paper() if size == "paper" else cls()


@checked
def as_wind_tunnel(task, size: OneOf('small', 'paper') = "small"):
    """A wind tunnel object, from itself or its name (``wind_tunnel(task, size)``)."""
    if isinstance(task, str) and task in WIND_TUNNELS:
        return wind_tunnel(task, size)
    if not isinstance(task, WindTunnel):
        _validate.fail("task", f"one of the wind tunnels' names {sorted(WIND_TUNNELS)}, or a task object", task)
    return task
