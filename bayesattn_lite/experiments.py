"""The paper's experiments, run the way the paper ran them, with the controls a careful reader asks for.

The sticky-Markov experiment (paper section 5.2; settings from the authors' public code)::

    result = em_vs_sgd()                    # 5 seeds x {SGD, EM-like}, 1000 steps, T = 2000
    result.speedup                          # per seed: 1000 / (first step at which EM <= SGD's final loss)
    result.table()                          # final loss / entropy / accuracy vs the exact Bayes predictor

Each seed fixes everything: its sequence is ``chain.sample(T, seed)`` (numpy's default_rng(seed))
and its initial weights are ``attention.init_params(20, 10, 15, 8, std=0.1, seed=seed)`` (a torch
Generator seeded with it). Both schedules of a seed start from the same weights on the same sequence,
so the comparison is paired. ``run_schedules`` trains any set of learning-rate schedules this way,
all seeds and schedules in one batched computation (``batched.train``).
"""

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from . import _validate, attention, batched, diagnostics
from .attention import PARAM_NAMES
from .tasks import StickyMarkovChain
from .train import em_like, rates

PAPER_SEEDS = (42, 2024, 1337, 7777, 9999)
D_K, D_V, INIT_STD = 10, 15, 0.1   # the authors' head: W_Q, W_K 20 -> 10, W_V 20 -> 15, W_O 15 -> 8
HELD_OUT_OFFSET = 1_000_000        # the held-out sequence of seed s is chain.sample(T, s + this)


def schedule(lr, **factors):
    """Learning rates per matrix: ``lr`` times a factor (``train.rates``). ``schedule(0.01, W_V=10)``
    is the EM-like schedule, ``train.rates(0.01, train.em_like())``."""
    return rates(lr, factors)


def init_model(seed, chain, dtype=torch.float32):
    """The seed's initial weights, N(0, 0.1^2), as ``attention.init_params`` draws them."""
    return attention.init_params(chain.d_embed, D_K, D_V, chain.n_symbols, std=INIT_STD, seed=seed, dtype=dtype)


RTOL = 1e-6  # "at or below" allows float32 rounding: two identical schedules give a speed-up of 1


def first_step_at_or_below(curve, final, threshold):
    """Per seed, the first number of updates t after which the loss is <= threshold, else nan.

    ``curve`` (S, steps) holds the loss after t = 0..steps-1 updates and ``final`` (S,) the loss
    after all ``steps``; so a run that reaches the threshold only at its very end gives ``steps``.
    A loss within a relative RTOL of the threshold counts as reaching it.
    """
    losses = np.concatenate([curve, np.asarray(final)[:, None]], axis=1)
    hit = losses <= np.asarray(threshold)[:, None] * (1 + RTOL)
    return np.where(hit.any(axis=1), hit.argmax(axis=1), np.nan).astype(float)


def _summary(values):
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.4f} ± {values.std(ddof=1) if len(values) > 1 else 0.0:.4f}"


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

    def training_data(self):
        """(x, y) of every seed's training sequence, stacked: (S, T-1, d_x), (S, T-1)."""
        data = [self.chain.sample(self.T, s, dtype=torch.float64) for s in self.seeds]
        return torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])

    def steps_to(self, name, threshold):
        """Per seed, the first number of updates after which schedule ``name`` is at or below ``threshold``."""
        return first_step_at_or_below(self.loss[name], self.final[name]["loss"], threshold)

    def speedup(self, name, baseline="sgd"):
        """(steps_to, speed-up) of ``name`` against ``baseline``'s final loss: steps / steps_to."""
        steps_to = self.steps_to(name, self.final[baseline]["loss"])
        with np.errstate(divide="ignore", invalid="ignore"):
            return steps_to, self.steps / steps_to

    def held_out(self, T=None, offset=HELD_OUT_OFFSET):
        """Metrics of every schedule's final weights, and of the exact predictor, on a fresh sequence
        per seed (``chain.sample(T, seed + offset)``): {name or "bayes": {metric: (S,)}}."""
        T = T or self.T
        data = [self.chain.sample(T, s + offset, dtype=torch.float64) for s in self.seeds]
        x = torch.stack([d[0] for d in data])
        y = torch.stack([d[1] for d in data])
        out = {}
        for name in self.schedules:
            params = {n: self.params[name][n].to(torch.float64) for n in PARAM_NAMES}
            out[name] = batched.evaluate(x, y, params)
        per_seed = [self.chain.bayes_metrics(x[i], y[i]) for i in range(len(self.seeds))]
        out["bayes"] = {key: np.array([m[key] for m in per_seed]) for key in per_seed[0]}
        return out

    def table(self, names=None):
        """Mean ± sd over seeds of the final loss, entropy and accuracy, and the exact Bayes predictor."""
        names = list(names or self.schedules)
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


def _check_schedules(schedules):
    if not isinstance(schedules, dict) or not schedules:
        raise ValueError(f"schedules: expected a non-empty dict name -> {{matrix: rate}}, got {schedules!r}")
    for name, per_matrix in schedules.items():
        if not isinstance(per_matrix, dict) or set(per_matrix) != set(PARAM_NAMES):
            raise ValueError(f"schedules[{name!r}]: expected a rate for each of {PARAM_NAMES} "
                             f"(e.g. experiments.schedule(0.01, W_V=10)), got {per_matrix!r}")
        for matrix, rate in per_matrix.items():
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (np.isfinite(rate) and rate >= 0):
                raise ValueError(f"schedules[{name!r}][{matrix!r}]: expected a finite rate >= 0, got {rate!r}")


def _check_seeds(seeds):
    seeds = tuple(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected one or more distinct ints, got {seeds!r}")
    return seeds


def run_schedules(schedules, seeds=PAPER_SEEDS, steps=1000, T=2000, chain=None, device=None,
                  dtype=torch.float32, record_every=10, block_size=None, progress=True,
                  checkpoint_path=None, checkpoint_every=100, desc="sticky Markov"):
    """Train every schedule on every seed (all in one batched run) and measure them.

    ``schedules`` maps a name to per-matrix rates (see ``schedule``). Models are laid out
    schedule-major: model m is schedule m // S on seed m % S. ``checkpoint_path`` saves the run
    every ``checkpoint_every`` steps and resumes it after an interruption.
    """
    _check_schedules(schedules)
    seeds = _check_seeds(seeds)
    chain = chain or StickyMarkovChain()
    names = list(schedules)
    S = len(seeds)
    data = [chain.sample(T, seed, dtype=torch.float64) for seed in seeds]   # checks T >= 2
    inits = [init_model(seed, chain, torch.float64) for seed in seeds]
    x = torch.stack([data[m % S][0] for m in range(len(names) * S)])
    y = torch.stack([data[m % S][1] for m in range(len(names) * S)])
    params = batched.stack([inits[m % S] for m in range(len(names) * S)])
    lrs = {matrix: [schedules[names[m // S]][matrix] for m in range(len(names) * S)] for matrix in PARAM_NAMES}
    run = batched.train(
        x, y, params, lrs, steps, names=[f"{names[m // S]}, seed {seeds[m % S]}" for m in range(len(names) * S)],
        record_every=record_every, block_size=block_size, device=device, dtype=dtype, progress=progress,
        desc=desc, checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every)

    def per_schedule(array, i):  # model axis -> this schedule's seeds, first axis
        return array[..., i * S:(i + 1) * S]

    means = chain.means.numpy().T                                         # (d_x, n_symbols)
    values = {}
    for i, name in enumerate(names):
        W_V = run.W_V[:, i * S:(i + 1) * S]                               # (snapshots, S, d_v, d_x)
        values[name] = np.einsum("tsvd,dn->stnv", W_V, means)
    per_seed_bayes = [chain.bayes_metrics(*d) for d in data]
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
    value_lr_ratio: float
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


def em_vs_sgd(seeds=PAPER_SEEDS, steps=1000, T=2000, lr=0.01, value_lr_ratio=10.0, device=None,
              chain=None, extra_schedules=None, **kwargs):
    """SGD (``lr`` on every matrix) against EM-like (``lr * value_lr_ratio`` on W_V), paired by seed.

    The defaults are the paper's. ``extra_schedules`` ({name: rates}, see ``schedule``) are trained
    in the same batched run, on the same seeds, and land in ``result.run`` (controls come almost
    for free this way). ``kwargs`` go to ``run_schedules`` (dtype, record_every, block_size,
    progress, checkpoint_path, checkpoint_every).
    """
    if isinstance(value_lr_ratio, bool) or not isinstance(value_lr_ratio, (int, float)) or not value_lr_ratio > 0:
        raise ValueError(f"value_lr_ratio: expected a positive number, got {value_lr_ratio!r}")
    schedules = {"sgd": rates(_validate.positive("lr", lr)), "em": rates(lr, em_like(value_lr_ratio))}
    for name, extra in (extra_schedules or {}).items():
        if name in schedules:
            raise ValueError("extra_schedules: the names 'sgd' and 'em' are taken by the main comparison, "
                             f"got {name!r}")
        schedules[name] = extra
    run = run_schedules(schedules, seeds, steps, T, chain=chain, device=device, **kwargs)
    steps_to, speedup = run.speedup("em", "sgd")
    return EMvsSGDResult(
        seeds=run.seeds, steps=steps, T=T, lr=lr, value_lr_ratio=value_lr_ratio,
        loss_sgd=run.loss["sgd"], loss_em=run.loss["em"], steps_to_sgd_final=steps_to, speedup=speedup,
        final_loss_sgd=run.final["sgd"]["loss"], final_loss_em=run.final["em"]["loss"],
        final_entropy_sgd=run.final["sgd"]["entropy"], final_entropy_em=run.final["em"]["entropy"],
        final_accuracy_sgd=run.final["sgd"]["accuracy"], final_accuracy_em=run.final["em"]["accuracy"],
        bayes_loss=run.bayes["loss"], h_min=run.chain.h_min, snapshot_steps=run.snapshot_steps,
        values_sgd=run.values["sgd"], values_em=run.values["em"], run=run,
    )


# ----------------------------------------------------------------------------- value trajectories

# The small run of chapter 6's widget: its default settings, its size, and the choices it offers.
SMALL_DEFAULTS = {"ratio": 10.0, "self_prob": 0.3, "lr": 0.01}
SMALL_SIZE = {"seeds": (42, 2024, 1337), "T": 600, "steps": 1000}
SMALL_RATIOS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0)
SMALL_RATES = (0.003, 0.01, 0.03, 0.1)


def small_em_vs_sgd(ratio=SMALL_DEFAULTS["ratio"], self_prob=SMALL_DEFAULTS["self_prob"], lr=SMALL_DEFAULTS["lr"],
                    device=None, **size):
    """A small EM-vs-SGD run (3 seeds, T = 600, 1000 steps: a few seconds on a CPU), what chapter 6's
    widget reruns when a control moves; ``size`` overrides seeds, T, steps."""
    size = {**SMALL_SIZE, **size}
    chain = StickyMarkovChain(self_prob=self_prob)
    return em_vs_sgd(seeds=size["seeds"], steps=size["steps"], T=size["T"], lr=lr,
                     value_lr_ratio=ratio, chain=chain, device=device, progress=False)


def value_pca(trajectories, n_components=2):
    """Value trajectories of several schedules in one PCA basis, with their lengths.

    ``trajectories``: {name: (snapshots, n_symbols, d_v)} (e.g. ``result.values_em[seed_index]``).
    The principal axes are fitted on every snapshot of every schedule together, so the panels
    share coordinates. Returns a dict: "projections" {name: (snapshots, n_symbols, n_components)},
    "explained" (variance share of each component), "path_length" {name: mean over symbols of the
    distance travelled in the full value space}, "displacement" {name: mean distance from the first
    to the last snapshot} and "straightness" {name: displacement / path_length, 1 for a straight run}.
    """
    if not trajectories:
        raise ValueError("trajectories: expected {name: (snapshots, n_symbols, d_v) array}, got nothing")
    arrays = {name: np.asarray(t, dtype=float) for name, t in trajectories.items()}
    for name, t in arrays.items():
        if t.ndim != 3 or t.shape[0] < 2:
            raise ValueError(f"trajectories[{name!r}]: expected shape (snapshots >= 2, n_symbols, d_v), got {t.shape}")
    fit = diagnostics.pca(np.concatenate([t.reshape(-1, t.shape[-1]) for t in arrays.values()]), n_components)
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
# Measured here on the sticky chain itself, from the snapshots of a run (every record_every updates).

SETTLED = 0.9  # a pathway has settled once it has done this share of its total movement (path length)
GROUPS = {"routing": ("W_Q", "W_K"), "values": ("W_V",), "readout": ("W_O",)}


def _attention_maps(x, W_Q, W_K, queries):
    """alpha (len(queries), T) of the causal head on one sequence at the query positions ``queries``,
    for one snapshot of W_Q, W_K."""
    q, k = x[queries] @ W_Q.T, x @ W_K.T
    s = q @ k.T / math.sqrt(q.shape[-1])
    future = torch.arange(x.shape[0])[None, :] > queries[:, None]
    return torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)


def frame_rate(x, W_Q, W_K, max_queries=500):
    """(snapshots - 1,) the change of the attention maps between consecutive snapshots: the mean
    over query rows of the total-variation distance 1/2 sum_j |alpha'_ij - alpha_ij|, in [0, 1].
    A distance between probability rows, so it is not inflated when the scores are small. The mean
    is taken over ``max_queries`` evenly spaced query rows (all rows if there are fewer): at
    T = 2000 that is a quarter of the rows and a quarter of the time, for the same mean."""
    x = torch.as_tensor(x, dtype=torch.float64)
    queries = torch.linspace(0, x.shape[0] - 1, min(max_queries, x.shape[0])).round().long()
    previous, out = None, []
    for wq, wk in zip(torch.as_tensor(W_Q), torch.as_tensor(W_K)):
        alpha = _attention_maps(x, wq.double(), wk.double(), queries)
        if previous is not None:
            out.append(0.5 * (alpha - previous).abs().sum(-1).mean().item())
        previous = alpha
    return np.array(out)


def precision_rate(x, W_V):
    """(snapshots - 1,) the change of the values v_j = W_V x_j on the sequence between consecutive
    snapshots, relative to their *final* size: ||V' - V|| / ||V_final||. Dividing by the current
    size instead would inflate the early rates, when the values are still near their N(0, 0.1^2) start."""
    x = torch.as_tensor(x, dtype=torch.float64)
    return diagnostics.change_vs_final(torch.as_tensor(W_V, dtype=torch.float64) @ x.T)  # V: (snapshots, d_v, T)


@dataclass
class FramePrecision:
    """Frame and precision of every schedule, per seed (leading axis S).

    ``frame_rate``, ``precision_rate``: (S, snapshots - 1), change per snapshot interval ending at
    ``rate_steps``. ``t_frame``, ``t_values``: (S,) the update by which the attention maps / the
    values have done ``SETTLED`` (90%) of their total movement (the summed rates): a settling time
    that means the same whether a pathway moves fast or hardly at all. ``frame_moved``: (S,) mean
    total-variation distance between the first and last attention maps; ``values_moved``: (S,)
    ||V_last - V_first|| / ||V_last||. ``loss_after_frame``: (S,) share of the total loss decrease
    that comes after t_frame. ``attribution``: {group: (S,)} the first-order loss decrease bought by each
    parameter group, sum_t lr_g |grad_g L(t)|^2 (exact to first order for plain gradient descent),
    as a share of the realised decrease; ``attribution_after_frame``: the same, after t_frame only.
    ``first_order``: (S,) the sum of the attributions over the realised decrease (near 1 when the
    first-order account is accurate). ``bought``: {group: (S, steps)} the same step by step, as a
    share of the realised decrease (its cumulative sum is the attribution so far).
    """
    rate_steps: np.ndarray
    frame_rate: np.ndarray
    precision_rate: np.ndarray
    t_frame: np.ndarray
    t_values: np.ndarray
    frame_moved: np.ndarray
    values_moved: np.ndarray
    loss_after_frame: np.ndarray
    attribution: dict
    attribution_after_frame: dict
    first_order: np.ndarray
    bought: dict


def _settled(steps, rates):
    """The first step by which the summed rates reach SETTLED of their total."""
    travelled = np.concatenate([[0.0], np.cumsum(rates)])
    return float(diagnostics.progress_step(np.concatenate([[0], steps]), travelled, SETTLED))


def frame_precision(run, name):
    """``FramePrecision`` of schedule ``name`` of a ``ScheduleRun`` (every seed)."""
    if name not in run.schedules:
        raise ValueError(f"name: expected one of {list(run.schedules)}, got {name!r}")
    x, _ = run.training_data()
    snaps, steps = run.snapshots[name], run.snapshot_steps[1:]
    frame = np.stack([frame_rate(x[i], snaps["W_Q"][i], snaps["W_K"][i]) for i in range(len(run.seeds))])
    precision = np.stack([precision_rate(x[i], snaps["W_V"][i]) for i in range(len(run.seeds))])
    t_frame = np.array([_settled(steps, r) for r in frame])
    t_values = np.array([_settled(steps, r) for r in precision])
    moved = [(frame_rate(x[i], snaps["W_Q"][i][[0, -1]], snaps["W_K"][i][[0, -1]])[0],
              precision_rate(x[i], snaps["W_V"][i][[0, -1]])[0]) for i in range(len(run.seeds))]
    final = run.final[name]["loss"]
    loss = np.concatenate([run.loss[name], final[:, None]], axis=1)   # after 0..steps updates
    drop = loss[:, 0] - final
    after = np.array([(loss[i, int(t)] - final[i]) / drop[i] for i, t in enumerate(t_frame)])
    rates = run.schedules[name]
    bought = {g: sum(rates[m] * run.grad_sq[name][m] for m in members) / drop[:, None]  # (S, steps)
              for g, members in GROUPS.items()}
    attribution = {g: b.sum(1) for g, b in bought.items()}
    late = {g: np.array([b[i, int(t):].sum() for i, t in enumerate(t_frame)]) for g, b in bought.items()}
    return FramePrecision(rate_steps=steps, frame_rate=frame, precision_rate=precision, t_frame=t_frame,
                          t_values=t_values, frame_moved=np.array([m[0] for m in moved]),
                          values_moved=np.array([m[1] for m in moved]), loss_after_frame=after, attribution=attribution,
                          attribution_after_frame=late, first_order=sum(attribution.values()), bought=bought)
