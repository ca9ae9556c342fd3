"""Many independent attention heads trained at once, with the closed-form gradients.

The sticky-Markov experiment trains 10 copies of one small head (5 seeds x 2 schedules), each by
full-batch gradient descent on its own sequence of ~2000 positions. The (T x T) causal attention
is nearly all of the cost, so this module stacks the models along a leading *model axis* M and
computes every model's gradient in one batched pass::

    params = stack([attention.init_params(20, 10, 15, 8, seed=s) for s in seeds])   # W_Q: (M, 10, 20)
    metrics, grads = forward_backward(x, y, params)       # x (M, N, 20), y (M, N); grads (M, ...)
    run = train(x, y, params, lrs, steps=1000)             # lrs: {"W_V": (M,) rates, ...}

``attention.gradients`` sums its weight gradients over a batch (one model, many sequences);
here each model gets its own. The formulas are the paper's, as in ``attention``::

    u_i = W_O^T (softmax(z_i) - onehot(y_i)) / N,    b_ij = u_i . v_j
    dL/ds_ij = alpha_ij (b_ij - E_{alpha_i}[b]),      E_{alpha_i}[b] = u_i . g_i
    dL/dq_i = sum_j dL/ds_ij k_j / sqrt(d_k),  dL/dk_j = sum_i dL/ds_ij q_i / sqrt(d_k),
    dL/dv_j = sum_i alpha_ij u_i,                     dL/dW = sum_t (dL/d out_t) x_t^T

What makes it fast (measured on a 2-core CPU; see benchmarks/sticky_markov.py):

1. *Query blocks.* Rows of the score matrix are processed ``block_size`` queries at a time.
   A query block [a, b) only sees keys [0, b), so the masked upper triangle is never computed
   (half the work), and because each position's loss depends only on its own row, the forward
   and the backward pass of a block run back to back while the block is still in cache: no
   (T x T) tensor is ever stored, and two reused work buffers hold the block's tiles.
2. *Few passes over the (block x T) tiles.* Softmax is replaced by exp2 of scores shifted by a
   cheap upper bound of the row maximum (subtracted inside the score GEMM through an extra
   column), the row sums come out of the value GEMM through a column of ones, and
   E_{alpha_i}[b] = sum_j alpha_ij u_i . v_j = u_i . g_i comes from (T, d_v) tensors; so a tile
   is written twice (e, then dL/ds) and read five times, with no normalisation pass.
3. *GEMM shapes the CPU likes.* Thin (T, d) operands are zero-padded to 16 columns, and the
   key-side reductions are computed transposed (q^T dL/ds instead of dL/ds^T q): each is 2-3x
   faster than the plain form for these shapes.
4. *One process per core* (``train(..., workers=2)``, on a CPU). The models are independent, so
   each of ``workers`` processes trains its share of them on one thread, and the runs are joined:
   the same numbers as one process, 1.1-1.3x sooner on 2 cores, because torch's two threads on one
   batched pass wait on each other at every operation and two processes never do.
5. *One thread when the machine is busy.* With another CPU-bound job beside it, torch's two threads
   make a step of chapter 6's small run four times slower than one thread does; ``train`` times its
   own steps and keeps the faster count (``threads.tuned``). The numbers are the same at either.
"""

import contextlib
import math
import multiprocessing
import os
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from . import _validate, attention, checkpoints, threads
from ._types import Distinct, Flag, Float, Int, Tensor, Whole, checked
from .attention import PARAM_NAMES
from .train import TrainingDiverged, pick_device

PAD = 16  # thin (N, d) operands are padded to a multiple of this many columns (see 3. above)


# ----------------------------------------------------------------------------- stacking, checks

def stack(param_dicts):
    """A list of M parameter dicts (as ``attention.init_params`` returns) -> one dict of (M, out, in)."""
    expected = f"a non-empty list of parameter dicts with keys {PARAM_NAMES} and one shape per matrix"
    if param_dicts is None or isinstance(param_dicts, (dict, str)) or not hasattr(param_dicts, "__iter__"):
        _validate.fail("param_dicts", expected, param_dicts)
    param_dicts = list(param_dicts)
    if not param_dicts:
        _validate.fail("param_dicts", "at least one parameter dict", "none", described=True)
    for i, p in enumerate(param_dicts):
        _validate.exact_keys(f"param_dicts[{i}]", p, PARAM_NAMES)
        for name in PARAM_NAMES:
            W = _validate.tensor(f"param_dicts[{i}][{name!r}]", p[name], 2, finite=False, convert=False)
            first = param_dicts[0][name]
            if W.shape != first.shape or W.dtype != first.dtype or W.device != first.device:
                _validate.fail(f"param_dicts[{i}][{name!r}]", f"shape {tuple(first.shape)}, dtype {first.dtype} on "
                               f"{first.device} (those of param_dicts[0])", W)
    return {name: torch.stack([p[name] for p in param_dicts]) for name in PARAM_NAMES}


@checked
def _fit(x: Float[Tensor, "M N d_x"], y: Int[Tensor, "M N"], W_Q: Float[Tensor, "M d_k d_x"],
         W_K: Float[Tensor, "M d_k d_x"], W_V: Float[Tensor, "M d_v d_x"], W_O: Float[Tensor, "M C d_v"]):
    """M stacked models and their data: the annotations say how the shapes fit; below, what they cannot."""
    if x.shape[1] < 1:
        _validate.fail("x", "at least one position", tuple(x.shape))
    for name, t in (("x", x), ("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O)):
        if t.dtype != x.dtype or t.device != x.device:
            _validate.fail(name, f"dtype {x.dtype} on {x.device} (those of x)", f"{t.dtype} on {t.device}")
        _validate.finite_values(name, t)
    _validate.labels("y", y, W_O.shape[1])


def check_inputs(x, y, params):
    """Raise ValueError, naming what was expected, unless x (M, N, d_x), y (M, N) and params (a mapping
    of W_Q, W_K, W_V (M, d, d_x) and W_O (M, C, d_v)) fit M stacked models."""
    missing = [name for name in PARAM_NAMES if name not in params] if isinstance(params, Mapping) else PARAM_NAMES
    if missing:
        _validate.fail("params", f"a mapping with keys {PARAM_NAMES}", f"{type(params).__name__} missing {list(missing)}",
                       described=True)
    _fit(x, y, *(params[name] for name in PARAM_NAMES))


LOG2E = 1.4426950408889634  # exp(s) = 2^(s log2 e): exp2 is several times faster than exp on CPUs


def _augment(t, fill):
    """[t, fill, 0, ...]: one extra column ``fill``, zero-padded to a multiple of PAD columns.

    The extra column lets a GEMM do a subtraction for free: [q_i, -m_i] . [k_j, 1] = q_i . k_j - m_i.
    """
    M, N, d = t.shape
    out = t.new_zeros(M, N, -(-(d + 1) // PAD) * PAD)
    out[..., :d] = t
    out[..., d] = fill
    return out


def _score_bound(qs, k):
    """An upper bound of max_{j <= i} q_i . k_j for every query i, from (M, N, d) tensors only.

    Per coordinate, q_id k_jd <= max(q_id max_j k_jd, q_id min_j k_jd) (running max/min over
    the keys a causal query sees). Subtracting it before exp keeps every exp(.) <= 1, which is
    what softmax's row maximum is for, without a pass over the (T x T) scores.
    """
    high, low = k.cummax(dim=1).values, k.cummin(dim=1).values
    return torch.maximum(qs * high, qs * low).sum(-1)


def default_block_size(device):
    # CPU: 128 queries, chosen by measurement (benchmarks/sticky_markov.py --block-sizes): a pass takes
    # 0.88-1.02 of its time at 64 on a 2-core AVX-512 CPU (a small gain, within noise on some runs); 96
    # and 256 about as fast, 32 slower. GPU: few, large launches.
    return 128 if _validate.device("device", device).type == "cpu" else 512


# ----------------------------------------------------------------------------- one pass

@checked
def forward_backward(x, y, params, block_size: Whole(1) | None = None, grads: Flag = True,
                     check: Flag = True):
    """Per-model metrics and (optionally) per-model gradients of the mean cross-entropy.

    ``x`` (M, N, d_x), ``y`` (M, N) and ``params`` stacked (M, out, in); causal attention.
    Returns ``(metrics, grads)``: metrics maps "loss", "entropy" (mean predictive entropy,
    nats) and "accuracy" to (M,) tensors; grads maps W_Q, W_K, W_V, W_O to dL_m/dW_m with the
    shapes of params (None when ``grads`` is False).
    """
    if check:
        check_inputs(x, y, params)
    B = min(block_size or default_block_size(x.device), x.shape[1])
    with torch.no_grad():
        out = _forward_backward(x, y, params, B, grads, exact_max=False)
        if out is None:  # a score bound was so loose that exp underflowed: redo with exact row maxima
            out = _forward_backward(x, y, params, B, grads, exact_max=True)
    return out


def _forward_backward(x, y, params, B, grads, exact_max):
    """The computation of ``forward_backward``; returns None if the fast score bound underflowed.

    Per query block the attention is kept unnormalised, e_ij = exp(s_ij - m_i) with m_i a bound
    (or the exact row max), and its row sums Z_i come out of the value GEMM as an extra column
    of ones. alpha = e / Z is never formed: 1/Z_i is folded into the (block, d) tensors.
    """
    M, N, _ = x.shape
    W_Q, W_K, W_V, W_O = (params[name] for name in PARAM_NAMES)
    d_k, d_v, n_classes = W_Q.shape[1], W_V.shape[1], W_O.shape[1]
    scale = 1.0 / math.sqrt(d_k)
    qs = torch.bmm(x, W_Q.transpose(1, 2)).mul_(scale)      # scaled queries: s_ij = qs_i . k_j
    k0 = torch.bmm(x, W_K.transpose(1, 2))
    bound = 0.0 if exact_max else _score_bound(qs, k0)
    q = _augment(qs * LOG2E, -bound * LOG2E)                  # [q_i, -m_i]: scores in log2 units, minus m_i
    k = _augment(k0, 1.0)                                     # [k_j, 1]
    v = _augment(torch.bmm(x, W_V.transpose(1, 2)), 1.0)     # [v_j, 1]: the GEMM with e also gives Z
    future = ~attention.causal_mask(B, x.device)             # True above the diagonal of a square block
    onehot = x.new_zeros(M, N, n_classes).scatter_(-1, y.unsqueeze(-1), 1.0)
    g_all, logits_all = x.new_empty(M, N, d_v), x.new_empty(M, N, n_classes)
    work_e, work_d = x.new_empty(M * B * N), x.new_empty(M * B * N)  # reused by every block
    if grads:
        W_O_over_N = W_O / N                                   # the loss is a mean over N positions
        dlogits_all = x.new_empty(M, N, n_classes)
        dq = x.new_empty(M, N, k.shape[-1])
        dkT, dvT = x.new_zeros(M, d_k, N), x.new_zeros(M, d_v, N)   # transposed: see the module notes
        w = x.new_zeros(M, B, v.shape[-1])
    smallest_Z = []

    for a in range(0, N, B):
        b = min(a + B, N)
        r = b - a
        # scores of queries a..b-1 against keys 0..b-1 (later keys are all masked for them)
        e = torch.bmm(q[:, a:b], k[:, :b].transpose(1, 2), out=work_e[: M * r * b].view(M, r, b))
        e[:, :, a:b].masked_fill_(future[:r, :r], float("-inf"))
        if exact_max:
            e.sub_(e.amax(dim=-1, keepdim=True))
        e.exp2_()                                              # e_ij = exp(s_ij - m_i) <= 1
        gz = torch.bmm(e, v[:, :b])                            # [Z_i g_i, Z_i]
        Z = gz[..., d_v : d_v + 1]
        smallest_Z.append(Z.amin())
        g = torch.div(gz[..., :d_v], Z, out=g_all[:, a:b])    # g_i = sum_j alpha_ij v_j
        logits = torch.bmm(g, W_O.transpose(1, 2))
        logits_all[:, a:b] = logits
        if not grads:
            continue
        # N * dL/dz_i = softmax(z_i) - onehot(y_i); u_i = dL/dg_i (as attention.error_signal)
        dlogits = torch.sub(torch.softmax(logits, -1), onehot[:, a:b], out=dlogits_all[:, a:b])
        u = torch.bmm(dlogits, W_O_over_N)
        wr = w[:, :r]
        u_over_Z = torch.div(u, Z, out=wr[..., :d_v])
        torch.neg(torch.linalg.vecdot(u_over_Z, g), out=wr[..., d_v])   # -E_alpha[b]/Z = -u_i . g_i / Z_i
        # (b_ij - E_alpha_i[b]) / Z_i = [u_i/Z_i, -E/Z_i] . [v_j, 1], then dL/ds_ij = e_ij * that
        ds = torch.bmm(wr, v[:, :b].transpose(1, 2), out=work_d[: M * r * b].view(M, r, b))
        ds.mul_(e)
        dq[:, a:b] = torch.bmm(ds, k[:, :b])                   # sum_j dL/ds_ij k_j (scaled at the end)
        dkT[:, :, :b] += torch.bmm(qs[:, a:b].transpose(1, 2), ds)     # (sum_i dL/ds_ij qs_i)^T
        dvT[:, :, :b] += torch.bmm(u_over_Z.transpose(1, 2), e)        # (sum_i alpha_ij u_i)^T

    if not exact_max and torch.stack(smallest_Z).min().item() < 1e-30:
        return None
    logp = torch.log_softmax(logits_all, dim=-1)
    metrics = {"loss": -(logp * onehot).sum((1, 2)) / N,
               "entropy": -(logp.exp() * logp).sum((1, 2)) / N,
               "accuracy": (logits_all.argmax(-1) == y).sum(-1).to(x.dtype) / N}
    if not grads:
        return metrics, None
    return metrics, {
        "W_Q": torch.bmm(dq[..., :d_k].transpose(1, 2), x).mul_(scale), "W_K": torch.bmm(dkT, x),
        "W_V": torch.bmm(dvT, x), "W_O": torch.bmm(dlogits_all.transpose(1, 2), g_all).div_(N),
    }


def evaluate(x, y, params, block_size=None):
    """Per-model loss, entropy and accuracy ((M,) CPU float64 numpy arrays), no gradients."""
    x, y = (torch.from_numpy(t) if isinstance(t, np.ndarray) else t for t in (x, y))   # numpy arrays too
    with torch.no_grad():
        metrics, _ = forward_backward(x, y, params, block_size, grads=False)
    return {key: value.detach().to("cpu", torch.float64).numpy() for key, value in metrics.items()}


# ----------------------------------------------------------------------------- training

@dataclass
class BatchedRun:
    """What ``train`` returns: one column per model.

    ``loss``, ``entropy``, ``accuracy``: (steps, M) numpy, row t measured after t updates (before
    update t + 1). ``final``: the same three after the last update, (M,). ``grad_sq``: {matrix:
    (steps, M)} the squared norm of each matrix's gradient at step t, so that lr * grad_sq is the
    first-order decrease of the loss that the matrix's update buys (plain gradient descent).
    ``snapshots``: {matrix: (len(snapshot_steps), M, out, in)} the weights after the number of
    updates in ``snapshot_steps`` (0, record_every, ..., steps); ``W_V`` is ``snapshots["W_V"]``.
    ``params``: the final weights, stacked, on the CPU.
    """
    names: list
    loss: np.ndarray
    entropy: np.ndarray
    accuracy: np.ndarray
    final: dict
    snapshot_steps: np.ndarray
    snapshots: dict
    grad_sq: dict
    params: dict
    seconds: float = 0.0
    device: str = "cpu"
    resumed_from: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def W_V(self):
        return self.snapshots["W_V"]


def _check_lrs(lrs, M):
    """{"W_Q": rate or (M,) rates, ...} -> {name: (M,) float64 tensor}; every matrix must be named."""
    if not isinstance(lrs, dict) or set(lrs) != set(PARAM_NAMES):
        _validate.fail("lrs", f"one entry per matrix {PARAM_NAMES} (a rate or one rate per model)",
                       sorted(lrs) if isinstance(lrs, dict) else lrs)
    out = {}
    for name in PARAM_NAMES:
        try:
            rate = torch.as_tensor(lrs[name], dtype=torch.float64).reshape(-1)
        except (TypeError, ValueError, RuntimeError):
            _validate.fail(f"lrs[{name!r}]", f"a finite rate >= 0, or {M} of them (one per model)", lrs[name])
        if rate.numel() == 1:
            rate = rate.expand(M)
        if rate.numel() != M or not bool(torch.isfinite(rate).all()) or bool((rate < 0).any()):
            _validate.fail(f"lrs[{name!r}]", f"a finite rate >= 0, or {M} of them (one per model)", lrs[name])
        out[name] = rate.clone()
    return out


KIND = "batched.train"  # what a checkpoint of this loop says it is


def _snapshot(params):
    """A float64 CPU copy of every matrix: the run's record of where the weights were."""
    return {n: params[n].detach().to("cpu", torch.float64).clone() for n in PARAM_NAMES}


def _diverged(step, finite, names, lrs):
    """TrainingDiverged naming the models whose entry of ``finite`` (one flag per model) is False."""
    bad = [m for m in range(len(names)) if not finite[m]]
    which = ", ".join(f"{names[m]} (lr " + ", ".join(f"{n}={float(lrs[n][m]):g}" for n in PARAM_NAMES) + ")"
                      for m in bad[:4])
    cause = ("before any update: look for nan/inf in the data (x, y or what the sampler returns) or the weights"
             if step == 0 else "their learning rates are too high: lower the base rate or the value/routing ratio")
    return TrainingDiverged(f"step {step}: the loss or gradient of {len(bad)} model(s) is nan/inf: {which}"
                            f"{' ...' if len(bad) > 4 else ''}. {cause[0].upper()}{cause[1:]}.")


def _inputs(x, y, params, device, dtype):
    """x, y and the parameters checked and on ``device`` in ``dtype``, and the pool of (x, y) per step."""
    x = _validate.tensor("x", x, (3, 4), floating=True)
    y = _validate.tensor("y", y, x.dim() - 1)
    dtype = _validate.float_dtype("dtype", dtype)  # an integer dtype would truncate data and weights
    pooled = x.dim() == 4
    if pooled and tuple(y.shape) != tuple(x.shape[:3]):
        _validate.fail("y", f"an integer tensor of shape {tuple(x.shape[:3])} (a pool like x)", y)
    if not hasattr(params, "keys") or set(PARAM_NAMES) - set(params.keys()):
        _validate.fail("params", f"a mapping with keys {PARAM_NAMES} (batched.stack of parameter dicts)", params)
    x, y = x.to(device, dtype), y.to(device)
    params = {name: _validate.tensor(name, params[name], 3).to(device, dtype).clone() for name in PARAM_NAMES}
    pool = [(x[:, p], y[:, p]) for p in range(x.shape[1])] if pooled else [(x, y)]
    for xp, yp in pool:
        check_inputs(xp, yp, params)
    return x, y, params, pool


def _resume(path, fingerprint, steps, device, dtype):
    """(step, params, curves so far, snapshots so far) from a checkpoint of this same run."""
    ckpt = checkpoints.load(path, KIND, required=("fingerprint", "step", "params", "curves"))
    checkpoints.refuse(path, fingerprint, ckpt, [] if ckpt["fingerprint"] == fingerprint else [
        "other data, initial weights, rates or record_every (the fingerprint hashes them all)"])
    start = int(ckpt["step"])
    if start > steps:
        _validate.fail(f"checkpoint {path}", f"a step <= steps={steps} (ask for at least as many steps as it has, or "
                       "delete it / pass resume=False)", f"step {start}, past steps={steps}", described=True)
    params = {name: ckpt["params"][name].to(device, dtype) for name in PARAM_NAMES}
    snapshots = {int(s): {n: ckpt["snapshots"][n][i] for n in PARAM_NAMES}
                 for i, s in enumerate(ckpt["snapshot_steps"].tolist()) if s <= start}
    return start, params, ckpt["curves"][:, :start], snapshots


@checked
def train(x, y, params, lrs, steps: Whole(1), names: Distinct("names", "a name", "model") = None,
          record_every: Whole(1) = 10, block_size=None, device=None, dtype=torch.float32, progress: Flag = True,
          desc="training", checkpoint_path=None, checkpoint_every: Whole(1) = 100, resume: Flag = True, sampler=None,
          workers: Whole(1) = 1):
    """Plain full-batch gradient descent on M models at once, each with its own learning rates.

    ``x`` (M, N, d_x), ``y`` (M, N), ``params`` stacked (M, out, in); ``lrs`` maps each matrix
    name to a rate or to M rates (the EM-like schedule: a larger rate for W_V). The update is
    W <- W - lr * dL/dW, model by model, exactly as ``torch.optim.SGD`` without momentum.

    A *pool* of P sequences per model, ``x`` (M, P, N, d_x) and ``y`` (M, P, N), trains on one
    sequence per step, in turn (step t uses sequence t mod P): stochastic gradient descent over
    sequences, so that a model cannot memorise one sequence. The recorded loss is then the loss on
    that step's sequence, and ``final`` the mean over the pool.
    A ``sampler`` (a callable: step -> (x, y) shaped like ``x`` (M, N, d_x) and ``y``) draws *fresh*
    data instead, a new sequence per model at every step, so that no sequence is seen twice; ``x``,
    ``y`` are then its first batch, and ``final`` is measured on ``sampler(steps)``, which no step saw.
    A nan/inf loss raises ``TrainingDiverged`` naming the models and their rates. With
    ``checkpoint_path``, the run saves every ``checkpoint_every`` steps and on Ctrl-C, and (if
    ``resume``) continues from a checkpoint of the same inputs. ``workers`` > 1 splits the models
    between that many processes, one thread each (see 4. in the module notes): on a CPU, for a run
    without a sampler or a checkpoint.
    """
    if checkpoint_path:
        checkpoint_path = _validate.writable_path("checkpoint_path", checkpoint_path)
    device = pick_device(device)
    x, y, params, pool = _inputs(x, y, params, device, dtype)
    M, dtype = x.shape[0], x.dtype
    if sampler is not None and (not callable(sampler) or len(pool) > 1):
        _validate.fail("sampler", "None, or a callable step -> (x, y) when x is one batch (M, N, d_x), not a pool",
                       sampler)
    if sampler is not None:
        _validate.function("sampler", sampler, "a function sampler(step) -> (x, y)", n_args=1)

    def batch_at(step):
        if sampler is None:
            return pool[step % len(pool)]
        drawn = sampler(step)   # checked where it is read: (x, y) of the first batch's shapes
        if not isinstance(drawn, tuple) or len(drawn) != 2 or not all(isinstance(t, torch.Tensor) for t in drawn) \
                or drawn[0].shape != x.shape or drawn[1].shape != y.shape:
            got = ", ".join(map(_validate.describe, drawn)) if isinstance(drawn, tuple) else _validate.describe(drawn)
            _validate.fail("sampler", f"a function returning (x, y) of shapes {tuple(x.shape)} and {tuple(y.shape)}",
                           f"one returning ({got}) at step {step}", described=True)
        if not bool(torch.isfinite(drawn[0]).all()):   # else the step would diverge and blame the rates
            _validate.fail("sampler", "a function returning finite x", f"nan/inf in x at step {step}", described=True)
        if step == 0:   # its labels once, as the first batch's were: else torch's index error deep in a step
            _validate.labels("sampler(0)'s y", drawn[1], params["W_O"].shape[1])
        return drawn[0].to(device, dtype), drawn[1].to(device)

    names = list(names) if names is not None else [f"model {m}" for m in range(M)]
    if len(names) != M:
        _validate.fail("names", f"{M} names (one per model)", len(names))
    lrs = _check_lrs(lrs, M)
    if workers > 1:
        if device.type != "cpu" or sampler is not None or checkpoint_path:
            _validate.fail("workers", "1 on a GPU, with a sampler or with a checkpoint_path (processes split a "
                           "plain CPU run)", workers)
        return _train_in_processes(x, y, params, lrs, steps, names, workers, progress, desc, dict(
            record_every=record_every, block_size=block_size, dtype=dtype))
    rate = {name: lrs[name].to(device, dtype).view(M, 1, 1) for name in PARAM_NAMES}
    fingerprint = checkpoints.fingerprint(x, y, *(params[n] for n in PARAM_NAMES), *(lrs[n] for n in PARAM_NAMES), record_every)

    curves = torch.empty(3 + len(PARAM_NAMES), steps, M, dtype=torch.float64)   # loss, entropy, accuracy, |grad|^2
    snapshot_steps = sorted(set(range(0, steps, record_every)) | {steps})
    snapshot_set = set(snapshot_steps)
    start, snapshots = 0, {}
    if checkpoint_path and resume and os.path.exists(checkpoint_path):
        start, params, curves_so_far, snapshots = _resume(checkpoint_path, fingerprint, steps, device, dtype)
        curves[:, :start] = curves_so_far

    def save_now():
        checkpoints.save(checkpoint_path, {
            "kind": KIND, "fingerprint": fingerprint, "record_every": record_every, "step": done,
            "params": {n: params[n].cpu() for n in PARAM_NAMES}, "curves": curves[:, :done].clone(),
            "snapshot_steps": torch.tensor(sorted(snapshots)),
            "snapshots": {n: torch.stack([snapshots[s][n] for s in sorted(snapshots)]) for n in PARAM_NAMES},
        })

    bar = checkpoints.progress_bar(start, steps, desc, progress)
    began, done = time.perf_counter(), start
    with checkpoints.saved_on_interrupt(checkpoint_path, save_now, lambda: done), bar, \
            contextlib.closing(threads.tuned(bar, device)) as tuned_steps:
        for step in tuned_steps:
            if step in snapshot_set:
                snapshots[step] = _snapshot(params)
            metrics, grads = forward_backward(*batch_at(step), params, block_size, check=False)
            # one small tensor, one device sync: the metrics and each matrix's |grad|^2, which is
            # nan/inf when any gradient entry is, so the check comes before the update
            grad_sq = [grads[name].pow(2).sum((1, 2)) for name in PARAM_NAMES]
            row = torch.stack([metrics["loss"], metrics["entropy"], metrics["accuracy"], *grad_sq])
            row = row.to("cpu", torch.float64)
            finite = torch.isfinite(row).all(0)  # one flag per model
            if not bool(finite.all()):
                raise _diverged(step, finite, names, lrs)
            curves[:, step] = row
            for name in PARAM_NAMES:
                params[name].sub_(rate[name] * grads[name])
            done = step + 1
            if _steps_done is not None:
                _steps_done.value = done
            if step % 20 == 0:
                bar.set_postfix(loss=f"{row[0].mean().item():.4f}", refresh=False)
            if checkpoint_path and done % checkpoint_every == 0 and done < steps:
                save_now()
    snapshots[steps] = _snapshot(params)
    if checkpoint_path and done > start:
        save_now()
    per_sequence = [evaluate(xp, yp, params, block_size) for xp, yp in ([batch_at(steps)] if sampler else pool)]
    final = {key: np.mean([m[key] for m in per_sequence], axis=0) for key in per_sequence[0]}
    if not np.isfinite(final["loss"]).all():
        raise _diverged(steps, np.isfinite(final["loss"]), names, lrs)
    return BatchedRun(
        names=names, loss=curves[0].numpy(), entropy=curves[1].numpy(), accuracy=curves[2].numpy(),
        final=final, snapshot_steps=np.array(snapshot_steps),
        snapshots={n: torch.stack([snapshots[s][n] for s in snapshot_steps]).numpy() for n in PARAM_NAMES},
        grad_sq={n: curves[3 + i].numpy() for i, n in enumerate(PARAM_NAMES)},
        params={n: params[n].detach().cpu() for n in PARAM_NAMES},
        seconds=time.perf_counter() - began, device=str(device), resumed_from=start,
    )


# ----------------------------------------------------------------------------- one process per core

_steps_done = None   # in a worker process: the shared count of steps its part has done
_counters = ()


def _start_worker(counters):
    global _counters
    _counters = counters
    torch.set_num_threads(1)   # one process per core: two threads each would wait on each other again


def _train_part(index, args, kwargs):
    global _steps_done
    _steps_done = _counters[index]
    return train(*args, **kwargs)


def _train_in_processes(x, y, params, lrs, steps, names, workers, progress, desc, kwargs):
    """``train`` with the models split between ``workers`` processes; the runs joined in model order."""
    parts = [idx for idx in np.array_split(np.arange(x.shape[0]), workers) if len(idx)]
    context = multiprocessing.get_context("spawn")   # fork would copy torch's thread pools in any state
    counters = [context.Value("q", 0, lock=False) for _ in parts]
    began = time.perf_counter()
    with ProcessPoolExecutor(len(parts), mp_context=context, initializer=_start_worker, initargs=(counters,)) as pool:
        futures = [pool.submit(_train_part, i, (x[idx], y[idx], {n: params[n][idx] for n in PARAM_NAMES},
                                                {n: lrs[n][idx] for n in PARAM_NAMES}, steps),
                               dict(kwargs, names=[names[m] for m in idx], progress=False))
                   for i, idx in enumerate(parts)]
        with checkpoints.progress_bar(0, steps, desc, progress) as bar:
            while not all(f.done() for f in futures):
                time.sleep(0.5)
                bar.n = min(c.value for c in counters)
                bar.refresh()
        runs = [f.result() for f in futures]   # raises a part's error (TrainingDiverged names its models)
    joined = {key: np.concatenate([getattr(r, key) for r in runs], axis=1) for key in ("loss", "entropy", "accuracy")}
    return BatchedRun(
        names=list(names), **joined, snapshot_steps=runs[0].snapshot_steps,
        final={k: np.concatenate([r.final[k] for r in runs]) for k in runs[0].final},
        snapshots={n: np.concatenate([r.snapshots[n] for r in runs], axis=1) for n in PARAM_NAMES},
        grad_sq={n: np.concatenate([r.grad_sq[n] for r in runs], axis=1) for n in PARAM_NAMES},
        params={n: torch.cat([r.params[n] for r in runs]) for n in PARAM_NAMES},
        seconds=time.perf_counter() - began, device="cpu", extra={"workers": len(parts)})
