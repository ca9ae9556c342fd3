"""Checks of the coding exercises of chapter 7 (one check per exercise, on the engine of ``_engine``)."""

import math

import numpy as np
import torch

from .. import diagnostics, wind_tunnels
from ._engine import DTYPE, CheckResult, Flaw, Output, Spec, generator, make_case, run

__all__ = ["check_kl_bits"]

# ----------------------------------------------------------------------------- the error in bits (chapter 7)

LN2 = math.log(2.0)


def _batch(posterior, mask):
    """A wind-tunnel batch around ``posterior`` and ``mask``, as ``diagnostics.kl_bits`` reads one."""
    B, T, _ = posterior.shape
    targets = torch.where(mask, posterior.argmax(-1), torch.full((B, T), wind_tunnels.IGNORE_INDEX))
    return wind_tunnels.WindTunnelBatch(torch.zeros(B, T, dtype=torch.long), targets, posterior, mask)


def _kl_bits(inp, bits=True, forward=True, normalise=True, scored_only=True):
    """The mean KL over scored positions (``diagnostics.kl_bits``), or with one knob turned: a 0-d float64 array."""
    logits, p, mask = inp["logits"], inp["posterior"], inp["mask"]
    if bits and forward and normalise and scored_only:
        return np.array(diagnostics.kl_bits(logits, _batch(p, mask)).item())   # the reference: the package function
    log_q = torch.log_softmax(logits, -1) if normalise else logits
    if forward:    # sum_c p (log p - log q), with 0 log 0 = 0
        kl = (torch.xlogy(p, p) - torch.where(p > 0, p * log_q, torch.zeros_like(p))).sum(-1)
    else:          # sum_c q (log q - log p): infinite where q > 0 = p
        kl = (log_q.exp() * (log_q - torch.log(p))).sum(-1)
    kl = kl[mask] if scored_only else kl.where(mask, torch.zeros_like(kl))
    return np.array((kl.mean() / (LN2 if bits else 1.0)).item())


_KL = Output(
    "kl", (), "diagnostics.kl_bits: the mean over the scored positions (mask True) of KL(posterior || model), "
    "in bits, with the model's distribution the softmax of the logits and 0 log 0 = 0", _kl_bits,
    [Flaw("bits", False, "in nats: the natural log measures in nats, and the chapter's scores are in bits. "
          "One bit is ln 2 nats, so convert at the end."),
     Flaw("forward", False, "the KL in the wrong direction: the answers are drawn from the posterior, so the "
          "average over the classes is weighted by the posterior, not by the model. The other direction is "
          "infinite wherever the posterior rules out a value (a 0) that the model does not."),
     Flaw("normalise", False, "the logits were used as log-probabilities: logits are defined only up to a "
          "constant per position, and exp(logits) need not sum to 1. Turn them into the model's "
          "log-probabilities first, over the classes (the last axis)."),
     Flaw("scored_only", False, "averaged over every position: at a position that is not scored the posterior is "
          "a row of zeros (nothing to predict), so it adds 0 to the sum but still counts in the mean. Average "
          "over the positions where mask is True only.")],
)

# (B, T, C) per problem: all sizes differ; every other position scored, as in the bijection and the recall
_KL_SIZES = [(3, 6, 4), (2, 8, 5), (4, 5, 7)]


def _kl_spec():
    signature = {"logits": ("B", "T", "C"), "posterior": ("B", "T", "C"), "mask": ("B", "T")}
    cases = []
    for n, (B, T, C) in enumerate(_KL_SIZES):
        gen = generator(770 + n)
        logits = 1.5 * torch.randn(B, T, C, generator=gen, dtype=DTYPE) + 0.7   # a shift: not log-probabilities
        mask = torch.zeros(B, T, dtype=torch.bool)
        mask[:, n % 2::2] = True
        weights = torch.rand(B, T, C, generator=gen, dtype=DTYPE) + 0.05
        ruled_out = n > 0   # the posteriors of the last two problems rule values out, as the bijection's do
        if ruled_out:
            weights = weights * (torch.rand(B, T, C, generator=gen, dtype=DTYPE) > 0.3)
            weights[..., 0] += 0.1   # at least one value left at every position
        posterior = (weights / weights.sum(-1, keepdim=True)) * mask[..., None]   # 0 where not scored
        inputs = {"logits": logits, "posterior": posterior, "mask": mask}
        note = (f"B = {B} sequences of T = {T} positions, C = {C} classes, {int(mask.sum())} scored"
                + (", some values ruled out (posterior 0)" if ruled_out else ""))
        cases.append(make_case(signature, inputs, [_kl_bits(inputs)], note))
    return Spec("kl_bits", signature, [_KL], cases, numbers=True)


def check_kl_bits(fn):
    """Check ``fn(logits, posterior, mask) -> kl``: one number, the mean over the scored positions
    (``mask`` (B, T) True) of KL(posterior || softmax(logits)) in bits, as ``diagnostics.kl_bits``
    computes it for a wind-tunnel batch. ``logits`` and ``posterior`` are (B, T, C) float64 tensors;
    the posterior is a row of zeros where a position is not scored."""
    result = run(_kl_spec(), fn)
    if result:
        return result
    if "expected shape ()" in result.message:   # one number per position or per sequence
        return CheckResult(result.name, False, result.message + " The score is one number for the whole batch: "
                           "average the KL of every scored position of every sequence together.")
    if "you returned nan" in result.message:    # 0 * log 0 where the posterior rules a value out
        return CheckResult(result.name, False, "nan where the posterior rules a value out: a probability of 0 "
                           "times log 0 is 0 * (-inf) = nan in floating point, but the term counts as 0 in a KL "
                           "(torch.xlogy does that, or leave the zero entries out). "
                           + result.message[0].upper() + result.message[1:])
    return result
