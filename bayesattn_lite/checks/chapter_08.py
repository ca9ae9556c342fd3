"""Checks of the coding exercises of chapter 8 (one check per exercise, on the engine of ``_engine``)."""

import numpy as np
import torch

from .. import wind_tunnels
from ._engine import Flaw, Output, Spec, make_case, rng, run

__all__ = ["check_no_transport"]


# ----------------------------------------------------------------------------- the baseline without transport

def _no_transport(inp, transition="uniform", normalise="states"):
    """p(s_t | E, o_t) for every t: the package's forward filter run with a transition matrix that forgets
    (every row uniform), which is ``HMMTask.baseline_posterior`` for one sequence. The knobs make the
    usual mistakes: a filter that remembers (``transition="identity"``: the state never moves, so every
    earlier observation keeps counting) and a normalisation over the wrong axis, or none."""
    emission = torch.as_tensor(np.asarray(inp["emission"], dtype=float), dtype=torch.float64)
    observations = torch.as_tensor(np.asarray(inp["observations"]), dtype=torch.int64)
    S = emission.shape[0]
    if normalise != "states":  # the likelihood E[s, o_t] of every state, normalised over time or not at all
        lik = emission[:, observations].T.numpy()          # (K, S)
        return lik / lik.sum(axis=0, keepdims=True) if normalise == "time" else lik
    A = torch.full((S, S), 1.0 / S, dtype=torch.float64) if transition == "uniform" else torch.eye(S, dtype=torch.float64)
    return wind_tunnels.forward_filter(A[None], emission[None], observations[None])[0].numpy()


_NO_TRANSPORT = Output(
    "p", ("K", "S"),
    "wind_tunnels.forward_filter with a transition matrix whose rows are all uniform (HMMTask.baseline_posterior)",
    _no_transport,
    [Flaw("transition", "identity", "your belief carries over from one observation to the next: row t depends on "
          "o_0, ..., o_{t-1} too. That is transport (with a state that never moves), the primitive this baseline "
          "lacks. Each row should use the current observation o_t alone, with the same flat prior every step."),
     Flaw("normalise", "none", "the rows do not sum to 1: you returned the likelihood of the observation under each "
          "state. A posterior over the S states needs one more step, over the states."),
     Flaw("normalise", "time", "normalised over the wrong axis: each column (one state over all K steps) sums to 1, "
          "not each row. The posterior at step t is a distribution over the S states at that step.")],
)


def _no_transport_spec():
    signature = {"emission": ("S", "O"), "observations": ("K",)}
    draw = rng(808)
    cases = []
    for S, O, K in [(3, 4, 6), (4, 2, 7), (2, 5, 9)]:   # every size differs: a transposed E changes the shape
        emission = draw.dirichlet(np.ones(O), size=S)
        observations = draw.integers(0, O, size=K)
        inputs = {"emission": emission, "observations": observations}
        cases.append(make_case(signature, inputs, [_no_transport(inputs)],
                               f"S = {S} states, O = {O} observations, K = {K} steps"))
    return Spec("no_transport", signature, [_NO_TRANSPORT], cases, numbers=True)


def check_no_transport(fn):
    """Check ``fn(emission, observations) -> p`` (K, S): the HMM's baseline without transport for one
    sequence, the posterior over the hidden state at each step from the emission matrix E (S, O) and the
    current observation o_t alone, as if every step started from a uniform prior
    (``HMMTask.baseline_posterior``; ``wind_tunnels.forward_filter`` with uniform transition rows)."""
    return run(_no_transport_spec(), fn)


# A learner copy decorates the unwritten stub with checks.until_written(check_no_transport), so that the
# cell that scores it on the held-out sequences still runs: the fallback answers with this Spec's reference.
SPECS = {check_no_transport: _no_transport_spec}
