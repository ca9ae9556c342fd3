"""References to check the hand-written gradients against: autograd and finite differences.

Chapters use these to show, in the open, that each formula they derive is right.
"""

import torch

from . import attention


def autograd_gradients(x, y, params, causal=True):
    """dL/d(u, alpha, s, q, k, v, W_*) by torch.autograd, keyed like ``attention.gradients``.

    ``alpha`` here is dL/dalpha, which the paper calls b (compatibility).
    """
    leaves = {name: W.detach().clone().requires_grad_(True) for name, W in params.items()}
    fw = attention.forward(x, leaves, causal)
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


def finite_difference(f, tensor, index, eps=1e-6):
    """Central difference (f(t + eps e) - f(t - eps e)) / 2 eps along one entry of ``tensor``.

    ``f`` takes the tensor and returns a scalar; ``tensor`` is left unchanged. Use float64.
    """
    bumped = tensor.detach().clone()
    bumped[index] += eps
    up = float(f(bumped))
    bumped[index] -= 2 * eps
    down = float(f(bumped))
    return (up - down) / (2 * eps)


def relative_error(a, b):
    """max |a - b| / max(|b|, tiny): one number that says how far two tensors disagree."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
