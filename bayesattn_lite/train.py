"""The one training loop every chapter uses.

The pieces, top to bottom:

- ``pick_device``     cuda when there is one, else cpu; asking for cuda without one is an error
- ``seed_everything`` python, numpy and torch RNGs from one seed, so a chapter reruns identically
- ``param_groups``    per-parameter learning rates by name pattern, e.g. the paper's EM-like
                      schedule (values learn 10x faster than routing): ``{"W_V": 10.0}``
- ``History``         one row of floats per logged step; ``history["loss"]`` is a numpy array
- ``train``           plain gradient descent (or Adam) on ``loss_fn(model, step)``, with a
                      divergence guard, a tqdm bar and resumable checkpoints

A run that is interrupted and resumed from its checkpoint gives exactly the same history and
weights as one that never stopped: the checkpoint carries the RNG states too, so ``loss_fn``
may sample its data from the global RNGs.
"""

import fnmatch
import math
import os
import random
import tempfile

import numpy as np
import torch
from tqdm.auto import tqdm

ROUTING_PATTERNS = ("*W_Q", "*W_K")  # queries and keys decide where a head looks; W_V, W_O what it reads


# ----------------------------------------------------------------------------- devices, seeds

def pick_device(device=None):
    """None -> cuda if available else cpu; a string or torch.device is honoured."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r} is not a device torch knows ({e})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{device}' was requested but CUDA is not available; "
                         "use device=None or 'cpu'")
    return device


def seed_everything(seed):
    """Seed python's random, numpy's global RNG and torch (CPU and every CUDA device)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"seed: expected an int in [0, 2**32), got {seed!r}")  # numpy's limit
    random.seed(int(seed))
    np.random.seed(int(seed))
    torch.manual_seed(int(seed))  # seeds the CPU generator and all CUDA devices (lazily)


# ----------------------------------------------------------------------------- parameter groups

def _check_positive(what, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what}: expected a positive finite number, got {value!r}")


def param_groups(model, lr, lr_multipliers=None):
    """Optimizer parameter groups with a learning rate per parameter, chosen by name.

    ``lr_multipliers`` maps fnmatch patterns on ``model.named_parameters()`` names to a factor
    of ``lr``; the first pattern that matches a name wins, a name that matches none gets 1.
    Parameters with the same factor share a group, named by joining their names with "+"::

        param_groups(head, 0.01, {"W_V": 10.0})               # the paper's EM-like schedule
        # [{"name": "W_Q+W_K+W_O", "lr": 0.01, ...}, {"name": "W_V", "lr": 0.1, ...}]
        param_groups(head, 0.1, {"W_Q": 0.1, "W_K": 0.1})     # slow routing, fast content
        param_groups(model, 0.1, dict.fromkeys(ROUTING_PATTERNS, 0.1))  # same, any nesting
    """
    _check_positive("lr", lr)
    lr_multipliers = dict(lr_multipliers or {})
    for pattern, factor in lr_multipliers.items():
        _check_positive(f"lr_multipliers[{pattern!r}]", factor)
    named = list(model.named_parameters())
    names = [name for name, _ in named]
    for pattern in lr_multipliers:  # a typo would otherwise silently train at the base rate
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise ValueError(f"lr_multipliers: pattern {pattern!r} matches no parameter; "
                             f"the parameters are {names}")
    groups = {}  # factor -> group; dicts keep order, so groups follow the model's parameter order
    for name, param in named:
        factor = next((f for p, f in lr_multipliers.items() if fnmatch.fnmatchcase(name, p)), 1.0)
        group = groups.setdefault(factor, {"params": [], "lr": lr * factor, "names": []})
        group["params"].append(param)
        group["names"].append(name)
    return [{"params": g["params"], "lr": g["lr"], "name": "+".join(g["names"])} for g in groups.values()]


# ----------------------------------------------------------------------------- history

class History:
    """One dict of floats per logged step. ``h["loss"]`` and ``h.steps`` are numpy arrays."""

    def __init__(self):
        self._steps = []
        self._columns = {}  # metric name -> one float per logged step (nan where it was absent)

    def append(self, step, **metrics):
        for key in metrics:
            if key not in self._columns:  # a metric first seen late is nan before that
                self._columns[key] = [math.nan] * len(self._steps)
        for key, column in self._columns.items():
            column.append(float(metrics.get(key, math.nan)))  # float() also unwraps 0-d tensors
        self._steps.append(int(step))

    def __getitem__(self, key):
        if key not in self._columns:
            raise KeyError(f"no metric {key!r} in this history; it has {self.keys()}")
        return np.array(self._columns[key], dtype=np.float64)

    @property
    def steps(self):
        return np.array(self._steps, dtype=np.int64)

    def keys(self):
        return list(self._columns)

    def __len__(self):
        return len(self._steps)

    def last(self, key):
        return self[key][-1].item() if len(self) else math.nan

    def to_dict(self):
        """Plain python lists, so torch.save and json both take it."""
        return {"steps": list(self._steps), "metrics": {k: list(v) for k, v in self._columns.items()}}

    @classmethod
    def from_dict(cls, d):
        history = cls()
        history._steps = [int(s) for s in d["steps"]]
        history._columns = {k: [float(x) for x in v] for k, v in d["metrics"].items()}
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


def _save_checkpoint(path, model, optimizer, next_step, history, rng):
    """Write to a temp file beside ``path``, then rename: a crash mid-save keeps the old checkpoint."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pt")
    os.close(fd)
    try:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": next_step,
                    "history": history.to_dict(), "rng": rng}, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise


def _load_checkpoint(path, model, optimizer, device):
    ckpt = torch.load(path, map_location=device, weights_only=True)
    saved, ours = list(ckpt["model"]), list(model.state_dict())
    if sorted(saved) != sorted(ours):
        raise ValueError(f"checkpoint {path} holds parameters {saved} but the model has {ours}; "
                         "it was written for another model: delete it or pass resume=False")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    _set_rng_state(ckpt["rng"])
    return ckpt["step"], History.from_dict(ckpt["history"])


# ----------------------------------------------------------------------------- the loop

class TrainingDiverged(RuntimeError):
    """The loss or a gradient became nan/inf."""


OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}  # SGD: no momentum, the paper's plain GD


def _make_optimizer(optimizer, groups, lr):
    if callable(optimizer):
        return optimizer(groups)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: expected one of {list(OPTIMIZERS)} or a callable "
                         f"make_optimizer(param_groups), got {optimizer!r}")
    return OPTIMIZERS[optimizer](groups, lr=lr)


def _check_count(what, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what}: expected an int >= {minimum}, got {value!r}")


def _lrs(optimizer):
    """'lr=0.01' or 'lr=0.01 for W_Q+W_K+W_O, 0.1 for W_V': for the divergence messages."""
    groups = optimizer.param_groups
    if len(groups) == 1:
        return f"lr={groups[0]['lr']:g}"
    return "lr=" + ", ".join(f"{g['lr']:g} for {g.get('name', f'group {i}')}" for i, g in enumerate(groups))


def _grad_norm(model, optimizer, step):
    """Total L2 norm of the gradients; nan/inf anywhere raises TrainingDiverged naming the parameter."""
    grads = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for _, g in grads])).item()
    if not math.isfinite(norm):  # one sync per step; only look for the culprit when there is one
        name = next((n for n, g in grads if not torch.isfinite(g).all()), "some parameter")
        raise TrainingDiverged(
            f"step {step}: the gradient of {name} contains nan/inf; the learning rate ({_lrs(optimizer)}) "
            f"may be too high: try a smaller lr, or a smaller lr_multipliers factor for {name}")
    return norm


def train(model, loss_fn, steps, optimizer="sgd", lr=1e-2, lr_multipliers=None, groups=None,
          device=None, seed=None, log_every=1, progress=True, checkpoint_path=None,
          checkpoint_every=100, resume=True, desc="training"):
    """Run ``steps`` optimizer steps on ``loss_fn(model, step)`` and return the History.

    ``loss_fn`` returns a scalar loss tensor, or ``(loss, metrics)`` with a dict of floats or
    0-d tensors; it should put its data on the model's device. Steps 0, log_every, 2*log_every, ...
    record "loss", the metrics and "grad_norm" (before the optimizer step). ``optimizer`` is
    "sgd", "adam" or ``make_optimizer(param_groups)``; ``groups`` (from ``param_groups``)
    replaces lr_multipliers. With ``checkpoint_path``, a run saves every ``checkpoint_every``
    steps, at the end and on Ctrl-C, and (if ``resume``) continues from an existing checkpoint,
    also to a larger ``steps``. A checkpoint already past ``steps`` is loaded and nothing runs.
    """
    _check_count("steps", steps, 0)
    _check_count("log_every", log_every, 1)
    _check_count("checkpoint_every", checkpoint_every, 1)
    _check_positive("lr", lr)
    if groups is not None and lr_multipliers is not None:
        raise ValueError("pass either groups or lr_multipliers, not both")
    device = pick_device(device)
    model.to(device)
    # copies: torch.optim fills its defaults into the dicts it gets, and the caller may reuse them
    groups = [dict(g) for g in groups] if groups is not None else param_groups(model, lr, lr_multipliers)
    opt = _make_optimizer(optimizer, groups, lr)
    if seed is not None:
        seed_everything(seed)
    history, start = History(), 0
    if checkpoint_path and resume and os.path.exists(checkpoint_path):
        start, history = _load_checkpoint(checkpoint_path, model, opt, device)  # RNGs too: after seeding

    show = progress and os.environ.get("BAYESATTN_PROGRESS", "1") != "0"
    bar = tqdm(range(start, steps), desc=desc, initial=start, total=steps, disable=not show, dynamic_ncols=True)
    # done and rng always describe the same moment, the end of the last completed step, so a
    # Ctrl-C inside loss_fn (which may have drawn from the RNGs already) saves a resumable state
    done, rng = start, (_rng_state() if checkpoint_path else None)
    try:
        for step in bar:
            opt.zero_grad(set_to_none=True)
            out = loss_fn(model, step)
            loss, metrics = out if isinstance(out, tuple) else (out, {})
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                raise TrainingDiverged(
                    f"step {step}: loss is {loss_value}; training diverged. The learning rate "
                    f"({_lrs(opt)}) may be too high: try a smaller one, or look for log(0) in loss_fn")
            loss.backward()
            grad_norm = _grad_norm(model, opt, step)
            opt.step()  # weights change only here, after both guards: a diverged step is never saved
            if step % log_every == 0:
                history.append(step, loss=loss_value, **metrics, grad_norm=grad_norm)
            # (a Ctrl-C in the microseconds between opt.step() and here would save a step twice)
            done, rng = step + 1, (_rng_state() if checkpoint_path else None)
            if step % 10 == 0 or done == steps:  # the postfix costs a string format; not every step
                bar.set_postfix(loss=f"{loss_value:.4g}", refresh=False)
            if checkpoint_path and done % checkpoint_every == 0 and done < steps:
                _save_checkpoint(checkpoint_path, model, opt, done, history, rng)
    except KeyboardInterrupt:
        if checkpoint_path:
            _save_checkpoint(checkpoint_path, model, opt, done, history, rng)
            print(f"\ninterrupted: saved step {done} to {checkpoint_path}; run train again to resume")
        raise
    finally:
        bar.close()
    if checkpoint_path and done > start:  # the end of the run (the loop skips its own last save)
        _save_checkpoint(checkpoint_path, model, opt, done, history, rng)
    return history
