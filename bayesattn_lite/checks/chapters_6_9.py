"""Checks of the exercises of chapters 6-9, written with numpy: the answers are plain numbers (``Spec``
with ``numbers=True``), and nan stands for "none"."""

import numpy as np

from ._engine import Flaw, Output, Spec, make_case, rng, run

# ----------------------------------------------------------------------------- steps to a loss (chapter 6)


def _steps_to(inp, strict=False, final=True, never=np.nan, shift=0):
    curve, last, threshold = inp["curve"], inp["final"], inp["threshold"]
    losses = np.concatenate([curve, last[:, None]], axis=1) if final else curve
    hit = losses < threshold[:, None] if strict else losses <= threshold[:, None] * (1 + 1e-6)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + shift, never).astype(float)


_STEPS_TO = Output(
    "steps_to", ("S",), "experiments.first_step_at_or_below: the first t with loss <= threshold, nan if none",
    _steps_to,
    [Flaw("never", 0, "a seed that never reaches the threshold gets 0 instead of nan: argmax of an all-False row "
          "is 0. Check hit.any(axis=1) first and return nan where it is False."),
     Flaw("shift", 1, "off by one: curve[:, t] is the loss after t updates (t = 0 is the start), so the first index "
          "at or below the threshold is already the number of updates; do not add 1."),
     Flaw("final", False, "the final loss is missing: a run that reaches the threshold only with its last update "
          "gets nan. Append final as column `steps` of the curve (the loss after all updates)."),
     Flaw("strict", True, "strictly below: the threshold is 'at or below' (<=). With <, a schedule never reaches "
          "its own final loss, and two identical schedules give no speed-up of 1.")],
)


def _steps_to_spec():
    signature = {"curve": ("S", "steps"), "final": ("S",), "threshold": ("S",)}
    draw = rng(600)
    cases = []
    for S, steps in [(3, 12), (4, 20), (2, 9)]:
        rate = draw.uniform(0.05, 0.4, size=(S, 1))
        curve = 2.0 * np.exp(-rate * np.arange(steps)) + 0.5  # after 0..steps-1 updates
        final = 2.0 * np.exp(-rate[:, 0] * steps) + 0.5
        threshold = curve[np.arange(S), draw.integers(1, steps, size=S)].copy()
        threshold[0] = final[0]                       # reached only after the last update, exactly
        if S > 2:
            threshold[-1] = final[-1] - 0.1           # never reached
        inputs = {"curve": curve, "final": final, "threshold": threshold}
        about = (f"{S} seeds, {steps} steps: one reaches the threshold only after its last update"
                 + (", one never does" if S > 2 else ""))
        cases.append(make_case(signature, inputs, [_steps_to(inputs)], about))
    return Spec("steps_to", signature, [_STEPS_TO], cases, numbers=True)


def check_steps_to(fn):
    """Check ``fn(curve, final, threshold) -> steps_to`` (S,): per seed the first number of updates t
    after which the loss is <= threshold, nan if never (``experiments.first_step_at_or_below``).
    ``curve`` (S, steps) is the loss after t = 0..steps-1 updates, ``final`` (S,) after all of them."""
    return run(_steps_to_spec(), fn)


# ----------------------------------------------------------------------------- recall posterior (chapter 7)

def _recall_posterior(inp, split=True, normalise=True, others=True, vote=False):
    counts, noise = inp["counts"], inp["noise"]
    M, n = len(counts), counts.sum()
    if vote:  # all the probability on the most frequent value (the first of a tie)
        return np.eye(M)[np.argmax(counts)]
    wrong = noise / (M - 1) if split is True else noise / M if split == "M" else noise
    p = (1 - noise) ** counts * (wrong ** (n - counts) if others else 1.0)
    return p / p.sum() if normalise else p


_RECALL = Output(
    "p", ("M",), "p(v) ~ (1 - noise)^c_v (noise / (M - 1))^(n - c_v), normalised over v", _recall_posterior,
    [Flaw("split", False, "a wrong showing has probability noise / (M - 1), not noise: the noise is spread "
          "uniformly over the M - 1 other values."),
     Flaw("split", "M", "you spread the noise over all M values: a wrong showing is one of the M - 1 values "
          "*other* than the true one, so each has probability noise / (M - 1)."),
     Flaw("vote", True, "you returned a majority vote (all the probability on the most shown value). The "
          "posterior keeps the doubt: a value shown once less than the leader is less likely, not impossible; "
          "weigh each value by the likelihood of all n showings if it were the true one."),
     Flaw("normalise", False, "not normalised: divide by the sum over the M values so that the posterior sums to 1."),
     Flaw("others", False, "the showings of *other* values are missing: every showing of a value other than v "
          "multiplies p(v) by noise / (M - 1), so p(v) ~ (1 - noise)^c_v (noise / (M - 1))^(n - c_v).")],
    hint="suppose the true value is v. How likely is each of the n showings: one of v, and one of another "
         "value? Multiply, then make the M numbers a distribution.",
)


def _recall_spec():
    signature = {"counts": ("M",), "noise": ()}
    draw = rng(700)
    cases = []
    for M, shown, noise in [(6, 3, 0.2), (4, 0, 0.1), (8, 5, 0.3), (5, 4, 0.05)]:
        counts = np.bincount(draw.integers(0, M, size=shown), minlength=M).astype(float)
        inputs = {"counts": counts, "noise": noise}
        about = f"M = {M} values, shown {shown} times, noise {noise}: counts {counts.astype(int).tolist()}"
        cases.append(make_case(signature, inputs, [_recall_posterior(inputs)], about))
    return Spec("recall_posterior", signature, [_RECALL], cases, numbers=True)


def check_recall_posterior(fn):
    """Check ``fn(counts, noise) -> p`` (M,): the recall posterior of one key whose earlier pairs showed
    value v ``counts[v]`` times, p(v) proportional to (1 - noise)^c_v (noise / (M - 1))^(n - c_v)."""
    return run(_recall_spec(), fn)


# ----------------------------------------------------------------------------- LSTM mixing weights (chapter 8)

def _lstm_mixing(inp, first=1, last=0, input_gate=True, causal=True, transpose=False):
    f, i = inp["f"], inp["i"]
    T = len(f)
    omega = np.zeros((T, T))
    for t in range(T):
        for s in range(t + 1):
            gate = {True: i[s], False: 1.0, "reader": i[t]}[input_gate]   # True: the source's own gate
            omega[t, s] = np.prod(f[s + first:t + 1 - last]) * gate
        for s in range(t + 1, T if not causal else 0):  # a cumulative-product ratio P_t / P_s, unmasked
            omega[t, s] = i[s] / np.prod(f[t + 1:s + 1])
    return omega.T if transpose else omega


_LSTM = Output(
    "omega", ("T", "T"), "omega[t, s] = i[s] * prod(f[s+1 : t+1]) for s <= t, 0 above the diagonal", _lstm_mixing,
    [Flaw("first", 0, "the product of forget gates starts one step early: c_s = f_s c_{s-1} + i_s c~_s, so c~_s is "
          "forgotten by f_{s+1}, ..., f_t, not by f_s."),
     Flaw("last", 1, "the reader's own forget gate f_t is missing: the product runs up to r = t (it is the factor "
          "every source shares, which is why the ratio of two weights does not see x_t)."),
     Flaw("input_gate", False, "the input gate is missing: the source enters the cell state as i_s c~_s, so "
          "omega_ts carries a factor i_s."),
     Flaw("input_gate", "reader", "the input gate is the reader's, i_t: the gate that scales a source is the one "
          "open when it was written, i_s, so a source keeps its own i_s however long it is carried."),
     Flaw("transpose", True, "transposed: the rows are the readers t, the columns the sources s (omega[t, s], zero "
          "above the diagonal)."),
     Flaw("causal", False, "not causal: a source after the reader (s > t) has weight 0.")],
    hint="unroll c_t = f_t c_{t-1} + i_t c~_t back to the step s where c~_s was written: which gate let it in, "
         "and which forget gates has it passed since?",
)


def _lstm_spec():
    signature = {"f": ("T",), "i": ("T",)}
    draw = rng(800)
    cases = []
    for T in (4, 6, 7):
        inputs = {"f": draw.uniform(0.2, 0.95, T), "i": draw.uniform(0.1, 0.9, T)}
        cases.append(make_case(signature, inputs, [_lstm_mixing(inputs)], f"T = {T}"))
    return Spec("lstm_mixing", signature, [_LSTM], cases, numbers=True)


def check_lstm_mixing(fn):
    """Check ``fn(f, i) -> omega`` (T, T): the mixing weights of one LSTM channel, the cell state
    c_t = sum_s omega_ts c~_s with omega_ts = i_s prod_{r=s+1}^{t} f_r for s <= t, and 0 for s > t."""
    return run(_lstm_spec(), fn)
