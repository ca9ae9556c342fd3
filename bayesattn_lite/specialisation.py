"""The specialisation experiment of chapters 4 and 5: one head trained on the hidden-sources toy
task (``toy``), with everything the chapters measure recorded along the way.

- ``Config``        every size and rate of the experiment, in one place (the chapters print it)
- ``run``           one seed: data, head, the foundation's training loop, and a history of
                    probe measurements every ``log_every`` steps (loss, distance to the Bayes
                    posterior, attention entropy and mass on signal positions, attended
                    compatibility, value-PCA share, and the frame rate: the mean total-variation
                    distance between attention rows of consecutive snapshots); the precision rate
                    (values' change per interval / their final size) and the parameters at every
                    snapshot; optionally the one-step "loop" measurements
- ``run_seeds``     the same for several seeds
- ``curves``        one metric of several runs as a (seeds, steps) array
- ``Config.frozen`` the loop's ablations: matrices trained at rate 0 (any subset: W_Q and W_K cut
                    routing; W_V and W_O together cut content, W_V alone does not)
- ``Config.cued``   the same head on ``tasks.cued_sources_task``, two sources and a cue: the values need routing
- ``content_margin`` how well the content map W_O W_V alone tells the sources apart (a probe metric)
- ``timescales``    the course's settle measure (``diagnostics.settle``) of the frame and precision
                    rates: t_frame, t_values, and what the loss does after t_frame
- ``continue_training``  more steps of the same schedule from a run's final weights (the end of
                    a longer run, cheaply)
- ``loop_size``     the loop's flow and change of signal mass against their own peaks (size, not timing)
- ``content_gap``   the EM reading as a mechanism: the trained head's loss against the best content
                    (W_O W_V, a convex problem) for the head's own routing at the same step
(its figures are in ``plots``: ``specialisation_curves``, ``value_manifold``, ``one_step_loop``,
``signal_attention_maps``; its widget in ``widgets.specialisation_explorer``)

The loop measurements (``loop_every`` > 0) compare, at step t, what the paper's laws predict with
what one optimizer step actually did (state at t+1), on the training batch itself:

- ``attn_pair_corr``   Pearson, over visible pairs (i >= 1), of the advantage law's predicted change
                       of alpha (``diagnostics.predicted_attention_change``) with the realised one
- ``flow``, ``dmass``  the advantage flow into the signal positions, and the realised change of the
                       attention mass on them (mean over queries)
- ``group_corr``       Pearson, over queries (i >= 1 that see at least one signal and one distractor
                       position), of each query's advantage flow into its signal positions with the
                       realised change of its signal mass: the same cross-sectional statistic as
                       ``attn_pair_corr``, for groups of keys instead of single pairs
- ``group_pred_corr``  the same with the advantage law's predicted change of alpha summed over the
                       query's signal keys (the pair prediction, added up per group)
- ``value_pair_corr``  Pearson, over visible pairs, of alpha_ij with how far v_j moved against u_i
- ``prototype_cos``    cosine between the realised move of each source's value prototype W_V mu_z
                       and the pull -sum alpha_ij u_i summed over that source's signal positions
- ``prototype_cos_full``  the same against the prototype's full gradient step, the pull of *every*
                       position j weighted by x_j . mu_z (what a step of the shared W_V does; 1 up to
                       rounding whenever W_V trains)
"""

import atexit
import concurrent.futures
import contextlib
import functools
import math
import multiprocessing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from . import _validate, attention, diagnostics, tasks
from ._types import Distinct, Float, Int, Positive, Real, Seed, Seeds, Tensor, Whole, checked, declared_fields, unchecked, words
from .attention import AttentionHead
from .train import GROUPS, History, Recipe, em_like, pick_device, rates, train, usable_cpus

PARAM_NAMES = attention.PARAM_NAMES


@checked
@dataclass(frozen=True)
class Config:
    """Sizes and rates of the experiment. ``value_ratio`` multiplies the learning rate of W_V
    (1: plain gradient descent; 10: the paper's EM-like schedule). ``frozen`` names matrices that
    train at rate 0 (a learning-rate multiplier of 0: the ablations of chapter 4's loop). ``cued``
    swaps the toy for ``tasks.cued_sources_task`` (two sources per sequence and a cue: the values
    need routing), with the same sizes; its last two input coordinates are the stream tag and the cue."""
    _made_by = "Config.paper(), Config.small(...)"

    n_sources: Whole(2) = 3
    d_x: int = 12
    seq_len: Whole(1) = 16
    signal_prob: Real(0.0, 1.0, low_open=True) = 0.25
    separation: Positive = 2.0
    noise: Positive = 1.0
    task_seed: Seed = 0
    d_k: Whole(1) = 8
    d_v: Whole(1) = 8
    init_std: Positive = 0.1
    n_train: Whole(1) = 1024
    n_probe: Whole(1) = 256
    steps: Whole(1) = 600
    lr: Positive = 0.3
    value_ratio: Positive = 1.0
    log_every: Whole(1) = 10
    frozen: tuple = ()
    cued: bool = False

    def __post_init__(self):
        """Every field checked once, where it is set (a Config is frozen): a bad size or rate is named
        here, not later under the name of the inner function it reaches. Stored as plain Python values."""
        v = _validate
        if isinstance(self.frozen, str) or not isinstance(self.frozen, (tuple, list)):
            v.fail("frozen", f"a tuple of distinct names among {list(PARAM_NAMES)}", self.frozen)
        if any(n not in PARAM_NAMES for n in self.frozen) or len(set(self.frozen)) != len(self.frozen):
            v.fail("frozen", f"distinct names among {list(PARAM_NAMES)}", self.frozen)
        declared_fields(self)
        cued = v.boolean("cued", self.cued)
        checked = {"d_x": v.integer("d_x", self.d_x, self.n_sources + 1 + cued), "cued": cued,
                   "frozen": tuple(self.frozen)}
        if self.n_probe * self.seq_len < 2:   # the values' PCA on the probe needs two points
            v.fail("n_probe, seq_len", "n_probe * seq_len >= 2 (the probe's values are compared by a PCA)",
                   f"{self.n_probe} x {self.seq_len}", described=True)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def paper(cls, **changes):
        """The full-size run of chapters 4 and 5: the defaults. The paper fixes no sizes or rates for
        its toy simulation (it leaves them open), so these are the course's choice, stated in the
        chapters."""
        return _validate.replaced(cls(), **changes)

    @classmethod
    def small(cls, **changes):
        """A quick version (fewer sequences and steps): a redraw of chapter 4's widget takes seconds."""
        return _validate.replaced(cls(n_train=256, n_probe=128, steps=400), **changes)

    def describe(self):
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items())


def _check_runs(runs):
    """``runs: Sequence[Run]`` as a list, not empty and every one a Run (beartype checks one of them)."""
    if not isinstance(runs, (list, tuple)) or not runs:   # one Run not in a list too (curves' Distinct lets it by)
        _validate.fail("runs", "at least one Run" if not runs else "a list of Runs ([run_] for one)", runs or "none",
                       described=not runs)
    for i, r in enumerate(runs):
        if not isinstance(r, Run):
            _validate.fail(f"runs[{i}]", words(Run), r)
    return list(runs)


@checked
def make_task(cfg: Config):
    make = tasks.cued_sources_task if cfg.cued else tasks.sources_task
    return make(cfg.n_sources, cfg.d_x, cfg.seq_len, cfg.signal_prob, cfg.noise, cfg.separation, cfg.task_seed)


@checked
def make_data(cfg, seed: Seed):
    """(task, train, probe): the task is the same for every seed; the samples and the head are not."""
    task = make_task(cfg)
    return task, task.sample(cfg.n_train, seed=10_000 + seed), task.sample(cfg.n_probe, seed=20_000 + seed)


@checked
def make_model(cfg: Config, seed):
    return AttentionHead(cfg.d_x, cfg.d_k, cfg.d_v, cfg.n_sources, std=cfg.init_std, seed=seed)


@checked
def lr_multipliers(cfg: Config):
    """The run's schedule: plain gradient descent (None), or EM-like with ``cfg.value_ratio``, with a
    factor 0 for every matrix in ``cfg.frozen``."""
    factors = {} if cfg.value_ratio == 1 else em_like(cfg.value_ratio)
    factors.update(dict.fromkeys(cfg.frozen, 0.0))
    return factors or None


@checked
def recipe(cfg: Config, steps=None):
    """How ``cfg``'s head trains: plain SGD at ``cfg.lr`` with ``lr_multipliers(cfg)``, for
    ``steps`` (default ``cfg.steps``). A factor 0 leaves a frozen matrix exactly where it is."""
    return Recipe(cfg.steps if steps is None else steps, lr=cfg.lr, lr_multipliers=lr_multipliers(cfg))


@dataclass
class Run:
    _made_by = "what run or run_seeds returns"   # in the message where one was expected (_types.words)
    cfg: Config
    seed: int
    model: AttentionHead
    task: tasks.SourcesTask
    train: tuple
    probe: tuple
    history: History
    loop: dict
    bought: dict = None        # {group: (steps,)} first-order loss decrease bought by each group per step
    value_rate_final: np.ndarray = None   # the precision rate: values' change between probe snapshots / their final size
    snapshots: dict = None     # {logged step: {name: tensor}} the parameters at every probe snapshot

    @property
    def precision_rate(self):
        """(n_logged - 1,) the values' change per snapshot interval / their final size
        (``diagnostics.change_vs_final``), one per interval ending at ``history.steps[1:]``."""
        return self.value_rate_final

    @property
    def frame_rate(self):
        """(n_logged - 1,) the mean total-variation distance between the attention rows of
        consecutive probe snapshots (``diagnostics.frame_change``)."""
        return self.history["frame_rate"][1:]


def _params(model):
    return {name: p.detach().clone() for name, p in model.params().items()}


def content_margin(params, means):
    """How well the content map M = W_O W_V tells the sources apart on its own, with no routing:
    the logit of source z's own class for the input mu_z, minus the mean of the other classes' logits,
    averaged over z (0 at init scale, larger as content is learned). It reads the product, so it
    counts what W_O learns when W_V is frozen (what |W_V mu_z| misses)."""
    if not hasattr(params, "keys") or not {"W_V", "W_O"} <= set(params.keys()):
        _validate.fail("params", "a mapping with the head's matrices W_V and W_O", params)
    means = _validate.tensor("means", means, 2, floating=True)
    M = _content_product(params).to(means.device)
    _validate.shape("means", means, M.shape, "(n_classes, d_x) of W_O W_V, the")
    logits = means.double() @ M.T                          # (K, K): row z, the logits for input mu_z
    K = logits.shape[0]
    return float((logits.diagonal() - (logits.sum(1) - logits.diagonal()) / (K - 1)).mean())


@checked
def probe_metrics(model: AttentionHead, task: tasks.SourcesTask | tasks.CuedSourcesTask, probe):
    """The chapter's measurements of a head on the probe sequences, plus the snapshot (alpha, v)
    that the change rates compare."""
    try:
        xp, yp, sp = probe
    except (TypeError, ValueError):
        _validate.fail("probe", "the run's probe data (x, y, is_signal), e.g. run_.probe", probe)
    params = _params(model)
    fw = attention.forward(xp, params)
    g = attention.gradients(xp, yp, params)
    alpha, v = fw["alpha"], fw["v"]
    logits = fw["logits"]
    metrics = {
        "probe_loss": torch.nn.functional.cross_entropy(logits.reshape(-1, task.n_sources), yp.reshape(-1)).item(),
        "kl_bits": task.kl_bits(logits, xp),
        "attn_entropy": diagnostics.attention_entropy(alpha).mean().item(),
        "signal_mass": diagnostics.attention_mass(alpha, sp)[:, 1:].mean().item(),
        "compat_cos": diagnostics.attended_compatibility(alpha, g["u"], v).mean().item(),
        "compat_raw": (alpha * g["b"]).sum(-1).sum().item(),  # sum_i u_i . g_i  (see chapter 4)
        "value_pc_share": float(diagnostics.pca(v.reshape(-1, v.shape[-1]), 1)["explained"][:task.n_sources - 1].sum()),
        # the size of the content pathway (|W_V mu_z|, mean over sources) and of the routing one
        "proto_norm": (params["W_V"].double() @ task.means.to(params["W_V"].device).T).norm(dim=0).mean().item(),
        "content_margin": content_margin(params, task.means),
        "routing_norm": (params["W_Q"].T @ params["W_K"]).norm().item(),
    }
    return metrics, (alpha, v)


TRACKED = 64  # sequences whose pairs and queries the loop follows one by one over time


def _loop_record(task, batch, p0, p1):
    """What the laws predict at the state p0 against what the step to p1 did, on the batch."""
    x, y, sig = batch
    fw0, fw1 = attention.forward(x, p0), attention.forward(x, p1)
    g0 = attention.gradients(x, y, p0)
    a0, a1 = fw0["alpha"], fw1["alpha"]
    T = x.shape[-2]
    pairs = attention.movable_pairs(T).expand_as(a0)
    predicted = diagnostics.predicted_attention_change(a0, g0["advantage"])
    moved = diagnostics.movement_toward(fw1["v"] - fw0["v"], g0["u"])
    visible = attention.causal_mask(T).expand_as(a0)
    pull = diagnostics.value_pull(a0, g0["u"])
    cos, cos_full = [], []
    for z in range(task.n_sources):
        mu = task.means[z].to(p0["W_V"])
        step = (p1["W_V"] - p0["W_V"]) @ mu
        target = pull[sig & (y == z)].sum(0)
        # a W_V step moves W_V mu by -lr dL/dW_V mu = lr sum_j (x_j . mu) pull_j, over every position
        full = ((x @ mu)[..., None] * pull).sum((0, 1))
        cos.append(torch.nn.functional.cosine_similarity(step, target, dim=0).item())
        cos_full.append(torch.nn.functional.cosine_similarity(step, full, dim=0).item())
    flow = diagnostics.advantage_flow(a0, g0["advantage"], sig)
    dmass = diagnostics.attention_mass(a1, sig) - diagnostics.attention_mass(a0, sig)
    predicted_dmass = (predicted * sig[:, None, :].to(predicted.dtype)).sum(-1)  # the pair prediction, summed over signal keys
    n_signal = (visible & sig[:, None, :]).sum(-1)
    mixed = (n_signal > 0) & (n_signal < visible.sum(-1))  # queries whose signal mass can move
    return {
        "attn_pair_corr": diagnostics.pearson(predicted[pairs], (a1 - a0)[pairs]),
        # times the number of positions N: the loss is a mean, so u (hence A) carries a 1/N
        "flow": flow[:, 1:].mean().item() * y.numel(),
        "dmass": dmass[:, 1:].mean().item(),
        "group_corr": diagnostics.pearson(flow[mixed], dmass[mixed]),
        # per sequence: the mean over its queries (each sequence is one group of signal keys)
        "seq_corr": diagnostics.pearson(flow[:, 1:].mean(1), dmass[:, 1:].mean(1)),
        # the same quantities for the first TRACKED sequences, kept per pair / query, so that a
        # correlation over time can be taken for every pair and query (``loop_correlations``)
        "ts_pair_pred": predicted[:TRACKED][pairs[:TRACKED]].cpu().numpy().astype(np.float64),
        "ts_pair_real": (a1 - a0)[:TRACKED][pairs[:TRACKED]].cpu().numpy().astype(np.float64),
        "ts_query_flow": flow[:TRACKED][mixed[:TRACKED]].cpu().numpy().astype(np.float64),
        "ts_query_dmass": dmass[:TRACKED][mixed[:TRACKED]].cpu().numpy().astype(np.float64),
        "group_pred_corr": diagnostics.pearson(predicted_dmass[mixed], dmass[mixed]),
        "value_pair_corr": diagnostics.pearson(a0[visible], moved[visible]),
        "prototype_cos": float(np.mean(cos)),
        "prototype_cos_full": float(np.mean(cos_full)),
    }


@contextlib.contextmanager
def _one_thread():
    """Run tiny-tensor code on one CPU thread: with a few thousand 8-wide vectors, thread start-up
    costs more than it saves, and on a shared 2-core machine two threads can be several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@checked
def run(cfg: Config = Config(), seed: Seed = 0, loop_every: Whole(0) = 0, loop_until: Whole(0) = 300, progress=False,
        device="cpu"):
    """Train one head on the toy task and measure it (see the module docstring).

    ``device`` defaults to the CPU: at these sizes (a few thousand positions, an 8-wide head) a GPU
    only adds overhead; "cuda" (or None: the GPU when there is one) runs everything there."""
    if cfg.steps % cfg.log_every:
        _validate.fail("cfg.steps", f"a multiple of cfg.log_every={cfg.log_every}", cfg.steps)
    if loop_every and min(loop_until, cfg.steps - 1) <= 0:   # the loop measures steps t < min(loop_until, cfg.steps - 1)
        _validate.fail("loop_until", f"an int >= 1 with cfg.steps >= 2, so that loop_every={loop_every} measures a step",
                       f"loop_until={loop_until} and cfg.steps={cfg.steps}", described=True)
    with _one_thread():
        return _run(cfg, seed, loop_every, loop_until, progress, pick_device(device))


def _on(device, data):
    """The tensors of a (x, y, is_signal) triple on ``device``."""
    return tuple(t.to(device) for t in data)


def _run(cfg, seed, loop_every, loop_until, progress, device):
    task, cpu_train, cpu_probe = make_data(cfg, seed)
    train_data, probe = _on(device, cpu_train), _on(device, cpu_probe)
    model = make_model(cfg, seed).to(device)
    x, y, _ = train_data
    prev = {}  # the last snapshot, for the change rates
    loop_at = set(range(0, min(loop_until, cfg.steps - 1), loop_every)) if loop_every else set()
    states, loop = {}, {}

    values = []  # the probe's values at every snapshot, for the rate relative to their final size
    snapshots = {}  # the parameters at every snapshot (a few hundred numbers each)

    @unchecked()   # the run's own measurements, on data made and checked here: not checked again each time
    def measure(step):
        metrics, snap = probe_metrics(model, task, probe)
        if prev:
            metrics["frame_rate"] = diagnostics.frame_change(prev["alpha"], snap[0])  # TV per interval
            # relative to the current size: kept for comparison with earlier versions of chapter 5
            metrics["attn_change"] = diagnostics.relative_change(prev["alpha"], snap[0])
            metrics["value_change"] = diagnostics.relative_change(prev["v"], snap[1])
        prev.update(alpha=snap[0], v=snap[1])
        values.append(snap[1].double())
        snapshots[step] = {name: p.detach().cpu().clone() for name, p in model.params().items()}
        return metrics

    # plain gradient descent: a step lowers the loss by sum_g lr_g |grad_g L|^2 to first order
    lrs = rates(cfg.lr, lr_multipliers(cfg))
    bought = {group: [] for group in GROUPS}

    @unchecked()
    def on_step(m, step):
        """Everything the chapters measure at step t, on the weights before the step's update (the
        gradients are in .grad): the loss each group buys, the loop's states, the probe metrics."""
        for group, names in GROUPS.items():
            bought[group].append(sum(lrs[n] * getattr(m, n).grad.pow(2).sum().item() for n in names))
        if step in loop_at or step - 1 in loop_at:
            states[step] = _params(m)
        if step - 1 in loop_at:  # the state after step - 1 is known now
            for key, value in _loop_record(task, train_data, states.pop(step - 1), states[step]).items():
                loop.setdefault(key, []).append(value)
            loop.setdefault("step", []).append(step - 1)
            if step not in loop_at:
                states.pop(step)
        return measure(step) if step % cfg.log_every == 0 else None

    def loss_fn(m, step):  # only the loss (its backward is the closed form): the measurements are on_step's
        return attention.closed_form_loss(x, y, m.params(), check=False)

    history = train(model, loss_fn, recipe(cfg), seed=seed, log_every=cfg.log_every, progress=progress,
                    desc=f"seed {seed}", device=device, on_step=on_step)
    with torch.no_grad():  # the state after the last step
        history.append(cfg.steps, loss=attention.loss(x, y, model.params()).item(), **measure(cfg.steps))
    value_rate_final = diagnostics.change_vs_final(torch.stack(values))
    # the record lives on the CPU, wherever it trained, so the analyses below never mix devices
    return Run(cfg, seed, model.cpu(), task, cpu_train, cpu_probe, history, {k: np.array(v) for k, v in loop.items()},
               bought={g: np.array(b) for g, b in bought.items()}, value_rate_final=value_rate_final,
               snapshots=snapshots)


@checked
def run_seeds(cfg: Config = Config(), seeds: Seeds = (0, 1, 2, 3, 4), workers: Whole(1) | None = None, **kwargs):
    """``run`` for each seed, in the order of ``seeds``. On the CPU the seeds train in ``workers``
    processes at once (default: one per CPU core, at most one per seed); each run is seeded on its
    own and uses one thread, so the results are those of one run after the other."""
    seeds = list(seeds)
    on_cpu = pick_device(kwargs.get("device", "cpu")).type == "cpu"
    if workers is None:
        workers = min(len(seeds), usable_cpus()) if on_cpu else 1
    if workers > 1 and not on_cpu:
        _validate.fail("workers", "1 on a GPU (worker processes are for CPU runs)", workers)
    if workers == 1 or len(seeds) < 2:
        return [run(cfg, seed, **kwargs) for seed in seeds]
    pool = _worker_pool(workers)
    try:
        return list(pool.map(functools.partial(run, cfg, **kwargs), seeds))
    except concurrent.futures.process.BrokenProcessPool:
        _POOLS.pop(workers, None)  # a worker died (killed, out of memory): the next call starts a new pool
        raise



def _continue(cfg, seed, params, steps):
    """``continue_training``'s work for one run (module level, so that a worker process can run it)."""
    with _one_thread():
        task, (x, y, _), probe = make_data(cfg, seed)
        model = make_model(cfg, seed)
        model.load_state_dict(params)
        train(model, lambda m, step: attention.closed_form_loss(x, y, m.params(), check=False), recipe(cfg, steps), seed=seed,
              log_every=steps, progress=False, device="cpu")
        with torch.no_grad():
            metrics, _ = probe_metrics(model, task, probe)
            loss = attention.loss(x, y, model.params()).item()
    return {"steps": cfg.steps + steps, "loss": loss, **metrics, "model": model}


@checked
def continue_training(runs: Sequence[Run], steps: Whole(1), workers: Whole(1) | None = None):
    """Train each run of ``runs`` for ``steps`` more steps of its own schedule, from its final weights,
    and measure the head again: one dict per run with ``steps`` (the total), the training ``loss``, the
    probe measurements of ``probe_metrics`` (``kl_bits``, ``attn_entropy``, ``signal_mass``, ...) and
    the ``model``. The runs are not changed.

    Full-batch gradient descent at constant rates keeps no optimizer state, so this is the end of the
    longer run, ``run(replace(cfg, steps=cfg.steps + steps))``, at a fraction of the cost (no probe
    measurements on the way). Workers as in ``run_seeds``."""
    runs = _check_runs(runs)
    jobs = [(r.cfg, r.seed, {n: p.detach().cpu().clone() for n, p in r.model.state_dict().items()}) for r in runs]
    if workers is None:
        workers = min(len(jobs), usable_cpus())
    if workers == 1 or len(jobs) < 2:
        return [_continue(*job, steps) for job in jobs]
    pool = _worker_pool(workers)
    try:
        return list(pool.map(_continue, *zip(*jobs), [steps] * len(jobs)))
    except concurrent.futures.process.BrokenProcessPool:
        _POOLS.pop(workers, None)
        raise


_POOLS = {}


def _worker_pool(workers):
    """A pool of ``workers`` processes kept for the session: starting one costs seconds (each worker
    imports torch), as much as a short run. Spawned, not forked: a forked torch or Jupyter kernel
    can deadlock."""
    if workers not in _POOLS:
        if not _POOLS:
            atexit.register(_close_pools)
        _POOLS[workers] = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"))
    return _POOLS[workers]


def _close_pools():
    """End the workers before the interpreter tears its modules down (a pool collected later warns)."""
    while _POOLS:
        _POOLS.popitem()[1].shutdown(wait=True, cancel_futures=True)


@checked
def curves(runs: Distinct("runs", "a run (one cfg and seed)", "run", key=lambda r: (r.cfg, r.seed)), key: str):
    """(steps, values): values is (n_runs, n_logged) for one metric of several runs."""
    runs = _check_runs(runs)
    steps = runs[0].history.steps
    for i, r in enumerate(runs[1:], 1):   # one x axis for every run's curve
        if not np.array_equal(r.history.steps, steps):
            _validate.fail(f"runs[{i}]", f"runs logged at the same steps as runs[0] ({len(steps)} steps up to "
                           f"{int(steps[-1])})", f"{len(r.history.steps)} steps up to {int(r.history.steps[-1])}",
                           described=True)
    return steps, np.stack([r.history[key] for r in runs])


@checked
def reference_entropies(run_: Run):
    """Mean attention entropy (nats) of uniform causal attention, and of ideal routing (uniform over
    the visible signal positions, or over all visible ones where none is a signal yet), on the probe."""
    _, _, sp = run_.probe
    T = sp.shape[1]
    visible = attention.causal_mask(T).expand(sp.shape[0], T, T)
    uniform = visible.double() / visible.sum(-1, keepdim=True)
    ideal = (visible & sp[:, None, :]).double()
    ideal = torch.where(ideal.sum(-1, keepdim=True) > 0, ideal, visible.double())
    ideal = ideal / ideal.sum(-1, keepdim=True)
    return (diagnostics.attention_entropy(uniform).mean().item(), diagnostics.attention_entropy(ideal).mean().item())


# ----------------------------------------------------------------------------- summaries

@checked
def loop_window(runs: Sequence[Run], key: str, start: Whole(0), stop):
    """One number per run: the mean of a loop measurement over the recorded steps in [start, stop)."""
    start, stop = _start_stop(start, stop)
    out = []
    for r in _check_runs(runs):
        if not r.loop:
            _validate.fail("runs", "runs with loop measurements (pass loop_every > 0 to run)",
                           f"the run with seed {r.seed}, which has none", described=True)
        if key not in r.loop or key == "step":
            _validate.fail("key", f"one of {sorted(k for k in r.loop if k != 'step')}", key)
        steps = r.loop["step"]
        inside = (steps >= start) & (steps < stop)
        if not inside.any():   # the mean of nothing would be nan
            _validate.fail("start, stop", f"a window holding recorded loop steps (the run has them from {int(steps.min())} "
                           f"to {int(steps.max())})", f"[{start}, {stop})", described=True)
        out.append(float(np.mean(r.loop[key][inside])))
    return np.array(out)


def _start_stop(start, stop):
    """[start, stop): two steps with start < stop (start >= 0 is declared by the callers)."""
    return start, _validate.integer("stop", stop, start + 1)


def _time_corr(a, b):
    """Pearson over time (axis 0) for every column of two (steps, n) arrays; columns that do not
    move are left out. Returns the (n_kept,) correlations."""
    a, b = a - a.mean(0), b - b.mean(0)
    den = np.sqrt((a * a).sum(0) * (b * b).sum(0))
    keep = den > 1e-30
    return (a * b).sum(0)[keep] / den[keep]


@checked
def loop_correlations(run_: Run, start: Whole(0) = 0, stop=100):
    """The loop's prediction-vs-realisation correlations of one run over the loop steps in
    [start, stop), each statistic for pairs and for groups of keys:

    pair_cross, group_cross, seq_cross   cross-sectional (at each step, across pairs / across
                    queries / across sequences), then the mean over steps
    pair_time, query_time   over time, for each pair / query of the first ``TRACKED`` sequences
                    (whose signal mass can move), then the mean over pairs / queries
    mean_time       over time, of the two means over all queries (flow and change of signal mass):
                    one group made of every signal key, which is what a shared W_K acts on
    """
    L, (start, stop) = run_.loop, _start_stop(start, stop)
    if "ts_pair_pred" not in L:
        _validate.fail("run_", "a run with loop measurements (pass loop_every > 0 to run)",
                       f"the run with seed {run_.seed}, which has none", described=True)
    k = (L["step"] >= start) & (L["step"] < stop)
    if k.sum() < 3:
        _validate.fail("start, stop", f"at least 3 loop steps in [{start}, {stop})", int(k.sum()))

    def mean(key):
        v = L[key][k]
        return float(np.nanmean(v)) if np.isfinite(v).any() else math.nan

    pair, query = _time_corr(L["ts_pair_pred"][k], L["ts_pair_real"][k]), _time_corr(L["ts_query_flow"][k], L["ts_query_dmass"][k])
    return {"pair_cross": mean("attn_pair_corr"), "group_cross": mean("group_corr"), "seq_cross": mean("seq_corr"),
            "pair_time": float(pair.mean()) if len(pair) else math.nan,
            "query_time": float(query.mean()) if len(query) else math.nan,
            "mean_time": diagnostics.pearson(L["flow"][k], L["dmass"][k])
            if np.ptp(L["dmass"][k]) > 0 and np.ptp(L["flow"][k]) > 0 else math.nan}


@checked
def loop_size(run_: Run, start: Whole(0) = 0, stop=100):
    """Does the advantage flow predict the *size* of the aggregate change, or only its timing? From
    the loop measurements of one run (the means over all queries, ``flow`` and ``dmass``):

    flow_vs_peak    the mean flow over the loop steps in [start, stop), over its peak over the record
    dmass_vs_peak   the same for the realised change of attention mass on the signal positions
    gain_vs_peak    the mean of dmass / flow over the window, over dmass / flow at the step where the
                    flow peaks: 1 if the change of mass kept a fixed proportion to the flow

    A correlation over time ignores the scale of either curve; these ratios are what it leaves out."""
    L, (start, stop) = run_.loop, _start_stop(start, stop)
    if "flow" not in L:
        _validate.fail("run_", "a run with loop measurements (pass loop_every > 0 to run)",
                       f"the run with seed {run_.seed}, which has none", described=True)
    k = (L["step"] >= start) & (L["step"] < stop)
    if not k.any():
        _validate.fail("start, stop", f"at least one loop step in [{start}, {stop})", "none", described=True)
    flow, dmass = np.asarray(L["flow"], float), np.asarray(L["dmass"], float)
    top = int(np.argmax(flow))
    if flow[top] <= 0 or dmass.max() <= 0:
        _validate.fail("run_", "a flow and a change of mass that rise above 0 somewhere in the loop record",
                       f"the run with seed {run_.seed}, whose peaks are {flow[top]:.3g} and {dmass.max():.3g}",
                       described=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = dmass[k] / flow[k]
    gain = gain[np.isfinite(gain) & (flow[k] > 0)]
    return {"flow_vs_peak": float(flow[k].mean() / flow[top]),
            "dmass_vs_peak": float(dmass[k].mean() / dmass.max()),
            "gain_vs_peak": float(gain.mean() / (dmass[top] / flow[top])) if len(gain) else math.nan}


@checked
def manifold(run_: Run, model: AttentionHead | None = None):
    """The value cloud of the probe sequences: PCA (top K-1 components), the single-observation
    posterior entropy of every position, and their link (Spearman of the distance from the cloud's
    centre in the PC plane with that entropy). ``model`` defaults to the trained head."""
    model = model or run_.model
    xp = run_.probe[0]
    if model.W_Q.shape[1] != xp.shape[-1] or model.W_V.shape[0] != run_.cfg.d_v:   # another run's head
        _validate.fail("model", f"a head of this run's sizes (d_x={xp.shape[-1]}, d_v={run_.cfg.d_v}; run_.model)",
                       f"a head with W_Q {tuple(model.W_Q.shape)} and W_V {tuple(model.W_V.shape)}", described=True)
    v = model.internals(xp)["v"].reshape(-1, run_.cfg.d_v)
    k = run_.task.n_sources - 1
    p = diagnostics.pca(v, k)
    entropy = diagnostics.entropy(run_.task.observation_posterior(xp)).reshape(-1).numpy()
    radius = np.linalg.norm(p["projected"], axis=1)
    return {"projected": p["projected"], "share": float(p["explained"][:k].sum()), "entropy": entropy,
            "radius": radius, "spearman": diagnostics.spearman(radius, entropy)}


def _suffix(fraction, fractions):
    return "" if fraction == fractions[0] else f"_{round(100 * fraction)}"


@checked
def timescales(run_: Run, fractions: Sequence = diagnostics.SETTLE_FRACTIONS, window=diagnostics.SETTLE_WINDOW,
               fraction: Real(0, 1, low_open=True) = 0.9):
    """The two-timescale summary of one run (chapter 5), with the course's one settle measure.

    The **frame rate** is the mean total-variation distance between the attention rows of
    consecutive probe snapshots (``diagnostics.frame_change``), the **precision rate** the values'
    change per snapshot interval relative to their final size (``diagnostics.change_vs_final``);
    ``diagnostics.settle`` compares each with its own peak (smoothed over ``window`` intervals).

    frame, values           the two ``diagnostics.settle`` results (peak, settled {fraction: step})
    peak_frame, peak_values the step at which each smoothed rate peaks
    t_frame, t_values       the step from which the rate stays below ``fractions[0]`` of its peak
                            (None: "not settled by step ``last_step``"); ``t_frame_10``,
                            ``t_values_10`` the same at the second fraction (10% by default)
    order, order_10         "values first", "frame first", "together" or what is not settled
    t90_loss, t90_kl, t90_entropy   the step by which the training loss, the KL to the posterior and
                            the attention entropy have covered ``fraction`` of their total change
    loss_after, kl_after    the share of the total decrease of the training loss still to come after
                            t_frame, and the decrease of the KL (bits) after it (negative: it rose);
                            nan where the frame has not settled (not testable at this length)
    attribution_after       {group: share of the total loss decrease bought by that group at the
                            steps from t_frame on} (first order, ``normalisation_check``); None where
                            the frame has not settled. ``loss_after_10`` etc. at the second fraction.
    """
    h, steps = run_.history, run_.history.steps
    if not fractions:
        _validate.fail("fractions", "one or more fractions of the peak, e.g. (0.2, 0.1)", fractions)
    last = int(steps[-1])
    frame = diagnostics.settle(steps[1:], run_.frame_rate, fractions, window)
    values = diagnostics.settle(steps[1:], run_.precision_rate, fractions, window)
    out = {"frame": frame, "values": values, "peak_frame": frame["peak_step"], "peak_values": values["peak_step"],
           "last_step": last, "fractions": tuple(fractions),
           "t90_loss": diagnostics.progress_step(steps, h["loss"], fraction),
           "t90_kl": diagnostics.progress_step(steps, h["kl_bits"], fraction),
           "t90_entropy": diagnostics.progress_step(steps, h["attn_entropy"], fraction)}
    loss, kl = h["loss"], h["kl_bits"]
    drop = loss[0] - loss[-1]
    for f in fractions:
        x = _suffix(f, fractions)
        tf, tv = frame["settled"][f], values["settled"][f]
        out["t_frame" + x], out["t_values" + x] = tf, tv
        out["order" + x] = diagnostics.settle_order(frame, values, f)
        if tf is None:
            out["loss_after" + x] = out["kl_after" + x] = math.nan
            out["attribution_after" + x] = None
        else:
            k = int(np.searchsorted(steps, tf))
            out["loss_after" + x] = float((loss[k] - loss[-1]) / drop)
            out["kl_after" + x] = float(kl[k] - kl[-1])
            out["attribution_after" + x] = {g: float(b[tf:].sum() / drop) for g, b in run_.bought.items()}
    return out


@checked
def normalisation_check(run_: Run, early: Whole(1) = 100):
    """The first-order attribution of the loss decrease to the parameter groups (chapter 5).

    peak_value_final        the step at which the precision rate (the values' change against their
                            *final* size, which a small start cannot inflate) is largest, unsmoothed
    routing, values, readout  the share of the total loss decrease bought by each parameter group,
                            sum_t lr_g |grad_g L(t)|^2 (first order; exact for small steps)
    routing_early, values_early, readout_early  the same over the first ``early`` steps only
    first_order             the sum of the three shares (near 1 when the first-order account holds)
    """
    steps, loss = run_.history.steps, run_.history["loss"]
    if early > steps[-1]:   # the early window would be the whole run
        _validate.fail("early", f"an int <= the run's {int(steps[-1])} steps", early)
    out = {"peak_value_final": int(steps[1:][np.argmax(run_.precision_rate)])}
    drop = loss[0] - loss[-1]
    for group, bought in run_.bought.items():
        out[group] = float(bought.sum() / drop)
        out[f"{group}_early"] = float(bought[:early].sum() / drop)
    out["first_order"] = out["routing"] + out["values"] + out["readout"]
    return out


# ----------------------------------------------------------------------------- chapter 5: the EM reading as a mechanism

def _content_product(params):
    """M = W_O W_V, (n_classes, d_x): the head's logits are M g_i with g_i = sum_j alpha_ij x_j."""
    return params["W_O"].double() @ params["W_V"].double()


def _attended_inputs(x, params):
    """g_i = sum_j alpha_ij x_j (float64) for the head's routing in ``params``."""
    alpha = attention.forward(x.double(), {n: p.double() for n, p in params.items()})["alpha"]
    return alpha @ x.double()


@checked
def content_gap(run_: Run, steps=None, iters: Whole(1) = 100):
    """The EM reading's prediction, measured: is the head's content (W_O W_V) the best content for
    the routing it has at that step, as an M-step for the current E-step would be?

    With W_Q, W_K fixed at their values at step t, the logits are M g_i with g_i = sum_j alpha_ij x_j
    and M = W_O W_V, so the training loss is convex in M (a multinomial logistic regression) and its
    minimum L_best(t) can be found exactly (``_best_readout``, started from the head's own M, so
    L_best <= L_trained always). On the run's training set, at each step of ``steps`` (default: all
    snapshots), returns a dict of arrays:

    steps, loss     the steps and the trained head's loss L_trained(t) there
    best            L_best(t): the best content for the routing at t
    gap             the content gap L_trained(t) - L_best(t) >= 0 (0: the content is an exact M-step)
    remaining       L_trained(t) - L_trained(end): the decrease still to come
    share           gap / remaining: how much of what is still to come a full M-step would buy at
                    once (nan where nothing remains)
    """
    steps = sorted(run_.snapshots) if steps is None else _validate.step_list("steps", steps)
    missing = [t for t in steps if t not in run_.snapshots]
    if missing:
        _validate.fail("steps", f"snapshot steps of the run (multiples of log_every up to {run_.cfg.steps})",
                       missing[:3])
    x, y, _ = run_.train
    final = run_.snapshots[max(run_.snapshots)]
    with _one_thread(), torch.no_grad():
        end = _loss_of(x, y, final)
    out = {k: [] for k in ("steps", "loss", "best", "gap", "remaining", "share")}
    with _one_thread():
        for t in steps:
            p = run_.snapshots[t]
            with torch.no_grad():
                g = _attended_inputs(x, p)
                trained = _loss_of(x, y, p)
            _, best = _best_readout(g, y, run_.task.n_sources, iters=iters, init=_content_product(p))
            best = min(best, trained)  # L-BFGS never ends above its start; guards the last rounding digit
            out["steps"].append(t)
            out["loss"].append(trained)
            out["best"].append(best)
            out["gap"].append(trained - best)
            out["remaining"].append(trained - end)
            out["share"].append((trained - best) / (trained - end) if trained - end > 1e-12 else math.nan)
    return {k: np.array(v) for k, v in out.items()}


def _loss_of(x, y, params):
    """The head's training loss in float64 for ``params``."""
    logits = _attended_inputs(x, params) @ _content_product(params).T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


@checked
def routing_gap(run_: Run, steps, iters: Whole(1) = 20, n_seqs: Whole(1) | None = None):
    """The routing-side analogue of ``content_gap``: with W_V, W_O fixed at step t, how much lower
    the training loss gets by optimising W_Q, W_K alone (L-BFGS, ``iters`` iterations from the
    head's own routing). Not convex, so this is a lower bound on the routing gap. ``n_seqs``
    limits it to the first training sequences (the content gap on the same ones is returned too,
    so both are compared on one set). Returns arrays: steps, loss, routing_best, routing_gap,
    content_gap."""
    x, y, _ = run_.train
    steps, iters = _validate.step_list("steps", steps), iters
    missing = [t for t in steps if t not in run_.snapshots]
    if missing:
        _validate.fail("steps", f"snapshot steps of the run ({sorted(run_.snapshots)[:3]}...)", missing[:3])
    if n_seqs is not None:
        x, y = x[:n_seqs], y[:n_seqs]
    out = {k: [] for k in ("steps", "loss", "routing_best", "routing_gap", "content_gap")}
    with _one_thread():
        for t in steps:
            p = {n: w.double() for n, w in run_.snapshots[t].items()}
            with torch.no_grad():
                trained = _loss_of(x, y, p)
                g = _attended_inputs(x, p)
            _, best_content = _best_readout(g, y, run_.task.n_sources, init=_content_product(p))
            WQ, WK = p["W_Q"].clone().requires_grad_(True), p["W_K"].clone().requires_grad_(True)
            opt = torch.optim.LBFGS([WQ, WK], max_iter=iters, line_search_fn="strong_wolfe",
                                    tolerance_grad=1e-9, tolerance_change=1e-12)

            def closure():
                opt.zero_grad()
                loss = attention.loss(x.double(), y, dict(p, W_Q=WQ, W_K=WK))
                loss.backward()
                return loss

            opt.step(closure)
            with torch.no_grad():
                best = min(attention.loss(x.double(), y, dict(p, W_Q=WQ, W_K=WK)).item(), trained)
            out["steps"].append(t)
            out["loss"].append(trained)
            out["routing_best"].append(best)
            out["routing_gap"].append(trained - best)
            out["content_gap"].append(trained - min(best_content, trained))
    return {k: np.array(v) for k, v in out.items()}


@checked
def compare_with_gmm(run_: Run, n_iter=100, restarts=5, confident: Real(0, 1, high_open=True) = 0.9):
    """Chapter 5's side-by-side: EM for a (K+1)-component Gaussian mixture on the run's pooled
    training observations (no labels, no sequences), against the head trained on those sequences.

    Returns a dict with the fit (``em.GMMFit``), ``order`` (fitted component of each source and, last,
    of the distractor), and on the probe observations: ``p_signal`` (the mixture's probability that an
    observation is not from the distractor), ``received`` / ``received_init`` (attention each
    observation receives relative to uniform, trained / initial head), ``gmm_sources`` (the mixture's
    responsibilities over the K sources, renormalised), ``head_sources`` (softmax(W_O v_j), what a
    single value says on its own), ``exact_sources`` (tasks.SourcesTask.observation_posterior), and the summary
    numbers ``spearman_received`` / ``spearman_received_init`` (attention received vs p_signal) and
    ``agree_head_gmm``, ``agree_head_exact``, ``agree_gmm_exact`` (share of equal argmax over the
    observations with p_signal > ``confident``).
    """
    from . import em

    with _one_thread():
        task, K = run_.task, run_.task.n_sources
        x_train = run_.train[0].reshape(-1, task.d_x).double()
        fit = em.fit_best(x_train, K + 1, restarts=restarts, n_iter=n_iter, seed=0)
        order = em.match(fit.means, torch.cat([task.means, task.distractor[None]]))
        xp = run_.probe[0]
        resp, _ = em.e_step(xp.reshape(-1, task.d_x).double(), fit.means, fit.variance, fit.weights)
        resp = resp[:, order]
        p_signal = 1 - resp[:, K]
        gmm_sources = resp[:, :K] / resp[:, :K].sum(1, keepdim=True)
        fw = run_.model.internals(xp)
        head_sources = torch.softmax(fw["v"] @ run_.model.W_O.detach().T, -1).reshape(-1, K).double()
        exact = task.observation_posterior(xp).reshape(-1, K)
        received = diagnostics.attention_received(fw["alpha"]).reshape(-1)
        received_init = diagnostics.attention_received(make_model(run_.cfg, run_.seed).internals(xp)["alpha"]).reshape(-1)
        sure = p_signal > confident

        def agree(a, b):
            return float((a[sure].argmax(1) == b[sure].argmax(1)).double().mean())

        return {"fit": fit, "order": order, "p_signal": p_signal.numpy(), "received": received.numpy(),
                "received_init": received_init.numpy(), "gmm_sources": gmm_sources.numpy(),
                "head_sources": head_sources.numpy(), "exact_sources": exact.numpy(), "confident": sure.numpy(),
                "spearman_received": diagnostics.spearman(received, p_signal),
                "spearman_received_init": diagnostics.spearman(received_init, p_signal),
                "agree_head_gmm": agree(head_sources, gmm_sources), "agree_head_exact": agree(head_sources, exact),
                "agree_gmm_exact": agree(gmm_sources, exact)}


# ----------------------------------------------------------------------------- chapter 4: the score-space kernel, an oracle head, snapshots

@checked
def parameter_snapshots(cfg: Config, seed, at: Distinct("steps", "a step", "snapshot")):
    """Retrain ``seed``'s head exactly as ``run`` does (same data, initial weights, rates and seed,
    hence the same weights) and keep a copy of its parameters at every step in ``at``: the state
    *before* that step's update, ``cfg.steps`` for the final state. Trains only as far as needed.
    Returns {step: {name: tensor}}."""
    if isinstance(at, str) or not hasattr(at, "__iter__"):
        _validate.fail("at", "steps (ints, e.g. [0, 10, 20])", at)
    at = sorted(set(_validate.integer(f"at[{i}]", s, 0) for i, s in enumerate(at)))
    if not at or at[0] < 0 or at[-1] > cfg.steps:
        _validate.fail("at", f"steps in [0, cfg.steps={cfg.steps}]", f"{at[:3]}...{at[-3:]}" if at else "an empty list",
                       described=True)
    with _one_thread():
        _, (x, y, _), _ = make_data(cfg, seed)
        model = make_model(cfg, seed)
        wanted, snaps = set(at), {}

        def on_step(m, step):
            if step in wanted:
                snaps[step] = _params(m)

        steps = min(at[-1] + 1, cfg.steps)  # a snapshot at step t needs steps 0..t-1 done
        train(model, lambda m, step: attention.closed_form_loss(x, y, m.params(), check=False), recipe(cfg, steps), seed=seed,
              log_every=max(steps, 1), progress=False, device="cpu", on_step=on_step)
        if cfg.steps in wanted and steps == cfg.steps:
            snaps[cfg.steps] = _params(model)
    return snaps


@checked
def score_step(x: Float[Tensor, "*B T d_x"], y: Int[Tensor, "*B T"], p0: Mapping[str, Tensor], p1: Mapping[str, Tensor],
               lr: Positive):
    """One step t -> t+1 of the scores on a batch (x, y), against two predictions, over the visible
    pairs with i >= 1 (query 0 has one key, so its score cannot matter):

    agree_gradient   share of pairs where the realised Delta s_ij has the sign of -dL/ds_ij (the
                     step the pair would take if the scores were free parameters)
    agree_kernel     share of pairs where it has the sign of the first-order step -lr K dL/ds, K the
                     score-space kernel of lemma lem-score-kernel over the whole batch; computed as the
                     directional derivative of s along the W_Q, W_K step (K is too big to build)
    corr_gradient    Pearson correlation of -dL/ds_ij with the realised Delta s_ij
    kernel_error     |realised - first order| / |realised| (small: first order describes the step)
    decrease         -(dL/ds) . (first-order Delta s) / lr = grad_s L . K grad_s L, >= 0 (K is PSD)
    """
    # lr: Positive, the rate of the step p0 -> p1 (a training rate)
    attention._check_inputs(x, p0, y, "p0")
    attention._check_inputs(x, p1, y, "p1")
    for name in PARAM_NAMES:  # p1 is p0 after one step: the same matrices, of the same shapes
        _validate.shape(f"p1[{name!r}]", p1[name], p0[name].shape, f"the shape of p0[{name!r}]")
    g = attention.gradients(x, y, p0)
    def scores(W_Q, W_K):  # unmasked: only the movable pairs are read, and -inf - -inf would be nan
        return attention.scores(x @ W_Q.T, x @ W_K.T, causal=False)

    realised = scores(p1["W_Q"], p1["W_K"]) - scores(p0["W_Q"], p0["W_K"])
    _, first_order = torch.func.jvp(scores, (p0["W_Q"], p0["W_K"]), (-lr * g["W_Q"], -lr * g["W_K"]))
    pairs = attention.movable_pairs(x.shape[-2]).expand_as(realised)
    free, real, lin = -g["s"][pairs], realised[pairs], first_order[pairs]
    return {"agree_gradient": (torch.sign(free) == torch.sign(real)).double().mean().item(),
            "agree_kernel": (torch.sign(lin) == torch.sign(real)).double().mean().item(),
            "corr_gradient": diagnostics.pearson(free, real),
            "kernel_error": ((lin - real).norm() / real.norm()).item(),
            "decrease": (free * lin).sum().item() / lr}


@checked
def kernel_offdiagonal(x: Float[Tensor, "B T d_x"], params: Mapping[str, Tensor], n_seqs: Whole(1) = 16):
    """The share of the score-space kernel's mass off its diagonal, sum_{off} |K| / sum |K|, over the
    visible pairs (i >= 1) of each of the first ``n_seqs`` sequences of x, one number per sequence.
    K[i'j', ij] = [(x_i.x_i')(k_j.k_j') + (x_j.x_j')(q_i.q_i')]/d_k (``attention.score_kernel``);
    its diagonal is the part of a pair's step that comes from the pair's own gradient."""
    fw = attention.forward(x[:n_seqs], params)
    pairs = attention.movable_pairs(x.shape[-2])
    shares = []
    for b in range(min(n_seqs, x.shape[0])):
        K = attention.score_kernel(x[b].double(), fw["q"][b].double(), fw["k"][b].double())
        K = K[pairs][:, pairs].abs()   # (pairs, pairs): rows i'j', columns ij
        shares.append(1.0 - (torch.diagonal(K).sum() / K.sum()).item())
    return np.array(shares)


@checked
def score_kernel_record(cfg: Config, seed, every: Whole(1) = 10, until: Whole(1) = 300, kernel_at=(0, 100, 300),
                        n_seqs=16, keep=()):
    """Chapter 4's kernel measurements for one seed: ``score_step`` on the training batch at steps
    0, every, ... < until, and ``kernel_offdiagonal`` (mean over ``n_seqs`` sequences) at the steps
    ``kernel_at``. Returns {"step": ..., each key of score_step: (n,) arrays, "offdiag": {step: share},
    "snapshots": {step: params} for the steps in ``keep`` (from the same training run)}."""
    kernel_at, keep = _validate.step_list("kernel_at", kernel_at), list(keep) and _validate.step_list("keep", keep)
    for what, steps in (("kernel_at", kernel_at), ("keep", keep)):   # named here, not as parameter_snapshots' at
        if steps and steps[-1] > cfg.steps:
            _validate.fail(what, f"steps in [0, cfg.steps={cfg.steps}]", steps[-1])
    loop = list(range(0, min(until, cfg.steps), every))
    snaps = parameter_snapshots(cfg, seed, set(loop) | {t + 1 for t in loop} | set(kernel_at) | set(keep))
    _, (x, y, _), _ = make_data(cfg, seed)
    with _one_thread(), torch.no_grad():
        rows = [score_step(x, y, snaps[t], snaps[t + 1], cfg.lr) for t in loop]
        out = {key: np.array([r[key] for r in rows]) for key in rows[0]}
        out["step"] = np.array(loop)
        out["offdiag"] = {t: float(kernel_offdiagonal(x, snaps[t], n_seqs).mean()) for t in kernel_at}
    out["snapshots"] = {t: snaps[t] for t in keep}
    return out


def _best_readout(g, y, n_classes, iters=100, init=None):
    """argmin_M of the mean cross-entropy of logits g M^T: a convex problem (logistic regression),
    solved by L-BFGS from ``init`` (default zeros). This is the best W_O W_V for fixed attention
    weights."""
    M = (torch.zeros(n_classes, g.shape[-1], dtype=torch.float64) if init is None
         else init.detach().double().clone()).requires_grad_(True)
    opt = torch.optim.LBFGS([M], max_iter=iters, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)
    g, y = g.reshape(-1, g.shape[-1]), y.reshape(-1)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(g @ M.T, y)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return M.detach(), torch.nn.functional.cross_entropy(g @ M.T, y).item()


@checked
def oracle_heads(cfg, seed, temperatures: Distinct("temperatures", "a temperature", "candidate") = (0.25, 0.5, 1.0, 2.0)):
    """Two averaging heads with oracle attention and the best linear readout, on ``seed``'s data:
    the output is g_i = sum_j alpha_ij x_j, the logits M g_i with M = argmin of the training loss
    (the best W_O W_V for these weights; ``_best_readout``). KL to the Bayes posterior on the probe.

    "signal"   alpha_ij uniform over the visible signal positions (the true labels; uniform over
               all visible positions where none is a signal yet): ideal routing
    "content"  alpha_ij = softmax_j(c * log-odds that x_j is a signal), the exact odds from the
               task's densities, c the temperature of ``temperatures`` with the lowest training loss

    Returns {name: {"kl": bits, "kl_by_position": (T,) bits, "temperature": c or None}}.
    """
    if isinstance(temperatures, (str, bytes)) or not hasattr(temperatures, "__iter__"):
        _validate.fail("temperatures", "a non-empty list of positive numbers", temperatures)
    temperatures = ([_validate.positive(f"temperatures[{i}]", c) for i, c in enumerate(temperatures)]
                    or _validate.fail("temperatures", "at least one temperature", "none", described=True))
    task, (x, y, sig), (xp, yp, sp_) = make_data(cfg, seed)
    T = cfg.seq_len
    causal = attention.causal_mask(T)

    def signal_weights(s):
        w = (causal & s[:, None, :]).double()
        w = torch.where(w.sum(-1, keepdim=True) > 0, w, causal.double().expand_as(w))
        return w / w.sum(-1, keepdim=True)

    def content_weights(xs, c):
        scores = (c * task.signal_log_odds(xs))[:, None, :].expand(-1, T, T)
        return torch.softmax(scores.masked_fill(~causal, -math.inf), -1)

    def evaluate(w_train, w_probe):
        M, train_loss = _best_readout(w_train @ x.double(), y, task.n_sources)
        logits = (w_probe @ xp.double()) @ M.T
        return train_loss, {"kl": task.kl_bits(logits, xp), "kl_by_position": task.kl_bits_by_position(logits, xp).numpy()}

    with _one_thread():
        _, signal = evaluate(signal_weights(sig), signal_weights(sp_))
        signal["temperature"] = None
        fits = {c: evaluate(content_weights(x, c), content_weights(xp, c)) for c in temperatures}
        best = min(fits, key=lambda c: fits[c][0])  # chosen on the training loss, not on the probe
        content = dict(fits[best][1], temperature=best)
    return {"signal": signal, "content": content}
