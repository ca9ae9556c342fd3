"""The one training loop every chapter uses.

The pieces, top to bottom:

- ``pick_device``     cuda when there is one, else cpu; asking for cuda without one is an error
- ``seed_everything`` python, numpy and torch RNGs from one seed, so a chapter reruns identically
- ``param_groups``    per-parameter learning rates by name pattern, e.g. the paper's EM-like
                      schedule (values learn 10x faster than routing): ``{"W_V": 10.0}``
- ``History``         one row of floats per logged step; ``history["loss"]`` is a numpy array
- ``lr_factor``       the learning-rate schedule: "constant" (chapters 1-6) or "cosine", each
                      with an optional linear warm-up; the factor multiplies every group's rate
- ``Recipe``          how to train (steps, optimizer, rates, schedule, clipping, weight decay):
                      one object that the checkpoint records and a resume must match
- ``train``           ``train(model, loss_fn, recipe)``: plain gradient descent (or Adam, AdamW)
                      on ``loss_fn(model, step)``, with a divergence guard, a tqdm bar and
                      resumable checkpoints

A run that is interrupted and resumed from its checkpoint gives exactly the same history and
weights as one that never stopped: the checkpoint carries the RNG states too, so ``loss_fn``
may sample its data from the global RNGs, and the recipe, so a resume with another recipe is
refused instead of silently mixing two.
"""

import fnmatch
import math
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from . import _validate, checkpoints
from ._types import Distinct, Flag, OneOf, Positive, Real, Whole, checked, declared_fields

# What each matrix of a head does: queries and keys decide where it looks (routing), W_V what it
# reads (values), W_O how that reaches the output (readout). The EM-like schedule speeds up "values".
GROUPS = {"routing": ("W_Q", "W_K"), "values": ("W_V",), "readout": ("W_O",)}


# ----------------------------------------------------------------------------- devices, seeds

def pick_device(device=None):
    """None -> cuda if available else cpu; a string or torch.device is honoured."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return _validate.device("device", device)


CPU_MAX = "/sys/fs/cgroup/cpu.max"   # a cgroup v2 CPU quota: "<quota> <period>" in microseconds, or "max ..."


def usable_cpus():
    """The cores this process may use: those it may run on, fewer under a CPU quota (cgroup v2
    ``cpu.max``, as in a container limited to 2 CPUs on a larger machine, where ``os.cpu_count()``
    counts the machine's). One worker process per usable core, never more: more would wait on each other."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open(CPU_MAX) as f:
            quota, period = f.read().split()
        if quota != "max":
            cpus = min(cpus, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


@checked
def seed_everything(seed: Whole(0, 2**32 - 1)):
    """Seed python's random, numpy's global RNG and torch (CPU and every CUDA device)."""
    # seed < 2**32: numpy's limit
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds the CPU generator and all CUDA devices (lazily)


# ----------------------------------------------------------------------------- parameter groups

EM_LIKE_RATIO = 10.0  # the paper's EM-like schedule: W_V learns this many times faster than the rest


@checked
def em_like(value_ratio: Positive = EM_LIKE_RATIO):
    """The paper's EM-like schedule, as ``lr_multipliers``: the values' matrix W_V gets
    ``value_ratio`` times the base rate, routing (W_Q, W_K) and readout (W_O) the base rate.
    ``value_ratio=1`` is plain gradient descent."""
    return {"W_V": value_ratio}


@checked
def rates(lr: Real(0), lr_multipliers=None, names: Distinct("names", "a name", "matrix") = ("W_Q", "W_K", "W_V", "W_O")):
    """The learning rate of each matrix in ``names``: ``lr`` times its factor in ``lr_multipliers``
    (e.g. ``em_like()``), 1 where none is given. ``rates(0.01, em_like())`` ->
    {"W_Q": 0.01, "W_K": 0.01, "W_V": 0.1, "W_O": 0.01}."""
    if isinstance(names, str) or not names or not all(isinstance(n, str) for n in names):
        _validate.fail("names", "a non-empty list of matrix names, e.g. ('W_Q', 'W_K')", names)
    if lr_multipliers is not None and not isinstance(lr_multipliers, dict):
        _validate.fail("lr_multipliers", "a dict {matrix name: factor}, e.g. train.em_like(10)", lr_multipliers)
    factors = dict(lr_multipliers or {})
    unknown = set(factors) - set(names)
    if unknown:
        _validate.fail("lr_multipliers", f"factors for some of {list(names)}", sorted(unknown))
    # a factor of 0 freezes a matrix (a control experiment); a negative one would climb the loss
    return {name: lr * _validate.real(f"lr_multipliers[{name!r}]", factors.get(name, 1.0), 0) for name in names}


@checked
def param_groups(model: torch.nn.Module, lr: Positive, lr_multipliers=None):
    """Optimizer parameter groups with a learning rate per parameter, chosen by name.

    ``lr_multipliers`` maps fnmatch patterns on ``model.named_parameters()`` names to a factor
    of ``lr`` (0 freezes); the first pattern that matches a name wins, a name that matches none gets 1.
    Parameters with the same factor share a group, named by joining their names with "+"::

        param_groups(head, 0.01, {"W_V": 10.0})               # the paper's EM-like schedule
        # [{"name": "W_Q+W_K+W_O", "lr": 0.01, ...}, {"name": "W_V", "lr": 0.1, ...}]
        param_groups(head, 0.1, {"W_Q": 0.1, "W_K": 0.1})     # slow routing, fast content
        param_groups(model, 0.1, {f"*{m}": 0.1 for m in GROUPS["routing"]})  # same, any nesting
    """
    lr_multipliers = _multipliers(lr_multipliers)
    named = list(model.named_parameters())
    names = [name for name, _ in named]
    for pattern in lr_multipliers:  # a typo would otherwise silently train at the base rate
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            _validate.fail("lr_multipliers", "patterns that each match some parameter",
                           f"the pattern {pattern!r}, which matches none of {names}", described=True)
    groups = {}  # factor -> group; dicts keep order, so groups follow the model's parameter order
    for name, param in named:
        factor = next((f for p, f in lr_multipliers.items() if fnmatch.fnmatchcase(name, p)), 1.0)
        group = groups.setdefault(factor, {"params": [], "lr": lr * factor, "names": []})
        group["params"].append(param)
        group["names"].append(name)
    return [{"params": g["params"], "lr": g["lr"], "name": "+".join(g["names"])} for g in groups.values()]


# ----------------------------------------------------------------------------- schedules

SCHEDULES = ("constant", "cosine")


@checked
def lr_factor(step, steps: Whole(1), schedule: OneOf(SCHEDULES) = "constant", warmup=0):
    """The factor on every group's base rate at ``step`` (0-based) of a run of ``steps`` steps
    (``step == steps`` is allowed: the rate the schedule ends at).

    Warm-up: (step + 1) / warmup for the first ``warmup`` steps, so no step runs at rate 0.
    Then "constant": 1; "cosine": 0.5 (1 + cos(pi t)) with t = (step - warmup) / (steps - warmup),
    from 1 after the warm-up down toward 0 at the last step (large early steps find the basin,
    small late ones settle into it: what takes a model from near the posterior to on it).
    """
    step = _validate.integer("step", step, 0, steps)
    return _factor(step, steps, schedule, _warmup(warmup, steps))


def _warmup(warmup, steps):
    """The warm-up, checked against the run: the ramp may fill it, not outlast it."""
    warmup = _validate.integer("warmup", warmup, 0)
    if steps and warmup > steps:
        _validate.fail("warmup", f"at most steps={steps} (the rate would never reach lr)", warmup)
    return warmup


def _factor(step, steps, schedule, warmup):
    """lr_factor without the checks: the training loop calls it at every step, on checked values."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


# ----------------------------------------------------------------------------- history

class MetricNotFound(KeyError, ValueError):
    """``history[key]`` for a metric the history does not have (a KeyError, as a dict's; said plainly)."""

    def __str__(self):
        return str(self.args[0])


def _metric_value(key, value):
    """A metric as a float: a number or a 0-d tensor (float() unwraps it); True is not a number."""
    try:
        return float(value if not isinstance(value, (bool, np.bool_)) else None)
    except (TypeError, ValueError, RuntimeError):
        _validate.fail(f"metric {key!r}", "a number (a float, or a 0-d tensor)", value)


class History:
    """One dict of floats per logged step. ``h["loss"]`` and ``h.steps`` are numpy arrays."""

    def __init__(self):
        self._steps = []
        self._columns = {}  # metric name -> one float per logged step (nan where it was absent)

    def append(self, step, **metrics):
        # by hand, not declared: a training loop logs every step; each step after the last one logged
        step = _validate.integer("step", step, self._steps[-1] + 1 if self._steps else 0)
        values = {key: _metric_value(key, value) for key, value in metrics.items()}
        for key in values:
            if key not in self._columns:  # a metric first seen late is nan before that
                self._columns[key] = [math.nan] * len(self._steps)
        for key, column in self._columns.items():
            column.append(values.get(key, math.nan))
        self._steps.append(int(step))

    def __getitem__(self, key):
        if key not in self._columns:
            raise MetricNotFound(f"key: expected a metric of this history, one of {self.keys()}, got {key!r}")
        return np.array(self._columns[key], dtype=np.float64)

    @property
    def steps(self):
        return np.array(self._steps, dtype=np.int64)

    def keys(self):
        return list(self._columns)

    def __len__(self):
        return len(self._steps)

    def last(self, key):
        """The last logged value of metric ``key``; nan while nothing is logged, for the metrics every
        run logs ("loss", "grad_norm"); MetricNotFound for any other metric it does not have."""
        if not len(self) and key in ("loss", "grad_norm"):
            return math.nan
        return self[key][-1].item()

    def to_dict(self):
        """Plain python lists, so torch.save and json both take it."""
        return {"steps": list(self._steps), "metrics": {k: list(v) for k, v in self._columns.items()}}

    @classmethod
    def from_dict(cls, d):
        ok = isinstance(d, dict) and isinstance(d.get("steps"), list) and isinstance(d.get("metrics"), dict)
        if not ok or any(not isinstance(v, list) or len(v) != len(d["steps"]) for v in d["metrics"].values()) \
                or any(b <= a for a, b in zip(d["steps"], d["steps"][1:])):
            _validate.fail("d", "what to_dict returns: {'steps': [increasing], 'metrics': {name: [one per step]}}", d)
        history = cls()
        history._steps = [int(s) for s in d["steps"]]
        history._columns = {k: [_metric_value(f"{k}[{i}]", x) for i, x in enumerate(v)] for k, v in d["metrics"].items()}
        return history

    def __repr__(self):
        return f"History({len(self)} logged steps, metrics {self.keys()})"


# ----------------------------------------------------------------------------- checkpoints

def _rng_state():
    np_state = np.random.get_state(legacy=False)
    np_state["state"]["key"] = np_state["state"]["key"].tolist()  # plain types: loads with weights_only
    state = {"python": random.getstate(), "numpy": np_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = dict(state["numpy"], state=dict(state["numpy"]["state"]))
    np_state["state"]["key"] = np.array(np_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(np_state)
    torch.set_rng_state(state["torch"].cpu())  # map_location may have moved it; RNG states live on cpu
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


KIND = "train.train"  # what a checkpoint of this loop says it is
CHECKPOINT_KEYS = ("model", "optimizer", "step", "history", "rng", "recipe")   # and "seed" (older ones lack it)


def _save_checkpoint(path, model, optimizer, next_step, history, rng, recipe, seed):
    checkpoints.save(path, {"kind": KIND, "fingerprint": _fingerprint(model, recipe, seed),
                            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": next_step,
                            "history": history.to_dict(), "rng": rng, "recipe": asdict(recipe), "seed": seed})


def _fingerprint(model, recipe, seed):
    """The model's parameter names and shapes, the recipe's fields and the seed that a resume must match."""
    shapes = [(n, list(p.shape)) for n, p in model.state_dict().items()]
    return checkpoints.fingerprint(shapes, recipe.fingerprint_fields(), *([] if seed is None else [seed]))


def _recipe_differences(saved, recipe):
    """What differs between the recipe a checkpoint was written with and this run's, in words."""
    ours = recipe.fingerprint_fields()
    return [f"{k}: checkpoint {saved.get(k)!r}, this run {v!r}" for k, v in ours.items() if saved.get(k) != v]


def _model_differences(saved, model):
    """How the checkpoint's parameters differ from the model's, in words (another model, another size)."""
    ours = model.state_dict()
    if sorted(saved) != sorted(ours):
        return [f"parameters: checkpoint {sorted(saved)}, this model {sorted(ours)} (another model)"]
    return [f"{k}: checkpoint shape {tuple(saved[k].shape)}, this model {tuple(v.shape)} (another size)"
            for k, v in ours.items() if saved[k].shape != v.shape]


def _seed_differences(saved, seed):
    """The seed, when both the checkpoint's run and this one were given one: one checkpoint_path for a
    loop over seeds would otherwise give the first seed's run for every seed."""
    if saved is None or seed is None or saved == seed:
        return []
    return [f"seed: checkpoint {saved}, this run {seed} (use one checkpoint_path per seed)"]


def _load_checkpoint(path, model, optimizer, recipe, seed):
    ckpt = checkpoints.load(path, KIND, next(model.parameters()).device, required=CHECKPOINT_KEYS)
    differences = (_model_differences(ckpt["model"], model) or _recipe_differences(ckpt["recipe"], recipe)
                   or _seed_differences(ckpt.get("seed"), seed))
    checkpoints.refuse(path, _fingerprint(model, recipe, seed), ckpt, differences)
    if ckpt["step"] > recipe.steps:   # else the longer run would come back as if it were this one
        _validate.fail(f"checkpoint {path}", f"at most recipe.steps={recipe.steps} steps (ask for at least as many "
                       "steps as it has, or delete it / pass resume=False)", f"{ckpt['step']} steps done",
                       described=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    _set_rng_state(ckpt["rng"])
    return ckpt["step"], History.from_dict(ckpt["history"])


# ----------------------------------------------------------------------------- the loop

def _multipliers(value):
    """lr_multipliers as a plain dict of pattern -> factor >= 0 (0 freezes what the pattern matches)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        _validate.fail("lr_multipliers", "a dict of parameter-name patterns to factors, e.g. {'W_V': 10.0}", value)
    return {pattern: _validate.real(f"lr_multipliers[{pattern!r}]", f, 0) for pattern, f in value.items()}


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became nan/inf."""


# SGD: no momentum, the paper's plain GD. AdamW: Adam with decoupled weight decay (the wind tunnels' recipe).
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


@checked
@dataclass(frozen=True)
class Recipe:
    """How a model is trained: everything that decides where the weights end up, apart from the
    model, the data and the seed. A checkpoint records it and a resume with another recipe is refused.

    At every step each parameter's rate is ``lr`` times its factor in ``lr_multipliers`` (fnmatch
    patterns on parameter names, e.g. ``em_like()``; a factor 0 freezes a matrix) times
    ``lr_factor(step, steps, schedule, warmup)``; ``clip_grad_norm`` rescales the gradients to at
    most that total norm; ``weight_decay`` goes to the optimizer (decoupled for AdamW)."""

    steps: Whole(0)
    optimizer: OneOf(OPTIMIZERS) = "sgd"
    lr: Positive = 1e-2
    lr_multipliers: dict = field(default_factory=dict)
    schedule: OneOf(SCHEDULES) = "constant"
    warmup: int = 0  # steps of linear warm-up
    clip_grad_norm: Positive | None = None  # None: no clipping
    weight_decay: Real(0) = 0.0

    def __post_init__(self):
        declared_fields(self)   # plain floats and ints: what the fingerprint hashes
        checked = {"lr_multipliers": _multipliers(self.lr_multipliers), "warmup": _warmup(self.warmup, self.steps)}
        if self.schedule != "constant" and self.steps and checked["warmup"] >= self.steps:
            _validate.fail("warmup", f"fewer steps than steps={self.steps} (the {self.schedule} schedule "
                           "would never run)", self.warmup)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def rate_factor(self, step):
        """The factor on every base rate at ``step`` (the schedule and the warm-up); checked by hand,
        not declared: the training loop calls it every step."""
        return _factor(_validate.integer("step", step, 0, self.steps), self.steps, self.schedule, self.warmup)

    def fingerprint_fields(self):
        """The fields a checkpoint must match (the number of steps only where the schedule uses it)."""
        fields = asdict(self)
        if self.schedule == "constant":
            del fields["steps"]  # a constant-rate run can be resumed to more steps
        return fields


def _lrs(optimizer):
    """'lr=0.01' or 'lr=0.01 for W_Q+W_K+W_O, 0.1 for W_V': for the divergence messages."""
    groups = optimizer.param_groups
    if len(groups) == 1:
        return f"lr={groups[0]['lr']:g}"
    return "lr=" + ", ".join(f"{g['lr']:g} for {g.get('name', f'group {i}')}" for i, g in enumerate(groups))


def _grad_norm(model, optimizer, step):
    """Total L2 norm of the gradients; nan/inf anywhere raises TrainingDiverged naming the parameter."""
    grads = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    if not grads:  # nothing would change: say so instead of "training" with grad_norm 0
        _validate.fail("loss_fn", "a loss that depends on the model's parameters",
                       "one whose gradient reaches none of them (is the model called inside loss_fn?)", described=True)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for _, g in grads])).item()
    if not math.isfinite(norm):  # one sync per step; only look for the culprit when there is one
        name = next((n for n, g in grads if not torch.isfinite(g).all()), "some parameter")
        raise TrainingDiverged(
            f"step {step}: the gradient of {name} contains nan/inf; the learning rate ({_lrs(optimizer)}) "
            f"may be too high: try a smaller lr, or a smaller lr_multipliers factor for {name}")
    return norm


def _clip(model, norm, max_norm):
    """Scale every gradient by max_norm / norm when the total norm is larger (torch's rule)."""
    coef = max_norm / (norm + 1e-6)
    if coef < 1:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(coef)


def _loss_of(out, step, optimizer):
    """(loss tensor, its value, metrics) from what loss_fn returned; a nan/inf loss stops the run."""
    if isinstance(out, tuple) and len(out) != 2:
        _validate.fail("loss_fn", "a function returning a loss, or (loss, metrics)", f"a tuple of {len(out)}",
                       described=True)
    loss, metrics = out if isinstance(out, tuple) else (out, {})
    if not isinstance(metrics, dict):
        _validate.fail("loss_fn's metrics", "a dict of numbers (the second of (loss, metrics))", metrics)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        _validate.fail("loss_fn's loss", "a scalar tensor (or (loss, metrics))", loss)
    if not loss.requires_grad:
        _validate.fail("loss_fn's loss", "a tensor computed from the model's parameters (requires_grad=True)",
                       "a tensor with requires_grad=False: is the model called inside loss_fn?")
    value = loss.item()
    if not math.isfinite(value) and step == 0:   # no update has happened yet: not the rate
        raise TrainingDiverged(f"step 0: loss is {value} before any update (expected a finite loss at the initial "
                               "weights): look for log(0), a division by 0 or nan/inf in the data or the weights, in loss_fn")
    if not math.isfinite(value):
        raise TrainingDiverged(f"step {step}: loss is {value}; training diverged. The learning rate "
                               f"({_lrs(optimizer)}) may be too high: try a smaller one, or look for log(0) in loss_fn")
    return loss, value, metrics


def _measured(out, step, taken, what="on_step"):
    """What on_step (or ``what``: loss_fn's metrics) returned, checked where it is read: None, or a dict of
    names the run does not log itself."""
    if out is None:
        return {}
    if not isinstance(out, dict):
        _validate.fail(what, "a function returning a dict of numbers or None", f"a {type(out).__name__} at "
                       f"step {step}", described=True)
    if set(out) & taken:
        _validate.fail(what, f"a dict without the run's own keys {sorted(taken)} (they would be overwritten)",
                       f"keys {sorted(set(out) & taken)} at step {step}", described=True)
    return out


def _step(model, loss_fn, opt, recipe, step, on_step):
    """One optimizer step; (loss, metrics with grad_norm and what on_step measured)."""
    opt.zero_grad(set_to_none=True)
    factor = recipe.rate_factor(step)
    for group in opt.param_groups:
        group["lr"] = group["base_lr"] * factor
    loss, value, metrics = _loss_of(loss_fn(model, step), step, opt)
    metrics = _measured(metrics, step, {"loss", "grad_norm", "lr"}, "loss_fn's metrics")
    for key, value in metrics.items():   # a nan accuracy is a broken batch or model, not a gap to plot
        if not math.isfinite(_metric_value(key, value)):
            raise TrainingDiverged(f"step {step}: loss_fn's metric {key!r} is {_metric_value(key, value)}; "
                                   "expected a finite number (the run stops here, before the update)")
    loss.backward()
    grad_norm = _grad_norm(model, opt, step)
    if recipe.clip_grad_norm is not None:
        _clip(model, grad_norm, recipe.clip_grad_norm)
    measured = _measured(on_step(model, step), step, {"loss", "grad_norm", "lr", *metrics}) if on_step else {}
    opt.step()  # weights change only here, after both guards: a diverged step is never saved
    scheduled = {"lr": opt.param_groups[0]["lr"]} if recipe.schedule != "constant" or recipe.warmup else {}
    return value, {**metrics, **measured, "grad_norm": grad_norm, **scheduled}


@checked
def train(model: torch.nn.Module, loss_fn: Callable, recipe: "Recipe", *, seed: Whole(0, 2**32 - 1) | None = None,
          device=None, log_every: Whole(1) = 1,
          on_step: Callable | None = None, checkpoint_path=None, checkpoint_every: Whole(1) = 100, resume: Flag = True,
          progress: Flag = True, desc: str = "training") -> History:
    """Train ``model`` on ``loss_fn(model, step)`` with ``recipe`` (a ``Recipe``); return the History.

    ``loss_fn`` returns a scalar loss tensor, or ``(loss, metrics)`` with a dict of floats or 0-d
    tensors; it puts its data on the model's device. Steps 0, log_every, 2*log_every, ... record
    "loss", the metrics and "grad_norm" (before clipping), and "lr" under a schedule.

    ``on_step(model, step)`` is called after the backward pass and the clipping, before the
    optimizer step (gradients in ``p.grad``): a place to measure without touching the loss; a dict
    it returns is logged with that step's metrics.

    With ``checkpoint_path`` the run saves every ``checkpoint_every`` steps, at the end and on
    Ctrl-C, and (if ``resume``) continues from an existing checkpoint: the weights, the optimizer,
    the history and the RNG states, so a resumed run equals one that never stopped. A checkpoint
    written with another recipe, another model or another ``seed`` is refused, saying what differs.
    """
    # seed < 2**32: as seed_everything takes it, and as stored
    _validate.function("loss_fn", loss_fn, "a function loss_fn(model, step)", n_args=2)
    if on_step is not None:
        _validate.function("on_step", on_step, "a function on_step(model, step)", n_args=2)
    checkpoint_path = _validate.writable_path("checkpoint_path", checkpoint_path) if checkpoint_path else None
    if not any(p.requires_grad for p in model.parameters()):
        _validate.fail("model", "a module with trainable parameters",
                       f"a {type(model).__name__} with none (no parameters, or all frozen)", described=True)
    model.to(pick_device(device))
    opt = _make_optimizer(model, recipe)
    if seed is not None:
        seed_everything(seed)
    history, start = History(), 0
    if checkpoint_path and resume and os.path.exists(checkpoint_path):  # RNGs too: after seeding
        start, history = _load_checkpoint(checkpoint_path, model, opt, recipe, seed)
    # done and rng always describe the same moment, the end of the last completed step, so a
    # Ctrl-C inside loss_fn (which may have drawn from the RNGs already) saves a resumable state
    done, rng = start, (_rng_state() if checkpoint_path else None)

    def save_now():
        _save_checkpoint(checkpoint_path, model, opt, done, history, rng, recipe, seed)

    bar = checkpoints.progress_bar(start, recipe.steps, desc, progress)
    with checkpoints.saved_on_interrupt(checkpoint_path, save_now, lambda: done), bar:
        for step in bar:
            loss, metrics = _step(model, loss_fn, opt, recipe, step, on_step)
            if step % log_every == 0:
                history.append(step, loss=loss, **metrics)
            done, rng = step + 1, (_rng_state() if checkpoint_path else None)
            if step % 10 == 0 or done == recipe.steps:  # the postfix costs a string format; not every step
                bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
            if checkpoint_path and done % checkpoint_every == 0 and done < recipe.steps:
                save_now()
    if checkpoint_path and done > start:  # the end of the run (the loop skips its own last save)
        save_now()
    return history


def _make_optimizer(model, recipe):
    """The recipe's optimizer over ``param_groups``; each group keeps its base rate for the schedule."""
    groups = param_groups(model, recipe.lr, recipe.lr_multipliers)
    opt = OPTIMIZERS[recipe.optimizer](groups, lr=recipe.lr, weight_decay=recipe.weight_decay)
    for group in opt.param_groups:
        group["base_lr"] = group["lr"]  # the schedule scales this; a resume must not change it
    return opt
