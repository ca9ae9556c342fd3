"""References to check the hand-written gradients against: autograd and finite differences.

Chapters use these to show, in the open, that each formula they derive is right.
"""

import math
from collections.abc import Callable, Mapping

import torch

from . import _validate, attention
from ._types import Flag, Float, Int, Positive, Tensor, checked


@checked
def autograd_gradients(x: Float[Tensor, "*B T d_x"], y: Int[Tensor, "*B T"], params: Mapping[str, Tensor],
                       causal: Flag = True) -> dict[str, Tensor]:
    """dL/d(u, alpha, s, q, k, v, W_*) by torch.autograd, keyed like ``attention.gradients``.

    ``alpha`` here is dL/dalpha, which the paper calls b (compatibility).
    """
    attention._check_inputs(x, params, y)
    leaves = {name: W.detach().clone().requires_grad_(True) for name, W in params.items()}
    fw = attention._forward(x, leaves, causal)   # checked above
    for name in ("q", "k", "v", "s", "alpha", "g"):
        fw[name].retain_grad()
    logits = fw["logits"]
    L = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long())
    L.backward()
    grads = {name: fw[name].grad for name in ("q", "k", "v", "s")}
    grads["u"] = fw["g"].grad
    grads["b"] = fw["alpha"].grad
    grads.update({name: W.grad for name, W in leaves.items()})
    # softmax gives masked scores (-inf) a gradient of exactly 0, as the formula does
    grads["s"] = torch.nan_to_num(grads["s"], nan=0.0)
    return grads


@checked
def finite_difference(f: Callable, tensor: Float[Tensor, "..."], index, eps: Positive = 1e-6) -> float:
    """Central difference (f(t + eps e) - f(t - eps e)) / 2 eps along one entry of ``tensor``.

    ``f`` takes the tensor and returns a scalar; ``tensor`` is left unchanged. Use float64.
    """
    # the signature refuses an integer tensor, which would truncate the bump to 0
    _validate.function("f", f, "a function f(tensor) -> a number", n_args=1)
    if tensor.isnan().any():   # -inf is a masked score; NaN is nothing a derivative can be taken at
        _validate.fail("tensor", "no NaN entries (masked scores may be -inf)", f"{int(tensor.isnan().sum())} NaN entries",
                       described=True)
    try:
        if tensor[index].numel() != 1:
            raise IndexError(f"it selects {tensor[index].numel()} entries")
    except (IndexError, TypeError, RuntimeError) as exc:
        _validate.fail("index", f"the index of one entry of a tensor of shape {tuple(tensor.shape)}",
                       f"{index!r} ({exc})", described=True)
    bumped = tensor.detach().clone()
    bumped[index] += eps
    up = _number(f, bumped)
    bumped[index] -= 2 * eps
    down = _number(f, bumped)
    return (up - down) / (2 * eps)


def _number(f, tensor):
    """f(tensor) as a float; a string or a tensor of several entries is not the scalar a derivative needs."""
    out = f(tensor)
    try:
        if isinstance(out, (str, bytes)):
            raise TypeError
        value = float(out)
    except (TypeError, ValueError, RuntimeError):
        _validate.fail("f", "a function f(tensor) -> a number", f"one returning {_validate.describe(out)}",
                       described=True)
    if not math.isfinite(value):   # a difference of NaN or inf is no derivative
        _validate.fail("f", "a function returning a finite number near the tensor", f"one returning {value}",
                       described=True)
    return value


def relative_error(a, b):
    """max |a - b| / max(|b|, tiny): one number that says how far two tensors disagree."""
    tensors = []
    for what, t in (("a", a), ("b", b)):
        try:
            t = torch.as_tensor(t.detach() if isinstance(t, torch.Tensor) else t, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            _validate.fail(what, "a tensor, an array or a number", t)
        tensors.append(_validate.finite_values(what, t))
    a, b = tensors
    if a.shape != b.shape:  # broadcasting (3, 1) against (3,) would compare the wrong entries
        _validate.fail("a, b", "two tensors of the same shape", f"shapes {tuple(a.shape)} and {tuple(b.shape)}",
                       described=True)
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
