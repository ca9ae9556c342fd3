"""The engine every check runs on: it calls the learner's function, compares, and names the mistake.

A check describes its exercise as a ``Spec``: the arguments and their axes, the random problems
(``Case``: fixed seeds, float64, sizes that all differ so that a transposed answer cannot pass by
accident) and each returned tensor as an ``Output``, with the formula, the function that computes it
and its usual mistakes (``Flaw``: the reference computed with one knob turned, and what that means in
words). ``run(spec, fn)`` calls ``fn`` on every problem and returns a ``CheckResult``, which a notebook
displays as "✅ name: message" or "❌ name: message". It never raises, whatever ``fn`` does.

When the answer is wrong it says why: it recomputes the reference with each mistake, alone and two at
a time, and names the one that reproduces the learner's numbers. When none does, it says whether the
answer is a scaled copy of the right one, else where the largest error is, and the formula to compare
against. A ``Spec`` with ``numbers=True`` takes plain numbers instead of float64 tensors (a list, an
array, nan for "none"): the chapters 6-9 exercises, written with numpy.
"""

import html
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .. import _validate, attention

RTOL, ATOL = 1e-6, 1e-9
FORMULA = " Compare with "  # what precedes the reference formula in a message (folded in a notebook)
DTYPE = torch.float64
# What a learner's function may raise and still get a verdict: any exception, sys.exit's SystemExit too.
# KeyboardInterrupt is not caught: the learner stopping the check must still stop it.
LEARNER_ERRORS = (Exception, SystemExit)

# Added to every seed the checks draw their inputs with. 0 in the chapters, so a check's messages are
# the same on every run; the grader sets a fresh random offset in its own process for each submission,
# so a notebook cannot answer the public inputs of the checks from a table.
SEED_OFFSET = 0


def generator(seed):
    """The torch generator of the inputs numbered ``seed`` (shifted by SEED_OFFSET)."""
    return torch.Generator().manual_seed(SEED_OFFSET + seed)


def rng(seed):
    """The numpy generator of the inputs numbered ``seed`` (shifted by SEED_OFFSET)."""
    return np.random.default_rng(SEED_OFFSET + seed)


# (T, d_x, d_k, d_v, n_classes). Within a row every size differs, so each axis can be named from
# its length and a transpose changes the shape or the numbers; d_k > 1 keeps 1/sqrt(d_k) != 1/d_k.
SIZES = [(4, 6, 3, 5, 2), (5, 3, 2, 4, 6), (7, 5, 4, 3, 8), (6, 8, 5, 2, 3), (9, 4, 6, 7, 5)]


def is_causal(n):
    """Half of the problems use a causal mask (zeros above the diagonal of alpha), half do not."""
    return n % 2 == 0


def peaked_attention(T, n, gen):
    """Attention rows of problem ``n`` from scores of sd 2 drawn with ``gen``: peaked, far from uniform
    (so a weighted sum differs from a plain mean), causal where ``is_causal(n)``."""
    scores = 2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)
    if is_causal(n):
        scores = scores.masked_fill(~attention.causal_mask(T), float("-inf"))
    return torch.softmax(scores, dim=-1)


# ----------------------------------------------------------------------------- result

@dataclass(repr=False)
class CheckResult:
    """The verdict of one check: truthy when it passed; a notebook shows it as one line."""

    name: str
    passed: bool
    message: str
    # For a grader: the check's outputs, those that were right, and the knob of every named mistake that
    # explains a wrong one (partial credit reads them); ``graded`` is the message without formulas.
    outputs: tuple = ()
    right: tuple = ()
    mistakes: tuple = ()
    graded: str = ""
    practice: str = ""  # a problem set's full words (with the formula), kept for the grader's practice mode

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return f"{'✅' if self.passed else '❌'} {self.name}: {self.message}"

    def _repr_markdown_(self):
        # escape < > &: an exception message such as "<lambda>() takes ..." would vanish as an HTML tag.
        # The reference formula comes folded: a learner reads the hint first and opens it only if stuck.
        shown, formula = repr(self), ""
        if FORMULA in shown:
            shown, formula = shown.split(FORMULA, 1)
            formula = (f"\n\n<details><summary>the reference formula (open it after another try)</summary>\n\n"
                       f"{html.escape(formula.strip(), quote=False)}\n\n</details>")
        return html.escape(shown, quote=False) + formula


# ----------------------------------------------------------------------------- specification

@dataclass(frozen=True)
class Flaw:
    """A typical mistake: the reference computed with ``knob=value``, and what that means."""

    knob: str
    value: object
    words: str


@dataclass
class Output:
    """One tensor (or array of numbers) the learner returns, with the ways of getting it wrong."""

    label: str
    dims: tuple  # names of its axes, e.g. ("T", "d_v")
    formula: str
    compute: Callable  # compute(inputs, **knobs); without knobs it is the right answer
    flaws: list
    transpose_hint: str = ""
    shape_hints: dict = field(default_factory=dict)  # axis names of a wrong shape -> explanation
    hint: str = ""  # a first hint in words, given before the formula when no known mistake fits


@dataclass
class Case:
    inputs: dict  # argument name -> tensor (or array, or number), in call order
    expected: tuple  # the reference outputs
    dims: dict  # axis name -> size
    note: str  # "T=7, causal", to say which input went wrong


@dataclass
class Spec:
    name: str
    signature: dict  # argument name -> axis names
    outputs: list
    cases: list
    hint: str = ""  # what to check when the function raised on a shape mismatch
    numbers: bool = False  # answers are plain numbers (list, array, nan for "none"), not float64 tensors


def make_case(signature, inputs, expected, note):
    """A problem: its inputs, the reference outputs, and the size of every named axis."""
    dims = {}
    for name, axes in signature.items():
        dims.update(zip(axes, np.shape(inputs[name])))
    return Case(inputs, tuple(expected), dims, note)


# ----------------------------------------------------------------------------- running a check

def not_callable(name, arguments, given):
    """None when ``given`` (or the learner's function it wraps) can be called, else ``not_a_function``'s verdict
    (compare with None: a failed verdict is falsy)."""
    return None if callable(getattr(given, "learner_function", given)) else not_a_function(name, arguments, given)


def not_a_function(name, arguments, given):
    """The verdict when a check is given something else than the learner's function: most often its
    result, the function already called."""
    return CheckResult(name, False, f"expected your function {name}({', '.join(arguments)}), got "
                       f"{_validate.describe(given)}: pass the function itself, without calling it.")


def run(spec, fn):
    """The verdict on ``fn`` of the check ``spec``: call it on every problem, compare, name the mistake.
    A function wrapped by ``checks.until_written`` is checked as the learner wrote it, without the wrapper
    (which would answer with the reference)."""
    if (verdict := not_callable(spec.name, spec.signature, fn)) is not None:
        return verdict
    fn = getattr(fn, "learner_function", fn)
    answers = []
    for case in spec.cases:
        try:  # copies: an in-place operation of the learner must not touch the check's data
            got = fn(*(_copy(v) for v in case.inputs.values()))
        except LEARNER_ERRORS as exc:  # the learner gets a verdict, never a traceback
            return CheckResult(spec.name, False, _exception_message(spec, case, exc))
        got, problem = (_as_numbers if spec.numbers else _as_tensors)(spec, case, got)
        if problem:
            return CheckResult(spec.name, False, problem)
        answers.append(got)

    verdicts = []  # per output: None when right, else a Verdict
    for i in range(len(spec.outputs)):
        mine = [a[i] for a in answers]
        right = all(_close(m, c.expected[i]) for m, c in zip(mine, spec.cases))
        verdicts.append(None if right else _diagnose(spec, i, mine))
    labels = tuple(o.label for o in spec.outputs)
    if all(v is None for v in verdicts):
        inputs = "problems" if spec.numbers else "random inputs"
        message = f"matches the reference on {len(spec.cases)} {inputs}."
        return CheckResult(spec.name, True, message, labels, labels, (), message)
    mistakes = tuple(dict.fromkeys(k for v in verdicts if v is not None for k in v.knobs)) if all(
        v is None or v.knobs for v in verdicts) else ()  # () unless every wrong output is a named mistake
    return CheckResult(spec.name, False, _combine(spec, [v and v.words for v in verdicts]), labels,
                       tuple(lab for lab, v in zip(labels, verdicts) if v is None), mistakes,
                       _combine(spec, [v and v.named for v in verdicts]))


def reference(spec):
    """The reference answer of ``spec`` as a function with the learner's signature: each output's
    ``compute`` without knobs, on the arguments given by position or by name."""
    names = list(spec.signature)

    def answer(*args, **kwargs):
        if len(args) > len(names) or set(kwargs) - set(names[len(args):]):
            raise TypeError(f"{spec.name} takes ({', '.join(names)}), got {len(args)} positional arguments "
                            f"and {sorted(kwargs)}")
        inputs = {**dict(zip(names, args)), **kwargs}
        missing = [n for n in names if n not in inputs]
        if missing:
            raise TypeError(f"{spec.name}: missing {', '.join(missing)}")
        results = tuple(out.compute({n: inputs[n] for n in names}) for out in spec.outputs)
        return results[0] if len(results) == 1 else results

    answer.__name__ = spec.name
    return answer


def _copy(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _close(a, b):
    """Equal up to rounding, with nan equal to nan (a "none" answer must be "none" in both)."""
    return torch.allclose(torch.as_tensor(a), torch.as_tensor(b), rtol=RTOL, atol=ATOL, equal_nan=True)


def _combine(spec, verdicts):
    """One output: its explanation. Several: which are right, then what is wrong, each explanation once."""
    if len(spec.outputs) == 1:
        return verdicts[0]
    right = [o.label for o, v in zip(spec.outputs, verdicts) if v is None]
    wrong = {}  # explanation -> the outputs it explains, so a mistake made twice is told once
    for o, v in zip(spec.outputs, verdicts):
        if v is not None:
            wrong.setdefault(v, []).append(o.label)
    parts = [f"{_join(right)} {_is(right)} right;"] if right else []
    parts += [f"{_join(labels)} {_is(labels)} wrong: {v}" for v, labels in wrong.items()]
    return " ".join(parts)


def _join(words):
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _is(words):
    return "is" if len(words) == 1 else "are"


# ----------------------------------------------------------------------------- what came back

def _as_tensors(spec, case, got):
    """The learner's outputs as a tuple of float64 tensors, or (None, a sentence saying why not)."""
    n = len(spec.outputs)
    if n == 1:
        items = (got,)
    else:
        want = f"a tuple of {n} tensors ({', '.join(o.label for o in spec.outputs)})"
        if not isinstance(got, (tuple, list)) or len(got) != n:
            return None, f"expected {want}, got {type_name(got)}."
        items = tuple(got)
    tensors = []
    for out, item in zip(spec.outputs, items):
        tensor, problem = _as_tensor(out, case, item, where=f"{out.label}: " if n > 1 else "")
        if problem:
            return None, problem
        tensors.append(tensor)
    return tuple(tensors), None


def _as_tensor(out, case, item, where):
    expected = tuple(case.dims[a] for a in out.dims)
    want = f"a tensor of shape {expected} {_axes(out.dims)}"
    if isinstance(item, np.ndarray):  # numpy is fine: only the numbers matter
        if item.dtype.kind not in "biuf":
            return None, f"{where}expected {want}, got a numpy array of dtype {item.dtype}."
        item = torch.from_numpy(item)
    if not isinstance(item, torch.Tensor):
        return None, f"{where}expected {want}, got {type_name(item)}."
    shape = tuple(item.shape)
    if shape != expected:
        return None, f"{where}expected {want}, got {shape}{_named(shape, case)}.{_shape_hint(out, case, shape)}"
    if item.dtype != DTYPE:
        return None, (f"{where}expected dtype {DTYPE} (the dtype of the inputs), got {item.dtype}. "
                      "Tensors made without dtype= (torch.zeros, torch.tensor) default to float32: "
                      "use torch.zeros_like or dtype=<input>.dtype.")
    item = item.detach().cpu()
    if not torch.isfinite(item).all():
        what = "NaN" if torch.isnan(item).any() else "inf"
        index = _index(~torch.isfinite(item))
        return None, (f"{where}the result contains {what} (first at index {index}, input {case.note}). "
                      "Typical causes: a masked -inf score multiplied by 0, a log of 0, a division by 0.")
    return item, None


def _as_numbers(spec, case, got):
    """A numbers answer as a float64 array of the output's shape (nan allowed), or (None, why not)."""
    shape = tuple(case.dims[a] for a in spec.outputs[0].dims)
    if isinstance(got, torch.Tensor):
        got = got.detach().cpu().double().numpy()
    try:
        array = None if got is None or isinstance(got, str) else np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        array = None
    if array is None:
        return None, f"the result: expected numbers of shape {shape}, got {type_name(got)}. (on {case.note})"
    if array.shape != shape:
        return None, f"the result: expected shape {shape}, got {array.shape}. (on {case.note})"
    return (array,), None


def _axes(names):
    """('T',) -> '(T,)' and ('T', 'd_v') -> '(T, d_v)', written like the shapes they name."""
    return str(tuple(names)).replace("'", "")


def type_name(obj):
    if obj is None:
        return "None (does the function end with return?)"
    if isinstance(obj, (tuple, list)):
        return f"a {type(obj).__name__} of length {len(obj)}"
    if isinstance(obj, torch.Tensor):
        return f"a single tensor of shape {tuple(obj.shape)}"
    return type(obj).__name__


def _named(shape, case):
    """' = (T, d_v)' when every length in ``shape`` is one of the problem's sizes, else ''."""
    by_size = {size: name for name, size in case.dims.items()}
    if shape and all(s in by_size for s in shape):
        return f" = {_axes(by_size[s] for s in shape)}"
    return ""


def _shape_hint(out, case, shape):
    if len(shape) == 2 and shape == tuple(case.dims[a] for a in reversed(out.dims)):
        return " " + (out.transpose_hint or "That is the transpose of the expected shape.")
    by_size = {size: name for name, size in case.dims.items()}
    axes = tuple(by_size.get(s, "?") for s in shape)
    return " " + out.shape_hints[axes] if axes in out.shape_hints else ""


def _index(mask):
    """The first True entry of a boolean tensor, as a tuple of ints."""
    flat = int(mask.flatten().nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape)))


def _exception_message(spec, case, exc):
    text = str(exc).strip()
    if spec.numbers:
        return f"your function raised {type(exc).__name__}: {text[:200]} (on {case.note})."
    first_line = text.splitlines()[0][:200] if text else "(no message)"
    called = ", ".join(
        f"{name} {tuple(t.shape)}{'' if t.dtype == DTYPE else ' ' + str(t.dtype).replace('torch.', '')}"
        f" = {_axes(spec.signature[name])}"
        for name, t in case.inputs.items()
    )
    returns = _join([f"{o.label} {tuple(case.dims[a] for a in o.dims)} = {_axes(o.dims)}" for o in spec.outputs])
    message = (f"your function raised {type(exc).__name__}: {first_line}. "
               f"It was called with {called}, and should return {returns}.")
    if any(w in first_line.lower() for w in ("multipl", "size of tensor", "shape", "dimension", "mismatch")):
        message += (" A shape mismatch in a product usually means a missing or extra transpose: "
                    f"write each tensor's shape next to it. {spec.hint}")
    return message


# ----------------------------------------------------------------------------- what went wrong

def _flaw_sets(flaws):
    """Each mistake alone, then every pair of mistakes on different knobs."""
    yield from ((f,) for f in flaws)
    for a, b in itertools.combinations(flaws, 2):
        if a.knob != b.knob:
            yield (a, b)


@dataclass(frozen=True)
class Verdict:
    """What is wrong with one output: the explanation, the knobs of the named mistakes that reproduce
    it (empty when none does) and the explanation as a graded assignment shows it (no formula)."""

    words: str
    knobs: tuple = ()
    named: str = ""


def without_answer(words):
    """A check's words without the answer: nothing from a hint or the reference formula on."""
    return words.split(FORMULA, 1)[0].split(" Hint: ", 1)[0]


def named_only(words):
    """A mistake's explanation without the answer: its first clause (up to a colon, a semicolon or a full
    stop), and nothing from a hint or a reference formula on."""
    words = without_answer(words)
    first = min((i for i in (words.find(": "), words.find("; "), words.find(". ")) if i >= 0), default=len(words))
    return words[:first].rstrip(".") + "."


def _diagnose(spec, i, mine):
    out = spec.outputs[i]
    for flaws in _flaw_sets(out.flaws):
        knobs = {f.knob: f.value for f in flaws}
        if all(_close(m, out.compute(c.inputs, **knobs)) for m, c in zip(mine, spec.cases)):
            names = tuple(f.knob for f in flaws)
            if len(flaws) == 1:
                return Verdict(flaws[0].words, names, named_only(flaws[0].words))
            return Verdict(f"two mistakes at once. (1) {flaws[0].words} (2) {flaws[1].words}", names,
                           f"two mistakes at once. (1) {named_only(flaws[0].words)} (2) {named_only(flaws[1].words)}")
    if not spec.numbers and _transposed(spec.cases, mine, i):   # a square output's shape cannot show it
        return Verdict(f"it is the transpose of the right answer on every input: rows and columns are swapped. "
                       f"Which index runs down the rows?{FORMULA}{out.formula}.",
                       (), "it is the transpose of the right answer on every input: rows and columns are swapped.")
    words, graded = (_first_difference if spec.numbers else _unknown)(out, spec.cases, mine, i)
    return Verdict(words, (), "no known mistake fits: " + graded)


def _transposed(cases, mine, i):
    """Every answer is square and the reference transposed (a non-square one would fail on its shape)."""
    return all(m.dim() == 2 and m.shape[0] == m.shape[1] and _close(m.T, c.expected[i]) for m, c in zip(mine, cases))


def _unknown(out, cases, mine, i):
    """No known mistake fits: say whether it is a scaled copy, else where the largest error is (absolute
    and relative: 1e-5 looks like rounding, 99% of the reference does not), the hint, then the formula.
    Returns (words, graded): a graded assignment says where it is wrong, with no factor or reference value
    (either would be the fix)."""
    compare = (f"Hint: {out.hint}{FORMULA}" if out.hint else FORMULA.lstrip()) + f"{out.formula}."
    if all(torch.all(m == 0) for m in mine):
        return f"it is all zeros (a placeholder left in?). {compare}", "it is all zeros (a placeholder left in?)."
    refs = [c.expected[i] for c in cases]
    factors = [float((m * r).sum() / (r * r).sum()) for m, r in zip(mine, refs)]
    scaled = all(_close(m, f * r) for m, f, r in zip(mine, factors, refs))
    if scaled and all(math.isclose(f, factors[0], rel_tol=1e-6) for f in factors):
        return (f"it is {factors[0]:.4g} times the right answer on every input: a constant factor is off. {compare}",
                "it is a constant multiple of the right answer on every input: a constant factor is off.")
    # a single number is always some multiple of the right one: a factor that changes says nothing then
    if scaled and not all(r.numel() == 1 for r in refs):
        listed = ", ".join(f"x{f:.4g} for {c.note}" for f, c in zip(factors, cases))
        return (f"it is a multiple of the right answer, by a factor that changes with the sizes ({listed}): "
                f"a size-dependent factor such as 1/T or 1/sqrt(d_k) is off. {compare}",
                "it is a multiple of the right answer by a factor that changes with the sizes: a size-dependent "
                "factor is off.")
    n = next(n for n, (m, r) in enumerate(zip(mine, refs)) if not _close(m, r))
    error = (mine[n] - refs[n]).abs()
    index = _index(error == error.max())
    right = float(refs[n][index])
    relative = f" ({float(error.max()) / abs(right):.0%} of the reference there)" if right else ""
    where = f" at index {index}" if index else ""  # a single number has no index to name
    return (f"largest absolute error {float(error.max()):.3g}{relative}{where} on input {n + 1} of "
            f"{len(cases)} ({cases[n].note}): you returned {float(mine[n][index]):.6g}, the reference is "
            f"{right:.6g}. {compare}",
            f"it differs from the reference on input {n + 1} of {len(cases)} ({cases[n].note})"
            + (f", most{where}." if where else "."))


def _first_difference(out, cases, mine, i):
    """No known mistake fits a numbers answer: where it first differs from the reference; (words, graded),
    the graded words without the reference value."""
    n = next(n for n, (m, c) in enumerate(zip(mine, cases)) if not _close(m, c.expected[i]))
    right = cases[n].expected[i]
    index = tuple(int(j) for j in np.argwhere(~np.isclose(mine[n], right, rtol=RTOL, atol=ATOL, equal_nan=True))[0])
    at = f" at index {index}" if index else ""   # a number has no index to name
    where = f"on problem {n + 1} of {len(cases)} ({cases[n].note}) you returned {mine[n][index]:.6g}{at}"
    return (f"{where}, the reference is {right[index]:.6g}." + (f" Hint: {out.hint}" if out.hint else "")
            + f"{FORMULA}{out.formula}.", f"{where}, which differs from the reference.")


# ----------------------------------------------------------------------------- problems

def input_note(T, causal=None):
    """What a message says of a problem: "T=7, causal"."""
    return f"T={T}" + ("" if causal is None else ", causal" if causal else ", full attention")

