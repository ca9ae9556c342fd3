"""The paper's experiments, run the way the paper ran them, with the controls a careful reader asks for.

The sticky-Markov experiment (paper section 5.2; settings from the authors' public code)::

    result = EMvsSGDConfig.paper().run()    # 5 seeds x {SGD, EM-like}, 1000 steps, T = 2000
    result.speedup                          # per seed: 1000 / (first step at which EM <= SGD's final loss)
    result.table()                          # final loss / entropy / accuracy vs the exact Bayes predictor

Each seed fixes everything: its sequence is ``chain.sample(T, seed)`` (numpy's default_rng(seed))
and its initial weights are ``attention.init_params(20, 10, 15, 8, std=0.1, seed=seed)`` (a torch
Generator seeded with it). Both schedules of a seed start from the same weights on the same sequence,
so the comparison is paired. ``run_schedules`` trains any set of learning-rate schedules this way,
all seeds and schedules in one batched computation (``batched.train``).
"""

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import _validate, attention, batched, checkpoints, diagnostics
from ._types import Flag, Positive, Real, Seeds, Whole, checked, declared_fields
from .attention import PARAM_NAMES
from .tasks import StickyMarkovChain
from .train import GROUPS, em_like, pick_device, rates, usable_cpus

PAPER_SEEDS = (42, 2024, 1337, 7777, 9999)
D_K, D_V, INIT_STD = 10, 15, 0.1   # the authors' head: W_Q, W_K 20 -> 10, W_V 20 -> 15, W_O 15 -> 8
HELD_OUT_OFFSET = 1_000_000        # the held-out sequence of seed s is chain.sample(T, s + this)


POOL_OFFSET = 2_000_000          # sequence k of seed s's training pool is chain.sample(T, this + POOL_STRIDE * s + k)
POOL_STRIDE = 10_000
FRESH_OFFSET = 3_000_000         # the sequence of seed s at step t of a fresh-data run is chain.sample(T, this + FRESH_STRIDE * s + t)
FRESH_STRIDE = 100_000


@checked
def init_model(seed, chain: StickyMarkovChain, dtype=torch.float32, std=INIT_STD):
    """The seed's initial weights, N(0, std^2) (the paper's 0.1 by default), as ``attention.init_params`` draws them."""
    return attention.init_params(chain.d_embed, D_K, D_V, chain.n_symbols, std=std, seed=seed, dtype=dtype)


@checked
def training_sequences(chain: StickyMarkovChain, T, seed, pool: Whole(0, POOL_STRIDE - 1) = 0):
    """(x, y) of seed ``seed``'s training data: the paper's one sequence ``chain.sample(T, seed)``
    ((T-1, d_x), (T-1,)) when ``pool`` is 0, else ``pool`` fresh sequences stacked ((pool, T-1, d_x),
    (pool, T-1)), none of them the paper's sequence or the held-out one."""
    if pool == 0:
        return chain.sample(T, seed, dtype=torch.float64)
    data = [chain.sample(T, POOL_OFFSET + POOL_STRIDE * seed + k, dtype=torch.float64) for k in range(pool)]
    return torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])


@checked
def fresh_sequences(chain: StickyMarkovChain, T, seeds: Seeds, step: Whole(0, FRESH_STRIDE - 1)):
    """(x, y) of a fresh-data run at ``step``: a new sequence per seed, seen at this step only
    ((S, T-1, d_x), (S, T-1)), none of them a pool's, the paper's or a held-out sequence."""
    data = [chain.sample(T, FRESH_OFFSET + FRESH_STRIDE * s + step, dtype=torch.float64) for s in seeds]
    return torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])


RTOL = 1e-6  # "at or below" allows float32 rounding: two identical schedules give a speed-up of 1


def first_step_at_or_below(curve, final, threshold):
    """Per seed, the first number of updates t after which the loss is <= threshold, else nan.

    ``curve`` (S, steps) holds the loss after t = 0..steps-1 updates and ``final`` (S,) the loss
    after all ``steps``; so a run that reaches the threshold only at its very end gives ``steps``.
    A loss within a relative RTOL of the threshold counts as reaching it.
    """
    try:
        curve = np.asarray(curve, dtype=float)
    except (TypeError, ValueError):
        _validate.fail("curve", "an array of losses of shape (S seeds, steps)", curve)
    if curve.ndim != 2:
        _validate.fail("curve", "shape (S seeds, steps)", curve)
    final, threshold = _validate.number_array("final", final), _validate.number_array("threshold", threshold)
    for what, a in (("final", final), ("threshold", threshold)):
        if a.shape != curve.shape[:1]:
            _validate.fail(what, f"shape ({curve.shape[0]},): one value per seed, as curve", a)
    if not np.isfinite(threshold).all():
        _validate.fail("threshold", "finite values", threshold)
    losses = np.concatenate([curve, final[:, None]], axis=1)
    if not np.isfinite(losses).all():   # a nan would read as "never reached"
        _validate.fail("curve, final", "finite losses", f"{int((~np.isfinite(losses)).sum())} nan/inf", described=True)
    hit = losses <= np.asarray(threshold)[:, None] * (1 + RTOL)
    return np.where(hit.any(axis=1), hit.argmax(axis=1), np.nan).astype(float)


def _summary(values):
    return "{:.4f} ± {:.4f}".format(*diagnostics.mean_sd(values))


@dataclass
class ScheduleRun:
    """Every schedule x seed of one batched run. Per schedule name, arrays have a leading seed axis.

    ``loss``, ``entropy``, ``accuracy``: (S, steps), after t = 0..steps-1 updates, on the training
    sequence. ``final``: {"loss", "entropy", "accuracy"} -> (S,) after all updates. ``bayes``: the
    same three for the exact predictor on each seed's sequence. ``values``: (S, snapshots,
    n_symbols, d_v), the value W_V mu_s of each symbol's clean embedding, after ``snapshot_steps``
    updates. ``params``: final weights stacked over seeds. ``snapshots``: {matrix: (S, snapshots,
    out, in)} every weight matrix at ``snapshot_steps``; ``grad_sq``: {matrix: (S, steps)} the
    squared norm of its gradient at each step (for ``frame_precision``).
    """
    _made_by = "what run_schedules returns"   # in the message where one was expected (_types.words)
    schedules: dict
    seeds: tuple
    steps: int
    T: int
    chain: StickyMarkovChain
    loss: dict
    entropy: dict
    accuracy: dict
    final: dict
    bayes: dict
    snapshot_steps: np.ndarray
    values: dict
    params: dict
    seconds: float
    device: str
    snapshots: dict = field(default_factory=dict)
    grad_sq: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    pool: int = 0              # 0: the paper's one training sequence per seed; else that many, one per step
    init_std: float = INIT_STD
    fresh: bool = False        # True: a new sequence per seed at every step (``fresh_sequences``)

    def training_data(self):
        """(x, y) of every seed's training data, stacked: (S, T-1, d_x), (S, T-1) for the paper's
        one sequence, (S, pool, T-1, d_x), (S, pool, T-1) for a pool."""
        data = [training_sequences(self.chain, self.T, s, self.pool) for s in self.seeds]
        return torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])

    @checked
    def held_out_data(self, T=None, offset: Whole(0) = HELD_OUT_OFFSET):
        """(x, y) of every seed's held-out sequence ``chain.sample(T, seed + offset)``, stacked."""
        # offset >= 0: seed + offset must be a seed too
        data = [self.chain.sample(T or self.T, s + offset, dtype=torch.float64) for s in self.seeds]
        return torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])

    def probe_data(self):
        """Where frame and precision are measured: the training sequence of the paper's design,
        the held-out sequence of a pool run (it has no one training sequence)."""
        return self.held_out_data() if self.pool or self.fresh else self.training_data()

    def schedule(self, name):
        """``name`` if it is one of this run's schedules; an error listing them otherwise."""
        return _validate.choice("name", name, list(self.schedules))

    def snapshot_params(self, name, k):
        """Schedule ``name``'s weights (stacked over seeds, float64) at snapshot ``k``."""
        self.schedule(name)
        k = _validate.integer("k", k, 0, len(self.snapshot_steps) - 1)
        return {n: torch.as_tensor(self.snapshots[name][n][:, k], dtype=torch.float64) for n in PARAM_NAMES}

    def held_out_curve(self, name):
        """(S, snapshots) loss of schedule ``name`` on each seed's held-out sequence at every
        snapshot, and (S,) the exact Bayes loss on it: where a pool run's loss stands, without noise."""
        key = ("held_out_curve", self.schedule(name))
        if key not in self.extra:
            x, y = self.held_out_data()
            curve = np.stack([batched.evaluate(x, y, self.snapshot_params(name, k))["loss"]
                              for k in range(len(self.snapshot_steps))], axis=1)
            bayes = np.array([self.chain.bayes_metrics(x[i], y[i])["loss"] for i in range(len(self.seeds))])
            self.extra[key] = (curve, bayes)
        return self.extra[key]

    def steps_to(self, name, threshold):
        """Per seed, the first number of updates after which schedule ``name`` is at or below ``threshold``."""
        return first_step_at_or_below(self.loss[self.schedule(name)], self.final[name]["loss"], threshold)

    def speedup(self, name, baseline="sgd"):
        """(steps_to, speed-up) of ``name`` against ``baseline``'s final loss: steps / steps_to."""
        steps_to = self.steps_to(name, self.final[_validate.choice("baseline", baseline, list(self.schedules))]["loss"])
        with np.errstate(divide="ignore", invalid="ignore"):
            return steps_to, self.steps / steps_to

    @checked
    def held_out(self, T: Whole(2) | None = None, offset=HELD_OUT_OFFSET):
        """Metrics of every schedule's final weights, and of the exact predictor, on a fresh sequence
        per seed (``chain.sample(T, seed + offset)``): {name or "bayes": {metric: (S,)}}."""
        x, y = self.held_out_data(T, offset)
        out = {}
        for name in self.schedules:
            params = {n: self.params[name][n].to(torch.float64) for n in PARAM_NAMES}
            out[name] = batched.evaluate(x, y, params)
        per_seed = [self.chain.bayes_metrics(x[i], y[i]) for i in range(len(self.seeds))]
        out["bayes"] = {key: np.array([m[key] for m in per_seed]) for key in per_seed[0]}
        return out

    def table(self, names=None):
        """Mean ± sd over seeds of the final loss, entropy and accuracy of the schedules ``names`` (a list, or
        one name; default all), and the exact Bayes predictor."""
        names = [names] if isinstance(names, str) else names   # one schedule's name, not its letters
        names = [self.schedule(n) for n in (names or self.schedules)]
        rows = [f"{'':>14}  {'loss (nats)':>17}  {'entropy (nats)':>17}  {'accuracy':>17}"]
        for name in names:
            f = self.final[name]
            rows.append(f"{name:>14}  {_summary(f['loss']):>17}  {_summary(f['entropy']):>17}  "
                        f"{_summary(f['accuracy']):>17}")
        b = self.bayes
        rows.append(f"{'exact Bayes':>14}  {_summary(b['loss']):>17}  {_summary(b['entropy']):>17}  "
                    f"{_summary(b['accuracy']):>17}")
        rows.append(f"{'H_min (paper)':>14}  {self.chain.h_min:>17.4f}")
        return "\n".join(rows)


def _check_schedules(schedules, what="schedules"):
    """The schedules with every rate a plain Python float (numpy and 0-d rates are accepted; the
    rates are saved to JSON with the run); ``what``: the argument's name in a message."""
    if not isinstance(schedules, dict) or not schedules:
        _validate.fail(what, "a non-empty dict name -> {matrix: rate}", schedules)
    for name, per_matrix in schedules.items():
        if not isinstance(per_matrix, dict) or set(per_matrix) != set(PARAM_NAMES):
            _validate.fail(f"{what}[{name!r}]",
                           f"a rate for each of {PARAM_NAMES} (e.g. train.rates(0.01, train.em_like(10)))", per_matrix)
    return {name: {matrix: _validate.real(f"{what}[{name!r}][{matrix!r}]", rate, 0) for matrix, rate in per.items()}
            for name, per in schedules.items()}


@checked
def run_schedules(schedules, seeds: Seeds = PAPER_SEEDS, steps: Whole(1) = 1000, T=2000,
                  chain: StickyMarkovChain | None = None, device=None, dtype=torch.float32, record_every=10,
                  block_size=None, progress=True, checkpoint_path=None, checkpoint_every=100, desc="sticky Markov",
                  pool=0, init_std: Positive = INIT_STD, fresh: Flag = False, workers=None):
    """Train every schedule on every seed (all in one batched run) and measure them.

    ``schedules`` maps a name to per-matrix rates (``train.rates``). Models are laid out
    schedule-major: model m is schedule m // S on seed m % S. ``checkpoint_path`` saves the run
    every ``checkpoint_every`` steps and resumes it after an interruption. ``pool`` > 0 trains each
    seed on that many fresh sequences, one per step in turn, instead of the paper's one sequence
    (``training_sequences``); ``fresh`` trains on a new sequence per seed at every step
    (``fresh_sequences``), so no sequence is seen twice; ``init_std`` is the initial weights'
    standard deviation. ``workers`` processes share the models out (``batched.train``); None: one per
    core for a run of the paper's size on a CPU without a checkpoint, else one.
    """
    schedules = _check_schedules(schedules)
    if fresh and pool:
        _validate.fail("pool", "0 when fresh=True (fresh data has no pool)", pool)
    chain = StickyMarkovChain() if chain is None else chain
    names = list(schedules)
    S = len(seeds)
    models = [m % S for m in range(len(names) * S)]   # model m trains seed m % S

    def sampler(step):   # fresh data: the seeds' sequences of this step, one per model
        xs, ys = fresh_sequences(chain, T, seeds, step)
        return xs[models], ys[models]

    if fresh:
        _validate.integer("steps", steps, 1, FRESH_STRIDE - 1)
        data = [(xs, ys) for xs, ys in zip(*fresh_sequences(chain, T, seeds, steps))]  # final: a sequence no step saw
        x, y = sampler(0)
    else:
        data = [training_sequences(chain, T, seed, pool) for seed in seeds]   # checks T >= 2
        x = torch.stack([data[s][0] for s in models])
        y = torch.stack([data[s][1] for s in models])
    inits = [init_model(seed, chain, torch.float64, init_std) for seed in seeds]
    params = batched.stack([inits[m % S] for m in range(len(names) * S)])
    lrs = {matrix: [schedules[names[m // S]][matrix] for m in range(len(names) * S)] for matrix in PARAM_NAMES}
    if workers is None:   # a small run would wait on the processes' start (a few seconds) for nothing
        big = steps * len(models) * T * T >= 1e10 and pick_device(device).type == "cpu"
        workers = usable_cpus() if big and not fresh and not checkpoint_path else 1
    run = batched.train(
        x, y, params, lrs, steps, names=[f"{names[m // S]}, seed {seeds[m % S]}" for m in range(len(names) * S)],
        record_every=record_every, block_size=block_size, device=device, dtype=dtype, progress=progress,
        desc=desc, checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
        sampler=sampler if fresh else None, workers=workers)

    def per_schedule(array, i):  # model axis -> this schedule's seeds, first axis
        return array[..., i * S:(i + 1) * S]

    means = chain.means.numpy().T                                         # (d_x, n_symbols)
    values = {}
    for i, name in enumerate(names):
        W_V = run.W_V[:, i * S:(i + 1) * S]                               # (snapshots, S, d_v, d_x)
        values[name] = np.einsum("tsvd,dn->stnv", W_V, means)
    per_seed_bayes = [chain.bayes_metrics(*d) for d in data]   # a pool: the mean over its sequences; fresh: the final one
    return ScheduleRun(
        schedules={n: dict(r) for n, r in schedules.items()}, seeds=seeds, steps=steps, T=T, chain=chain,
        loss={n: per_schedule(run.loss, i).T.copy() for i, n in enumerate(names)},
        entropy={n: per_schedule(run.entropy, i).T.copy() for i, n in enumerate(names)},
        accuracy={n: per_schedule(run.accuracy, i).T.copy() for i, n in enumerate(names)},
        final={n: {k: per_schedule(v, i).copy() for k, v in run.final.items()} for i, n in enumerate(names)},
        bayes={k: np.array([m[k] for m in per_seed_bayes]) for k in per_seed_bayes[0]},
        snapshot_steps=run.snapshot_steps, values=values,
        params={n: {p: run.params[p][i * S:(i + 1) * S].clone() for p in PARAM_NAMES} for i, n in enumerate(names)},
        seconds=run.seconds, device=run.device, extra={"resumed_from": run.resumed_from},
        snapshots={n: {p: run.snapshots[p][:, i * S:(i + 1) * S].swapaxes(0, 1) for p in PARAM_NAMES}
                   for i, n in enumerate(names)},
        grad_sq={n: {p: per_schedule(run.grad_sq[p], i).T.copy() for p in PARAM_NAMES} for i, n in enumerate(names)},
        pool=pool, init_std=init_std, fresh=fresh,
    )


@dataclass
class EMvsSGDResult:
    """The paper's comparison. Arrays have a leading seed axis (order of ``seeds``).

    ``loss_sgd``, ``loss_em``: (S, steps) training-sequence loss after t = 0..steps-1 updates.
    ``steps_to_sgd_final``: first number of updates after which EM's loss is at or below SGD's
    final loss (nan if never); ``speedup`` = steps / that. ``final_*``: after all updates.
    ``bayes_loss``: cross-entropy of the exact predictor on the same sequence. ``values_sgd``,
    ``values_em``: (S, snapshots, n_symbols, d_v) value trajectories W_V mu_s, after
    ``snapshot_steps`` updates. ``run`` holds everything else (curves of entropy and accuracy,
    final weights, held-out evaluation).
    """
    seeds: tuple
    steps: int
    T: int
    lr: float
    value_ratio: float
    loss_sgd: np.ndarray
    loss_em: np.ndarray
    steps_to_sgd_final: np.ndarray
    speedup: np.ndarray
    final_loss_sgd: np.ndarray
    final_loss_em: np.ndarray
    final_entropy_sgd: np.ndarray
    final_entropy_em: np.ndarray
    final_accuracy_sgd: np.ndarray
    final_accuracy_em: np.ndarray
    bayes_loss: np.ndarray
    h_min: float
    snapshot_steps: np.ndarray
    values_sgd: np.ndarray
    values_em: np.ndarray
    run: ScheduleRun

    @property
    def median_speedup(self):
        """Median over seeds (nan if EM never reached SGD's final loss on some seed)."""
        return float(np.median(self.speedup))

    def table(self):
        return self.run.table(["sgd", "em"])


@checked
@dataclass(frozen=True)
class EMvsSGDConfig:
    """The settings of one EM-vs-SGD experiment on the sticky chain: seeds, steps, sequence length
    T, base rate ``lr``, the W_V factor ``value_ratio`` of the EM-like schedule, and the chain's
    stickiness ``self_prob`` (the authors' self-probability before renormalisation)."""
    seeds: Seeds = PAPER_SEEDS
    steps: Whole(1) = 1000
    T: Whole(2) = 2000
    lr: Positive = 0.01
    value_ratio: Positive = 10.0
    self_prob: Real(0.0, 1.0) = 0.3   # as StickyMarkovChain takes it

    def __post_init__(self):
        """Every field checked where it is set (a config is frozen), so that a bad one is named at once, not
        when ``run`` starts; the seeds stored as a tuple of ints."""
        declared_fields(self)

    @classmethod
    def paper(cls, **changes):
        """The paper's run (section 5.2, the authors' code): 5 seeds, 1000 steps, T = 2000, lr 0.01, W_V x10."""
        return _validate.replaced(cls(), **changes)

    @classmethod
    def small(cls, **changes):
        """3 seeds at T = 600: a few seconds on a CPU, what chapter 6's widget reruns when a control moves."""
        return _validate.replaced(cls(seeds=PAPER_SEEDS[:3], T=600), **changes)

    def run(self, device=None, **kwargs):
        """``em_vs_sgd`` with these settings (``kwargs`` as there: extra_schedules, progress, ...)."""
        return em_vs_sgd(self.seeds, self.steps, self.T, self.lr, self.value_ratio, device=device,
                         chain=StickyMarkovChain(self_prob=self.self_prob), **kwargs)


_PAPER = EMvsSGDConfig.paper()


@checked
def em_vs_sgd(seeds=_PAPER.seeds, steps=_PAPER.steps, T=_PAPER.T, lr: Positive = _PAPER.lr,
              value_ratio: Positive = _PAPER.value_ratio,
              device=None, chain=None, extra_schedules=None, **kwargs):
    """SGD (``lr`` on every matrix) against EM-like (``lr * value_ratio`` on W_V), paired by seed.

    The defaults are the paper's (``EMvsSGDConfig.paper()``). ``extra_schedules`` ({name: rates},
    see ``train.rates``) are trained in the same batched run, on the same seeds, and land in
    ``result.run`` (controls come almost for free this way). ``kwargs`` go to ``run_schedules`` (dtype, record_every, block_size,
    progress, checkpoint_path, checkpoint_every).
    """
    if extra_schedules is not None and not isinstance(extra_schedules, dict):
        _validate.fail("extra_schedules", "None or a dict name -> {matrix: rate}", extra_schedules)
    extra_schedules = _check_schedules(extra_schedules, "extra_schedules") if extra_schedules else {}
    schedules = {"sgd": rates(lr), "em": rates(lr, em_like(value_ratio))}
    for name, extra in extra_schedules.items():
        if name in schedules:
            _validate.fail("extra_schedules", "names other than 'sgd' and 'em' (taken by the main comparison)", name)
        schedules[name] = extra
    run = run_schedules(schedules, seeds, steps, T, chain=chain, device=device, **kwargs)
    steps_to, speedup = run.speedup("em", "sgd")
    return EMvsSGDResult(
        seeds=run.seeds, steps=steps, T=T, lr=lr, value_ratio=value_ratio,
        loss_sgd=run.loss["sgd"], loss_em=run.loss["em"], steps_to_sgd_final=steps_to, speedup=speedup,
        final_loss_sgd=run.final["sgd"]["loss"], final_loss_em=run.final["em"]["loss"],
        final_entropy_sgd=run.final["sgd"]["entropy"], final_entropy_em=run.final["em"]["entropy"],
        final_accuracy_sgd=run.final["sgd"]["accuracy"], final_accuracy_em=run.final["em"]["accuracy"],
        bayes_loss=run.bayes["loss"], h_min=run.chain.h_min, snapshot_steps=run.snapshot_steps,
        values_sgd=run.values["sgd"], values_em=run.values["em"], run=run,
    )


# ----------------------------------------------------------------------------- value trajectories

def value_pca(trajectories, n_components=2):
    """Value trajectories of several schedules in one PCA basis, with their lengths.

    ``trajectories``: {name: (snapshots, n_symbols, d_v)} (e.g. ``result.values_em[seed_index]``).
    The principal axes are fitted on every snapshot of every schedule together, so the panels
    share coordinates. Returns a dict: "projections" {name: (snapshots, n_symbols, n_components)},
    "explained" (variance share of each component), "path_length" {name: mean over symbols of the
    distance travelled in the full value space}, "displacement" {name: mean distance from the first
    to the last snapshot} and "straightness" {name: displacement / path_length, 1 for a straight run}.
    """
    if not isinstance(trajectories, dict) or not trajectories:
        _validate.fail("trajectories", "a non-empty dict {name: (snapshots, n_symbols, d_v) array}", trajectories)
    arrays = {name: np.asarray(t, dtype=float) for name, t in trajectories.items()}
    for name, t in arrays.items():
        if t.ndim != 3 or t.shape[0] < 2:
            _validate.fail(f"trajectories[{name!r}]", "shape (snapshots >= 2, n_symbols, d_v)", t.shape)
        if not np.isfinite(t).all():
            _validate.fail(f"trajectories[{name!r}]", "finite values", f"{int((~np.isfinite(t)).sum())} NaN/inf entries",
                           described=True)
        first = next(iter(arrays.values()))
        if t.shape[-1] != first.shape[-1]:   # one PCA basis: the same value space for every schedule
            _validate.fail(f"trajectories[{name!r}]", f"values of d_v = {first.shape[-1]}, as the first schedule's",
                           f"d_v = {t.shape[-1]}", described=True)
    points = np.concatenate([t.reshape(-1, t.shape[-1]) for t in arrays.values()])
    if np.ptp(points, axis=0).max() == 0:
        _validate.fail("trajectories", "values that are not all one point (then no direction explains any)",
                       "every value of every snapshot equal", described=True)
    fit = diagnostics.pca(points, n_components)
    out = {"projections": {}, "path_length": {}, "displacement": {}, "straightness": {},
           "explained": fit["explained"][:n_components]}
    for name, t in arrays.items():
        out["projections"][name] = (t - fit["mean"]) @ fit["components"].T
        length = np.linalg.norm(np.diff(t, axis=0), axis=-1).sum(axis=0).mean()
        displacement = np.linalg.norm(t[-1] - t[0], axis=-1).mean()
        out["path_length"][name] = float(length)
        out["displacement"][name] = float(displacement)
        out["straightness"][name] = float(displacement / length) if length > 0 else float("nan")
    return out


# ----------------------------------------------------------------------------- frame and precision
# The paper's frame-precision dissociation: attention (the frame) settles early, the values (the
# precision) keep refining, and much of the loss decrease comes after the frame has settled.
# Measured here on the sticky chain itself, from the snapshots of a run (every record_every updates),
# with the course's one settle measure (``diagnostics.settle``: each rate against its own peak).

def _snapshot_input(what, value, dims):
    """A float64 tensor of ``dims`` dimensions from a tensor or array (x: (T, d_x); weights: (snapshots, out, in))."""
    try:
        value = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        _validate.fail(what, f"a tensor or array of {dims} dimensions", value)
    value = _validate.tensor(what, value, dims)
    if value.numel() == 0:
        _validate.fail(what, f"a tensor of {dims} dimensions, none of them empty", value)
    return value


@checked
def frame_rate(x, W_Q, W_K, max_queries: Whole(1) = 500, rows_per_block: Whole(1) = 50):
    """(snapshots - 1,) the frame rate between consecutive snapshots: ``diagnostics.frame_change``
    of the attention maps on one sequence, the mean over query rows of the total-variation distance
    1/2 sum_j |alpha'_ij - alpha_ij|, in [0, 1]. The mean is taken over ``max_queries`` evenly
    spaced query rows (all rows if there are fewer): at T = 2000 that is a quarter of the rows and
    a quarter of the time, for the same mean. The rows go ``rows_per_block`` at a time, every
    snapshot at once; a block reads only the keys its last row sees (the causal half, nothing of
    the masked one, whose weights are 0 in every snapshot)."""
    x = _snapshot_input("x", x, 2)
    W_Q, W_K = _snapshot_input("W_Q", W_Q, 3), _snapshot_input("W_K", W_K, 3)
    if W_K.shape != W_Q.shape or W_Q.shape[2] != x.shape[1]:
        _validate.fail("W_K", f"shape {tuple(W_Q.shape[:2]) + (x.shape[1],)}: one per snapshot of W_Q, reading x", W_K)
    queries = torch.linspace(0, x.shape[0] - 1, min(max_queries, x.shape[0])).round().long()
    q, k = x[queries] @ W_Q.transpose(1, 2), x @ W_K.transpose(1, 2)   # (snapshots, queries | T, d_k)
    rate = np.zeros(len(W_Q) - 1)
    for block in torch.arange(len(queries)).split(rows_per_block):
        rows = queries[block]
        seen = int(rows[-1]) + 1   # keys 0..seen-1: all a row of this block can attend to
        alpha = torch.softmax(attention.scores(q[:, block], k[:, :seen], positions=rows), -1)  # (snapshots, rows, seen)
        share = len(block) / len(queries)   # frame_change is a mean over the block's rows
        rate += [share * diagnostics.frame_change(a, b, check=False) for a, b in zip(alpha[:-1], alpha[1:])]
    return rate


def precision_rate(x, W_V):
    """(snapshots - 1,) the precision rate: the change of the values v_j = W_V x_j on the sequence
    between consecutive snapshots, relative to their *final* size (``diagnostics.change_vs_final``).
    Dividing by the current size instead would inflate the early rates, when the values are still
    near their small start."""
    x, W_V = _snapshot_input("x", x, 2), _snapshot_input("W_V", W_V, 3)
    if W_V.shape[2] != x.shape[1]:
        _validate.fail("W_V", f"shape (snapshots, d_v, d_x={x.shape[1]}) to read x", W_V)
    values = W_V @ x.T   # (snapshots, d_v, T)
    if not values[-1].any():   # the rates are relative to the final values' size
        _validate.fail("x, W_V", "a sequence and last weights that give nonzero values v_j = W_V x_j",
                       "values that are all 0 at the last snapshot", described=True)
    return diagnostics.change_vs_final(values)


@dataclass
class FramePrecision:
    """Frame and precision of one schedule, per seed (leading axis S).

    ``rate_steps``: the update ending each snapshot interval. ``frame_rate``, ``precision_rate``:
    (S, intervals). ``frame_settle``, ``values_settle``: per seed, ``diagnostics.settle`` of each
    rate (peak step, steps to stay below 20% and 10% of the peak, or None: not settled by the last
    step). ``t_frame``, ``t_values``: (S,) the settle step at 20% of the peak, nan where not settled
    (``t_frame_10``, ``t_values_10`` at 10%). ``frame_moved``: (S,) mean total-variation distance
    between the first and last attention maps; ``values_moved``: (S,) ||V_last - V_first|| / ||V_last||.

    ``loss_steps``, ``loss``: (S, n) the loss the shares are taken of: the training loss after every
    update for the paper's one-sequence design, the held-out loss at the snapshots for a pool run.
    ``loss_after_frame``: (S,) share of the total decrease of that loss still to come after t_frame
    (nan where attention has not settled). ``bought``: {group: (S, n - 1)} the first-order decrease
    of that loss bought by each parameter group per step (``bought_steps``), as a share of the
    realised decrease; ``attribution`` its sum; ``attribution_after_frame`` the same after t_frame;
    ``first_order``: (S,) the sum over groups (near 1 when the first-order account is accurate).
    """
    _made_by = "frame_precision, frame_precision_of_record"
    rate_steps: np.ndarray
    frame_rate: np.ndarray
    precision_rate: np.ndarray
    frame_settle: list
    values_settle: list
    t_frame: np.ndarray
    t_values: np.ndarray
    t_frame_10: np.ndarray
    t_values_10: np.ndarray
    frame_moved: np.ndarray
    values_moved: np.ndarray
    loss_steps: np.ndarray
    loss: np.ndarray
    loss_after_frame: np.ndarray
    bought_steps: np.ndarray
    attribution: dict
    attribution_after_frame: dict
    first_order: np.ndarray
    bought: dict

    @property
    def settled(self):
        """(S,) True where both pathways settled (20% of their peaks) within the run."""
        return np.isfinite(self.t_frame) & np.isfinite(self.t_values)

    def order(self):
        """Per seed: "frame first", "values first", "together" (same step) or "not both settled" (one
        pathway or neither, at 20% of its peak): ``diagnostics.settle_order`` with the partial cases
        counted together, since no order can be read from them."""
        orders = [diagnostics.settle_order(f, v) for f, v in zip(self.frame_settle, self.values_settle)]
        return ["not both settled" if "settled" in o else o for o in orders]


def _settle_steps(settles, fraction):
    return np.array([np.nan if r["settled"][fraction] is None else r["settled"][fraction] for r in settles], float)


@checked
def snapshot_attribution(run: ScheduleRun, name, x, y):
    """{group: (S, snapshots - 1)} the first-order decrease of the loss on (x, y) (one sequence per
    seed) bought by each group between consecutive snapshots: -grad_g L(midpoint) . (W_g' - W_g).
    The gradient at the midpoint of each interval makes the account exact to second order, so the
    groups add up to the realised decrease when the snapshots are close (``first_order``)."""
    K = len(run.snapshot_steps)
    run.schedule(name)
    out = {g: np.zeros((len(run.seeds), K - 1)) for g in GROUPS}
    for k in range(K - 1):
        before, after = run.snapshot_params(name, k), run.snapshot_params(name, k + 1)
        middle = {n: (before[n] + after[n]) / 2 for n in PARAM_NAMES}
        _, grads = batched.forward_backward(x, y, middle)
        for g, members in GROUPS.items():
            out[g][:, k] = -sum((grads[n] * (after[n] - before[n])).sum((1, 2)).numpy() for n in members)
    return out


@checked
def rates_at_intervals(run: ScheduleRun, name, every):
    """{"frame_rate_<n>", "precision_rate_<n>", "rate_steps_<n>": ...} the rates of schedule ``name``
    measured between snapshots ``k`` apart for each ``k`` in ``every`` (n = k x record_every updates):
    the same run photographed less often. Drift over n updates grows like n, noise more slowly, so
    a rate that is mostly noise falls, relative to its peak, as the interval grows."""
    x, _ = run.probe_data()
    run.schedule(name)
    steps, out = np.asarray(run.snapshot_steps), {}
    empty = isinstance(every, (list, tuple, range, np.ndarray)) and not len(every)   # no extra intervals
    for k in ([] if empty else _validate.step_list("every", every, 1)):
        if k >= len(steps):
            _validate.fail("every", f"snapshot intervals below the run's {len(steps)} snapshots", every)
        n = int(steps[k] - steps[0])
        out[f"rate_steps_{n}"] = steps[k::k]
        out[f"frame_rate_{n}"], out[f"precision_rate_{n}"] = _rates(run, name, x, every=k)
    return out


def _rates(run, name, x, every=1):
    """(frame, precision): (S, snapshots - 1) each, the rates of schedule ``name`` between snapshots
    ``every`` apart, one row per seed on that seed's probe inputs ``x[i]``."""
    snaps = run.snapshots[name]
    seeds = range(len(run.seeds))
    frame = np.stack([frame_rate(x[i], snaps["W_Q"][i][::every], snaps["W_K"][i][::every]) for i in seeds])
    precision = np.stack([precision_rate(x[i], snaps["W_V"][i][::every]) for i in seeds])
    return frame, precision


def frame_precision(run, name):
    """``FramePrecision`` of schedule ``name`` of a ``ScheduleRun`` (every seed)."""
    return frame_precision_of(measure_frame_precision(run, name))


@checked
def measure_frame_precision(run: ScheduleRun, name):
    """The raw measurements behind ``FramePrecision``, as plain arrays (what a record keeps):
    rates at the snapshots, how far each pathway moved, the loss the shares are taken of, and the
    first-order decrease each group bought (not yet divided by the realised decrease)."""
    run.schedule(name)
    if name not in run.snapshots:
        _validate.fail("run", "a run with snapshots of its weights (run_schedules keeps them; a run loaded by "
                       "load_schedule_run does not)", f"one without snapshots of {name!r}", described=True)
    x, y = run.probe_data()
    snaps = run.snapshots[name]
    S = len(run.seeds)
    frame, precision = _rates(run, name, x)
    out = {"rate_steps": np.asarray(run.snapshot_steps[1:]), "frame_rate": frame, "precision_rate": precision,
           "frame_moved": np.array([frame_rate(x[i], snaps["W_Q"][i][[0, -1]], snaps["W_K"][i][[0, -1]])[0]
                                    for i in range(S)]),
           "values_moved": np.array([precision_rate(x[i], snaps["W_V"][i][[0, -1]])[0] for i in range(S)])}
    if run.pool or run.fresh:   # no one training sequence: the held-out loss at the snapshots, midpoint attribution
        out["loss_steps"] = np.asarray(run.snapshot_steps)
        out["loss"] = run.held_out_curve(name)[0]
        out["bought"] = snapshot_attribution(run, name, x, y)
    else:          # the training loss after every update; plain GD buys lr_g |grad_g L|^2 per step
        rates = run.schedules[name]
        out["loss_steps"] = np.arange(run.steps + 1)
        out["loss"] = np.concatenate([run.loss[name], run.final[name]["loss"][:, None]], axis=1)
        out["bought"] = {g: sum(rates[m] * run.grad_sq[name][m] for m in members) for g, members in GROUPS.items()}
    return out


def frame_precision_of(m):
    """``FramePrecision`` from the measurements of ``measure_frame_precision`` (or a record's)."""
    _validate.record("m", m, ("rate_steps", "loss_steps", "frame_rate", "precision_rate", "loss", "bought",
                              "frame_moved", "values_moved"), "measure_frame_precision (or a long-run record's schedule)")
    steps, loss_steps = np.asarray(m["rate_steps"]), np.asarray(m["loss_steps"])
    frame, precision, loss = (np.asarray(m[k], float) for k in ("frame_rate", "precision_rate", "loss"))
    frame_settle = [diagnostics.settle(steps, r) for r in frame]
    values_settle = [diagnostics.settle(steps, r) for r in precision]
    drop = loss[:, 0] - loss[:, -1]
    bought = {g: np.asarray(b, float) / drop[:, None] for g, b in m["bought"].items()}
    t_frame = _settle_steps(frame_settle, diagnostics.SETTLE_FRACTIONS[0])
    after = np.full(len(frame), np.nan)
    late = {g: np.full(len(frame), np.nan) for g in bought}
    for i, t in enumerate(t_frame):
        if np.isfinite(t):
            k = int(np.searchsorted(loss_steps, t))
            after[i] = (loss[i, k] - loss[i, -1]) / drop[i]
            for g in bought:
                late[g][i] = bought[g][i, k:].sum()
    attribution = {g: b.sum(1) for g, b in bought.items()}
    return FramePrecision(
        rate_steps=steps, frame_rate=frame, precision_rate=precision, frame_settle=frame_settle,
        values_settle=values_settle, t_frame=t_frame,
        t_values=_settle_steps(values_settle, diagnostics.SETTLE_FRACTIONS[0]),
        t_frame_10=_settle_steps(frame_settle, diagnostics.SETTLE_FRACTIONS[1]),
        t_values_10=_settle_steps(values_settle, diagnostics.SETTLE_FRACTIONS[1]),
        frame_moved=np.asarray(m["frame_moved"], float), values_moved=np.asarray(m["values_moved"], float),
        loss_steps=loss_steps, loss=loss, loss_after_frame=after, bought_steps=loss_steps[1:],
        attribution=attribution, attribution_after_frame=late, first_order=sum(attribution.values()), bought=bought)


WINDOWS = (1000, 2000, 4000)   # fixed starts of the late windows the attribution is summed over


@checked
def bought_after(fp: FramePrecision, after: Whole(0)):
    """Who bought the loss decrease after update ``after``, without any settle step: {group: (S,)}
    the loss (nats) each group bought from the first snapshot at or after ``after`` to the end,
    "values + readout" beside them (the W_V / W_O split depends on a rescaling, W_V -> c W_V,
    W_O -> W_O / c, that leaves the model unchanged), and "realised": (S,) the loss's actual
    decrease over the same window. A window that starts after the run ended is refused."""
    steps = np.asarray(fp.loss_steps)
    if after >= steps[-1]:
        _validate.fail("after", f"a step before the run's last, {int(steps[-1])}", after)
    out = diagnostics.bought_in_window(_bought_nats(fp), fp.loss, int(np.searchsorted(steps, after)))
    out["values + readout"] = out["values"] + out["readout"]
    return out


def _bought_nats(fp):
    """``fp.bought`` in nats: {group: (S, intervals)} (it holds shares of each seed's realised decrease)."""
    drop = fp.loss[:, 0] - fp.loss[:, -1]
    return {g: b * drop[:, None] for g, b in fp.bought.items()}


@checked
def bought_late(fp: FramePrecision, fraction: Real(0, 1, low_open=True, high_open=True) = 0.9):
    """Who bought the last ``1 - fraction`` of each seed's loss decrease, anchored on the loss itself:
    per seed, the window starts at the first snapshot where the loss has covered ``fraction`` of its
    decrease (``diagnostics.progress_step``) and runs to the end. No settle step and no plateau test,
    and it means the same in a run of any length. {group: (S,) nats bought in the seed's window},
    "values + readout", "realised" (S,) and "from_step" (S,), where each window starts."""
    steps = np.asarray(fp.loss_steps)
    nats = _bought_nats(fp)
    out = {g: np.zeros(len(fp.loss)) for g in [*nats, "realised"]}
    out["from_step"] = np.zeros(len(fp.loss), int)
    for i, curve in enumerate(fp.loss):
        start = diagnostics.progress_step(steps, curve, fraction)
        k = min(int(np.searchsorted(steps, start)), len(steps) - 2)   # at least one interval
        window = diagnostics.bought_in_window({g: n[i] for g, n in nats.items()}, curve, k)
        for g, value in window.items():
            out[g][i] = value
        out["from_step"][i] = steps[k]
    out["values + readout"] = out["values"] + out["readout"]
    return out


# ----------------------------------------------------------------------------- to convergence
# The paper's design trains each seed on one sequence of 2000 symbols for 1000 steps: too short for
# any pathway to settle, and long runs memorise the sequence (its training loss falls below the
# exact Bayes loss). These runs train on a pool of fresh sequences instead (one per step) and score
# on a held-out sequence of the same chain, for as long as the held-out loss keeps falling.
# scripts/sticky_long_runs.py writes their records into pretrained/sticky/; chapter 6 loads them.

RECORDS = Path(__file__).parent / "pretrained" / "sticky"
LONG_RUN_SCRIPT = "scripts/sticky_long_runs.py"
LONG_SCHEDULES = (("sgd", 0.01, 1.0), ("em", 0.01, 10.0), ("SGD, lr 0.1", 0.1, 1.0))  # name, base lr, W_V factor
PAPER_RUN_LR01 = "paper-run-sgd-lr0.1"   # the record of the paper's run at SGD 0.1 (below, in LONG_RUNS)


@checked
@dataclass(frozen=True)
class LongRunConfig:
    """One long sticky-chain run: its schedules (name, base rate, W_V factor), seeds, length and data.
    ``pool`` 0 is the paper's one training sequence per seed; ``pool`` > 0 that many fresh ones."""
    name: str = "pool64-std0.1"
    schedules: tuple = LONG_SCHEDULES
    seeds: Seeds = PAPER_SEEDS
    steps: Whole(1) = 8000
    T: Whole(2) = 2000
    pool: Whole(0, POOL_STRIDE - 1) = 64
    init_std: Positive = INIT_STD
    record_every: Whole(1) = 25
    fresh: bool = False        # True: a new sequence per seed at every step (``pool`` must be 0)
    intervals: tuple = ()      # extra snapshot intervals (multiples of record_every) the rates are also measured at

    def __post_init__(self):
        """Every field checked once, where it is set (a LongRunConfig is frozen), and stored as plain
        Python values: ``asdict`` of it is saved as JSON with the record."""
        v = _validate
        if not isinstance(self.name, str) or not self.name:
            v.fail("name", "a non-empty str (the record's file name)", self.name)
        if isinstance(self.schedules, (str, dict)) or not hasattr(self.schedules, "__iter__") or not self.schedules:
            v.fail("schedules", "a non-empty tuple of (name, base rate, W_V factor)", self.schedules)
        for i, sched in enumerate(self.schedules):
            if not isinstance(sched, (tuple, list)) or len(sched) != 3 or not isinstance(sched[0], str):
                v.fail(f"schedules[{i}]", "a tuple (name, base rate, W_V factor)", sched)
        if not isinstance(self.intervals, (tuple, list)):
            v.fail("intervals", "a tuple of ints (multiples of record_every), e.g. (5, 20)", self.intervals)
        declared_fields(self)
        checked = {"schedules": tuple((n, v.real(f"schedules[{i}] rate", lr, 0), v.positive(f"schedules[{i}] factor", f))
                                      for i, (n, lr, f) in enumerate(self.schedules)),
                   "fresh": v.boolean("fresh", self.fresh),
                   "intervals": tuple(v.integer(f"intervals[{i}]", n, 1) for i, n in enumerate(self.intervals))}
        if checked["fresh"] and self.pool:
            v.fail("pool", "0 when fresh=True (fresh data has no pool)", self.pool)
        if any(n % self.record_every for n in checked["intervals"]):
            v.fail("intervals", f"multiples of record_every={self.record_every}", self.intervals)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def paper(cls):
        """The main run: the paper's head, rates and seeds, 8000 steps on a pool of 64 sequences; its
        rates also at snapshots 100 and 200 updates apart, to see whether its settle order holds at both."""
        return cls(intervals=(100, 200))

    @classmethod
    def small(cls, **changes):
        """A short prefix of the main run (one seed, 100 steps): what a test reruns against the record."""
        return _validate.replaced(cls(seeds=(PAPER_SEEDS[0],), steps=100), **changes)

    def rates(self):
        return {name: rates(lr, em_like(factor)) for name, lr, factor in self.schedules}


# The runs the script trains (and chapter 6 reads), most important first.
LONG_RUNS = (
    LongRunConfig.paper(),
    LongRunConfig(name="paper-design-std0.1", schedules=LONG_SCHEDULES[1:], steps=3000, pool=0),  # the paper's design, longer
    # the init-scale sweep: 0.03, 0.1, 1/sqrt(d_x) and 0.3, for the two schedules that can settle
    # within its 3000 steps (SGD at 0.01 moves too slowly), at T = 1000 to keep it within minutes;
    # its rates also at snapshots 200 updates apart, to see whether its settle order holds at both
    *(LongRunConfig(name=f"pool64-std{std:g}" + ("-short" if std == INIT_STD else ""), schedules=LONG_SCHEDULES[1:],
                    steps=3000, T=1000, init_std=std, record_every=50, intervals=(200,))
      for std in (0.03, INIT_STD, round(1 / math.sqrt(20), 4), 0.3)),
    # fresh data (a new sequence at every update, none seen twice), photographed every 10 updates,
    # with the rates also at 40 and 100: where constant-rate SGD's noise floor shows. T = 1000 and
    # 3000 updates, as the init sweep's pool run at the paper's scale, so the two compare directly
    LongRunConfig(name="fresh-std0.1", steps=3000, T=1000, pool=0, fresh=True, record_every=10, intervals=(40, 100)),
    # chapter 6's third schedule of the paper's run (SGD at 0.1 everywhere, for the frame-precision
    # section): the paper's design and length, photographed every 10 updates as chapter 6's live run
    # is. Not a long run, but a record all the same, so that the chapter trains only the race itself
    LongRunConfig(name=PAPER_RUN_LR01, schedules=LONG_SCHEDULES[2:], steps=1000, T=2000, pool=0, record_every=10),
)
FRESH_RUN = "fresh-std0.1"
INIT_SWEEP = ("pool64-std0.03", "pool64-std0.1-short", "pool64-std0.2236", "pool64-std0.3")


def _rounded(a, digits=6):
    """Nested lists of floats with ``digits`` significant digits (records stay small and readable)."""
    return np.vectorize(lambda v: float(f"{v:.{digits}g}"))(np.asarray(a, float)).tolist()


@checked
def long_run(cfg: LongRunConfig, device=None, progress=True, checkpoint_path=None):
    """Train ``cfg`` and return its record: a JSON-able dict with the config, the time it took and,
    per schedule, the measurements of ``measure_frame_precision``, the held-out loss at every
    snapshot and the exact Bayes loss on the same held-out sequence, the training loss (mean over
    each record interval), and the final loss on the training data beside the Bayes loss there."""
    run = run_schedules(cfg.rates(), seeds=cfg.seeds, steps=cfg.steps, T=cfg.T, device=device,
                        record_every=cfg.record_every, progress=progress, pool=cfg.pool, init_std=cfg.init_std,
                        fresh=cfg.fresh, checkpoint_path=checkpoint_path, checkpoint_every=500, desc=cfg.name)
    record = {"config": asdict(cfg), "seconds": round(run.seconds, 1), "device": run.device, "schedules": {}}
    snaps = np.asarray(run.snapshot_steps)
    for name in run.schedules:
        m = measure_frame_precision(run, name)
        m.update(rates_at_intervals(run, name, [n // cfg.record_every for n in cfg.intervals]))
        if not (cfg.pool or cfg.fresh):  # per-step curves -> the snapshot grid, so the record stays small
            m["loss"] = m["loss"][:, snaps]
            m["bought"] = {g: np.add.reduceat(b, snaps[:-1], axis=1) for g, b in m["bought"].items()}
            m["loss_steps"] = snaps
        held_out, bayes = run.held_out_curve(name)
        interval = run.loss[name][:, : cfg.steps // cfg.record_every * cfg.record_every]
        record["schedules"][name] = {   # a pool run's "loss" is its held-out curve: kept once, as "held_out"
            **{k: _rounded(v) for k, v in m.items() if k != "bought" and not ((cfg.pool or cfg.fresh) and k == "loss")},
            "bought": {g: _rounded(b) for g, b in m["bought"].items()},
            "held_out": _rounded(held_out), "bayes_held_out": _rounded(bayes),
            "train_loss": _rounded(interval.reshape(len(cfg.seeds), -1, cfg.record_every).mean(-1)),
            "final_train_loss": _rounded(run.final[name]["loss"]), "bayes_train_loss": _rounded(run.bayes["loss"]),
        }
    return record


# ----------------------------------------------------------------------------- chapter 6's controls

# Which part of the EM-like change matters? Eleven schedules on the paper's seeds at T = 1000 (55 heads
# in one batched run, about two and a half minutes on a 2-core CPU): chapter 6 loads the run that
# ``scripts/sticky_long_runs.py --only controls`` saved, and trains it again when asked to.
CONTROLS_T = 1000
CONTROLS = {
    "sgd": rates(0.01), "em": rates(0.01, em_like(10)),       # the comparison again, at this T
    "SGD, lr 0.1": rates(0.1),                                # every matrix at EM's value rate
    "W_V x3": rates(0.01, em_like(3)),                        # the ratio sweep: 1 (SGD), 3, 10 (EM), 30
    "W_V x30": rates(0.01, em_like(30)),
    "W_Q, W_K x10": rates(0.01, {"W_Q": 10, "W_K": 10}),      # the opposite split: fast routing
    "SGD, lr 0.003": rates(0.003), "EM, lr 0.003": rates(0.003, em_like(10)),   # the base-rate sweep
    "SGD, lr 0.03": rates(0.03), "EM, lr 0.03": rates(0.03, em_like(10)),
    "EM, lr 0.1": rates(0.1, em_like(10)),                    # (SGD at base rate 0.1 is the first control)
}
CONTROLS_NAME = "controls"


def controls_run(seeds=PAPER_SEEDS, steps=1000, T=CONTROLS_T, device=None, progress=True, checkpoint_path=None):
    """Train chapter 6's controls (``CONTROLS``) in one batched run: a ``ScheduleRun``."""
    return run_schedules(CONTROLS, seeds=seeds, steps=steps, T=T, device=device, progress=progress,
                         checkpoint_path=checkpoint_path, checkpoint_every=500, desc="controls")


RUN_CONFIG = ("schedules", "seeds", "steps", "T", "chain", "pool", "init_std")  # what a saved run was trained with


def _run_config(run):
    """What a saved run was trained with (``RUN_CONFIG``): compared before a saved run is reused."""
    return {"schedules": run.schedules, "seeds": list(run.seeds), "steps": run.steps, "T": run.T,
            "chain": repr(run.chain), "pool": run.pool, "init_std": run.init_std}


@checked
def save_schedule_run(run: ScheduleRun, path):
    """Save what ``ScheduleRun``'s speed-ups, tables and held-out scores need (the curves, final and
    Bayes metrics, final weights), not the snapshots, as one compressed numpy file (numpy adds
    ".npz" to a path without it; ``load_schedule_run`` takes either path)."""
    if os.fspath(_validate.file_path("path", path)).endswith(("/", os.sep)) or os.path.isdir(path):  # not dir.npz
        _validate.fail("path", "a file path for the run's .npz file", f"{path!r}, a folder (one that exists, or a path "
                       "ending in a separator)", described=True)
    path = _validate.writable_path("path", _npz(path))
    arrays = {f"bayes/{k}": np.asarray(v) for k, v in run.bayes.items()}
    for i, name in enumerate(run.schedules):
        for metric in ("loss", "entropy", "accuracy"):
            arrays[f"{i}/{metric}"] = np.asarray(getattr(run, metric)[name], np.float32)
        arrays.update({f"{i}/final/{k}": np.asarray(v) for k, v in run.final[name].items()})
        arrays.update({f"{i}/params/{p}": run.params[name][p].cpu().numpy() for p in PARAM_NAMES})
    meta = {**_run_config(run), "names": list(run.schedules), "seconds": round(run.seconds, 1), "device": run.device}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)


def saved_run_config(path):
    """The configuration a saved run was trained with (``_run_config``); ``path`` is the one
    ``save_schedule_run`` wrote, with or without the ".npz" numpy adds, and must exist."""
    if not isinstance(path, (str, os.PathLike)) or os.path.isdir(path):
        _validate.fail("path", "the path of a run's .npz file (save_schedule_run writes one)", path)
    path = path if os.path.exists(path) else _npz(path)
    if not os.path.exists(path):
        _validate.fail("path", "the path of a run's .npz file (save_schedule_run writes one)",
                       f"{os.fspath(path)!r}, which does not exist", described=True)
    meta = checkpoints.read_npz(path, "a run saved by save_schedule_run")["meta"]
    if not all(k in meta for k in RUN_CONFIG):
        _validate.fail(str(path), f"a saved run whose meta holds {list(RUN_CONFIG)}", sorted(meta))
    return {k: meta[k] for k in RUN_CONFIG}


def load_schedule_run(path):
    """A ``ScheduleRun`` as ``save_schedule_run`` wrote it (on the default chain; no snapshots); ``path``
    is the one it was saved to, with or without the ".npz" numpy adds."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
        path = _npz(path)
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        _validate.fail("path", "a file that save_schedule_run wrote", path)
    a = checkpoints.read_npz(path, "a run saved by save_schedule_run")
    meta = a.pop("meta")
    wanted = ("chain", "names", "schedules", "seeds", "steps", "T", "seconds", "device", "pool", "init_std")
    if not all(k in meta for k in wanted):
        _validate.fail(str(path), f"a saved run whose meta holds {list(wanted)}", sorted(meta))
    chain = StickyMarkovChain()
    if repr(chain) != meta["chain"]:
        _validate.fail(str(path), f"a run saved for the default chain {chain!r}",
                       f"one saved for {meta['chain']}, which load_schedule_run cannot rebuild", described=True)
    names = meta["names"]
    per = {name: i for i, name in enumerate(names)}
    missing = [k for i in per.values() for k in (f"{i}/loss", f"{i}/entropy", f"{i}/accuracy")
               + tuple(f"{i}/params/{p}" for p in PARAM_NAMES) if k not in a]
    if missing:
        checkpoints.damaged(path, "a run saved by save_schedule_run", f"it has no arrays {missing[:3]}", "save the run again")
    return ScheduleRun(
        schedules=meta["schedules"], seeds=tuple(meta["seeds"]), steps=meta["steps"], T=meta["T"], chain=chain,
        **{m: {n: a[f"{i}/{m}"] for n, i in per.items()} for m in ("loss", "entropy", "accuracy")},
        final={n: {k.split("/")[-1]: a[k] for k in a if k.startswith(f"{i}/final/")} for n, i in per.items()},
        bayes={k.split("/")[-1]: a[k] for k in a if k.startswith("bayes/")},
        snapshot_steps=np.array([], dtype=int), values={},
        params={n: {p: torch.from_numpy(a[f"{i}/params/{p}"]) for p in PARAM_NAMES} for n, i in per.items()},
        seconds=meta["seconds"], device=meta["device"], pool=meta["pool"], init_std=meta["init_std"])


def _npz(path):
    """``path`` as numpy's savez writes it: with ".npz" added when it does not end in it."""
    path = os.fspath(path)
    return path if path.endswith(".npz") else path + ".npz"


def _existing_folder(directory):
    """None (the shipped records) or a folder that exists: else "run the script" would not help."""
    if _validate.folder("directory", directory) is not None and not os.path.isdir(directory):
        _validate.fail("directory", "an existing folder of records (or None: the shipped ones)", directory)


def controls_path(directory=None):
    return (_validate.folder("directory", directory) or RECORDS) / f"{CONTROLS_NAME}.npz"


def load_controls(directory=None):
    """Chapter 6's controls as ``scripts/sticky_long_runs.py --only controls`` saved them."""
    _existing_folder(directory)
    path = controls_path(directory)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python {LONG_RUN_SCRIPT} --only {CONTROLS_NAME}` "
                                "to train it")
    return load_schedule_run(path)


@checked
def record_path(name: str, directory=None):
    return (_validate.folder("directory", directory) or RECORDS) / f"long-{name}.json"


def load_long_run(name="pool64-std0.1", directory=None):
    """The record ``scripts/sticky_long_runs.py`` wrote for the run ``name`` (see ``LONG_RUNS``)."""
    names = [c.name for c in LONG_RUNS]
    if name not in names and directory is None:
        _validate.fail("name", f"one of {names}", name)
    _existing_folder(directory)
    path = record_path(name, directory)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python {LONG_RUN_SCRIPT}` to train it")
    return checkpoints.read_json(path, f"the record of the long run {name!r}", keys=("config", "schedules"),
                                 advice=f"run `python {LONG_RUN_SCRIPT} --only {name} --force` to train it again")


@checked
def within(steps, excess, tolerance: Real()):
    """The first of ``steps`` at which ``excess`` (a loss above some target) is <= ``tolerance``
    and stays there to the end, per row; nan where it never does."""
    # tolerance may be < 0: excess is signed (below the target)
    excess = np.atleast_2d(_validate.number_array("excess", excess))
    steps = _validate.number_array("steps", steps)
    if steps.ndim != 1 or len(steps) != excess.shape[-1] or (np.diff(steps) <= 0).any():   # as _check_curve refuses
        _validate.fail("steps", f"{excess.shape[-1]} strictly increasing steps (one per column of excess)", steps)
    out = np.full(len(excess), np.nan)
    for i, e in enumerate(excess):
        above = np.nonzero(~(e <= tolerance))[0]
        if len(above) == 0:
            out[i] = steps[0]
        elif above[-1] < len(e) - 1:
            out[i] = steps[above[-1] + 1]
    return out


def frame_precision_of_record(record, name):
    """``FramePrecision`` of schedule ``name`` of a long-run record (``long_run``, ``load_long_run``)."""
    schedules = _validate.record("record", record, ("schedules",), "load_long_run")["schedules"]
    if name not in schedules:
        _validate.fail("name", f"one of {list(schedules)}", name)
    m = _validate.record(f"record['schedules'][{name!r}]", schedules[name], ("held_out",), "load_long_run")
    return frame_precision_of({**m, "loss": m.get("loss", m["held_out"])})


PLATEAU = 0.005  # nats: the held-out loss has stopped falling once it stays this close to its lowest value


@checked
def convergence(record, name, plateau: Real(0) = PLATEAU):
    """Where schedule ``name`` of a long-run record stands on held-out data, per seed ((S,) arrays):

    ``excess``        final held-out loss minus the exact Bayes loss on the same sequence (nats)
    ``best_excess``   the lowest held-out loss reached, minus Bayes
    ``last_quarter``  how much the held-out loss still fell over the last quarter of the run
    ``plateau_step``  the first snapshot from which it stays within ``plateau`` of its lowest value
    ``gap``           final held-out loss minus the final training loss (mean over the training
                      data): how much of the training loss is memorised
    ``below_bayes_step``  the first step at which the training loss (mean over a record interval)
                      falls below the exact Bayes loss of the training data, nan if never: a model
                      below the Bayes loss of its own training data has memorised it
    ``learned``       the share of what there is to learn that the run learned: of the way from the uniform
                      predictor's loss, ln(number of symbols), to the exact Bayes loss, how much the final
                      held-out loss covered (a long run is on the default chain; nan if Bayes is not below it)
    ``excess_gap``    ``gap`` with each loss measured above its own data's Bayes loss: the held-out and
                      training sequences differ in how predictable they are, and the raw gap carries that
    """
    # plateau >= 0: a distance from the lowest value
    schedules = _validate.record("record", record, ("config", "schedules"), "load_long_run")["schedules"]
    if name not in schedules:
        _validate.fail("name", f"one of {list(schedules)}", name)
    every = _validate.record("record['config']", record["config"], ("record_every",), "load_long_run")["record_every"]
    m = _validate.record(f"record['schedules'][{name!r}]", schedules[name], ("loss_steps", "held_out", "bayes_held_out",
                         "train_loss", "bayes_train_loss", "final_train_loss"), "load_long_run")
    steps = np.asarray(m["loss_steps"])
    held, bayes = np.asarray(m["held_out"], float), np.asarray(m["bayes_held_out"], float)
    train_loss = np.asarray(m["train_loss"], float)
    below = train_loss < np.asarray(m["bayes_train_loss"], float)[:, None]
    chance = math.log(StickyMarkovChain().n_symbols)   # the loss of predicting every symbol alike
    n = held.shape[1]
    return {"steps": steps, "excess": held[:, -1] - bayes, "best_excess": held.min(1) - bayes,
            "last_quarter": held[:, (3 * n) // 4] - held[:, -1],
            "plateau_step": within(steps, held - held.min(1, keepdims=True), plateau),
            "gap": held[:, -1] - np.asarray(m["final_train_loss"], float),
            "below_bayes_step": np.where(below.any(1), (below.argmax(1) + 1) * every, np.nan),
            "learned": np.where(chance > bayes, (chance - held[:, -1]) / np.maximum(chance - bayes, 1e-300), np.nan),
            "excess_gap": (held[:, -1] - bayes) - (np.asarray(m["final_train_loss"], float)
                                                   - np.asarray(m["bayes_train_loss"], float))}


LEARNED = 0.5      # a seed has learned the task once it learned at least half of what there is to learn
LEARNED_LINES = (LEARNED, 0.8)            # row 8's gate is printed at a stricter learned line too ...
PLATEAU_LINES = (0.0025, PLATEAU, 0.01)   # ... and at half and twice its plateau line


@checked
def late_gate(record, name, plateau=PLATEAU, learned: Real(0, 1) = LEARNED):
    """Whether schedule ``name`` of a long-run record can show what happens late in training (row 8's gate).

    Every seed must have learned (``convergence``'s "learned" at least ``learned``) and reached its
    plateau no later than the start of the run's last fifth (``diagnostics.SETTLE_MIN_SPAN``, as a
    settle step must), and the run must not measurably memorise: the mean ``excess_gap`` over seeds is
    at most two standard errors above zero (a one-seed record has no standard error and never meets it).
    Returns ``convergence``'s figures with ``gap_mean``, ``gap_se`` and ``meets`` added."""
    c = convergence(record, name, plateau)
    last_fifth = record["config"]["steps"] * (1 - diagnostics.SETTLE_MIN_SPAN)
    gap = c["excess_gap"]
    c["gap_mean"] = float(gap.mean())
    c["gap_se"] = float(gap.std(ddof=1) / math.sqrt(len(gap))) if len(gap) > 1 else math.nan
    c["meets"] = bool((c["learned"] >= learned).all() and (c["plateau_step"] <= last_fifth).all()  # nan fails both
                      and c["gap_mean"] <= 2 * c["gap_se"])
    return c
