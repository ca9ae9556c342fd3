"""Input checks shared by every public function, with one message format:

    ValueError: lr: expected a positive finite number, got nan

A scalar may be a Python number, a numpy scalar or a 0-d tensor or array (what ``x.sum()`` and
``np.int64(3)`` give); a bool is never a number. Tensors are checked for shape, dtype and
finiteness where NaN or inf would otherwise flow silently into a result.
"""

import dataclasses
import difflib
import math
import numbers
from collections.abc import Mapping

import numpy as np
import torch


def fail(what, expected, given, described=False):
    """Raise the package's one kind of input error: what was expected, and what came instead
    (``given`` is the bad value, or with ``described`` already a description of it in words)."""
    raise ValueError(f"{what}: expected {expected}, got {given if described else describe(given)}")


def describe(value):
    """A short description of a bad value for a message: its repr, or its shape for arrays."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0:
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, str):
        return repr(value)
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def _scalar(value):
    """The Python number inside ``value`` (numpy scalar, 0-d tensor or array), or None if none."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if value.ndim != 0:
            return None
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return value


def integer(what, value, minimum=None, maximum=None):
    """An int (numpy and 0-d integers too) in [minimum, maximum], returned as a Python int."""
    number = _scalar(value)
    whole = isinstance(number, numbers.Integral)
    in_range = whole and (minimum is None or number >= minimum) and (maximum is None or number <= maximum)
    if not in_range:
        bounds = ([f">= {minimum}"] if minimum is not None else []) + ([f"<= {maximum}"] if maximum is not None else [])
        fail(what, "an int" + (" " + " and ".join(bounds) if bounds else ""), value)
    return int(number)


def seed(what, value, limit=2**63):
    """A random seed: an int in [0, limit)."""
    number = _scalar(value)
    if not isinstance(number, numbers.Integral) or not 0 <= number < limit:
        fail(what, f"an int in [0, {'2**63' if limit == 2**63 else limit})", value)
    return int(number)


def number_array(what, value, expected="a tensor, array or list of numbers"):
    """``value`` (a tensor, numpy array or nested list of numbers) as a float64 numpy array; text, None
    and what numpy cannot read as numbers are refused (``expected`` words the message)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().to("cpu", torch.float64).numpy()
    try:
        array = None if value is None or isinstance(value, (str, bytes)) else np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        array = None
    if array is None:
        fail(what, expected, value)
    return array


def distinct_seeds(what, value):
    """One or more distinct seeds, as a tuple of ints: a seed given twice would count one run twice."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        fail(what, "a list or tuple of distinct ints (e.g. [0, 1, 2])", value)
    seeds = tuple(seed(f"{what}[{i}]", s) for i, s in enumerate(value))
    if not seeds or len(set(seeds)) != len(seeds):
        fail(what, "one or more distinct ints (a seed given twice would count one run twice)", value)
    return seeds


def real(what, value, low=None, high=None, low_open=False, high_open=False):
    """A finite real number in the interval given (bounds optional), returned as a Python float."""
    number = _scalar(value)
    ok = number is not None and math.isfinite(number)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if not ok:
        if low is None and high is None:
            expected = "a finite number"
        else:
            lo = "-inf" if low is None else low
            hi = "inf" if high is None else high
            expected = f"a number in {'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
        fail(what, expected, value)
    return float(number)


def positive(what, value):
    """A finite number > 0 (a learning rate, a variance, a step size)."""
    number = _scalar(value)
    if number is None or not math.isfinite(number) or number <= 0:
        fail(what, "a positive finite number", value)
    return float(number)


def choice(what, value, options):
    """One of ``options`` (names of schedules, architectures, optimizers, ...)."""
    if not isinstance(value, str) or value not in options:
        fail(what, f"one of {sorted(options) if not isinstance(options, (list, tuple)) else list(options)}", value)
    return value


def tensor(what, value, dims=None, floating=False, finite=True, convert=True):
    """A torch tensor (numpy arrays are converted when ``convert``) with ``dims`` dimensions
    (an int, a tuple of allowed counts, or None), a float dtype when ``floating``, and only
    finite entries when ``finite`` (NaN in must not become NaN out without a word)."""
    if isinstance(value, np.ndarray) and convert:
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        fail(what, "a torch.Tensor" + (" or numpy array" if convert else ""), type(value).__name__)
    allowed = (dims,) if isinstance(dims, int) else dims
    if allowed is not None and value.dim() not in allowed:
        fail(what, f"{' or '.join(str(d) for d in allowed)} dimension(s)", value)
    if floating and not value.is_floating_point():
        fail(f"{what}.dtype", "a floating-point dtype (torch.float32 or torch.float64)", value.dtype)
    if finite:
        finite_values(what, value)
    return value


def finite_values(what, value):
    """Raise when a float tensor holds NaN or inf, saying how many and where the first one is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
        bad = ~torch.isfinite(value)
        if bad.any():
            first = tuple(int(i) for i in bad.nonzero()[0].tolist())
            fail(what, "finite values", f"{int(bad.sum())} NaN/inf entries (the first at index {first})", described=True)
    return value


def boolean(what, value):
    """A bool (numpy's too), returned as a Python bool: a string such as "no" is not a flag."""
    if not isinstance(value, (bool, np.bool_)):
        fail(what, "True or False", value)
    return bool(value)


def float_dtype(what, value):
    """A floating-point torch dtype: an integer or bool dtype would truncate a float computation."""
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        fail(what, "a floating-point torch dtype (torch.float32 or torch.float64)", value)
    return value


def device(what, value):
    """A torch.device this machine has (None is left to the caller); cuda without CUDA is refused."""
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError, ValueError) as exc:
        fail(what, "None, 'cpu', 'cuda' or another device torch knows", f"{value!r} ({exc})", described=True)
    if dev.type == "cuda" and not torch.cuda.is_available():
        fail(what, "a device this machine has", f"'{dev}' but CUDA is not available; use device=None or 'cpu'",
             described=True)
    return dev


def function(what, value, expected, n_args=None):
    """A callable; ``expected`` says what it is called with, e.g. "a function f(tensor) -> number".
    With ``n_args``, it must take that many positional arguments (checked before it is called)."""
    import inspect

    if not callable(value):
        fail(what, expected, value)
    if n_args is not None:
        try:
            signature = inspect.signature(value)
        except (TypeError, ValueError):   # a builtin or a C function: nothing to read
            return value
        try:
            signature.bind(*[None] * n_args)
        except TypeError:
            fail(what, expected, f"a function {getattr(value, '__name__', '')}{signature}", described=True)
    return value


def step_list(what, value, minimum=0):
    """Steps: one int, or a non-empty strictly increasing sequence of ints (a list, range or 1-D
    array), each >= ``minimum``; returned as a list of Python ints."""
    if isinstance(value, (str, bytes, set, frozenset, dict)) or value is None:
        fail(what, f"an int or an increasing list of ints >= {minimum}", value)
    if _scalar(value) is not None:
        return [integer(what, value, minimum)]
    try:
        items = list(value)
    except TypeError:
        fail(what, f"an int or an increasing list of ints >= {minimum}", value)
    if not items:
        fail(what, "at least one step", value)
    steps = [integer(f"{what}[{i}]", s, minimum) for i, s in enumerate(items)]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        fail(what, "strictly increasing steps", value)
    return steps


def labels(what, value, n_classes, shape=None):
    """Class indices: an integer tensor (not float, not bool) of ``shape`` with values in [0, n_classes)."""
    if not isinstance(value, torch.Tensor):
        fail(what, "an integer torch.Tensor of class indices", type(value).__name__, described=True)
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        fail(f"{what}.dtype", "an integer dtype (class indices, torch.long)", value.dtype)
    if shape is not None and tuple(value.shape) != tuple(shape):
        fail(f"{what}.shape", f"{tuple(shape)}", tuple(value.shape))
    if value.numel() and (int(value.min()) < 0 or int(value.max()) >= n_classes):
        fail(what, f"class indices in [0, {n_classes - 1}]",
             f"values from {int(value.min())} to {int(value.max())}", described=True)
    return value


def shape(what, value, expected, description="shape"):
    """A tensor or array of exactly the shape ``expected``. ``description`` says what that shape is
    (e.g. "the shape of alpha"), so the message names what the value has to match."""
    expected = tuple(expected)
    if tuple(value.shape) != expected:
        fail(what, f"{description} {expected}", tuple(value.shape))
    return value


def same_shape(what, a, b):
    """Two tensors or arrays of one shape (``what`` names both, e.g. "before, after"): an elementwise
    difference would otherwise broadcast silently or fail deep inside torch."""
    if tuple(a.shape) != tuple(b.shape):
        fail(what, "the same shape", f"{tuple(a.shape)} and {tuple(b.shape)}", described=True)
    return a, b


def matrix(what, value, min_rows=1):
    """A 2-D tensor or array of n >= ``min_rows`` rows (points, keys): statistics over the rows
    (a spread, pairwise cosines) need at least that many."""
    if value.ndim != 2 or value.shape[0] < min_rows:
        fail(what, f"shape (n >= {min_rows}, d)", tuple(value.shape))
    return value


def distributions(what, probs, dim=-1, sum_tol=1e-3, entry_tol=1e-6, expected=None):
    """Probabilities along ``dim``: entries in [0, 1] (up to ``entry_tol``) that sum to 1 (up to
    ``sum_tol``), or all-zero rows, which stand for positions without a distribution (a wind tunnel's
    unscored ones, a query that sees no key). ``expected`` words the message for the caller."""
    sums = probs.sum(dim)
    if probs.numel() and ((probs < 0).any() or (probs > 1 + entry_tol).any()
                          or (((sums - 1).abs() > sum_tol) & (sums != 0)).any()):
        got = (f"entries from {probs.min().item():.4g} to {probs.max().item():.4g}"   # the entry that is wrong,
               if (probs < 0).any() or (probs > 1 + entry_tol).any() else                 # else the sums
               f"sums from {sums.min().item():.4g} to {sums.max().item():.4g}")
        fail(what, expected or f"probability distributions along dim {dim} (entries in [0, 1] summing to 1)",
             got, described=True)
    return probs


def record(what, value, keys, made_by):
    """A dict holding ``keys``, as ``made_by`` returns it (a result of another kind, or None, is named)."""
    if not isinstance(value, dict):
        fail(what, f"the dict {made_by} returns", f"a {type(value).__name__}", described=True)
    missing = [k for k in keys if k not in value]
    if missing:
        fail(what, f"the dict {made_by} returns (with {', '.join(map(repr, keys))})", f"a dict without {missing}",
             described=True)
    return value


def near_name(name, names):
    """The name in ``names`` nearest ``name`` ('W_o' -> 'W_O', 'k' -> 'K', 'sed' -> 'seed'), or None."""
    lower = {str(n).lower(): n for n in names}
    near = difflib.get_close_matches(str(name).lower(), lower, n=1)
    return lower[near[0]] if near else None


def exact_keys(what, value, keys):
    """A mapping with exactly ``keys``: a missing key, or an unknown one (a typo such as 'W_o', which
    would otherwise be ignored beside the real 'W_O'), is named."""
    if not isinstance(value, Mapping):
        fail(what, f"a mapping with keys {list(keys)}", value)
    missing, unknown = [k for k in keys if k not in value], [k for k in value if k not in keys]
    if missing or unknown:
        near = [f"{k!r} (did you mean {m!r}?)" if (m := near_name(k, keys)) else repr(k) for k in unknown]
        fail(what, f"a mapping with keys {list(keys)}", type(value).__name__ + (f" missing {missing}" if missing else "")
             + (" and" if missing and unknown else "") + (f" with unknown keys {', '.join(near)}" if unknown else ""),
             described=True)
    return value


def replaced(config, **changes):
    """``dataclasses.replace(config, **changes)``, with an unknown field named beside the known ones."""
    known = [f.name for f in dataclasses.fields(config)]
    unknown = [k for k in changes if k not in known]
    if unknown:
        fail(", ".join(unknown), f"a field of {type(config).__name__}: one of {known}", "an unknown name", described=True)
    return dataclasses.replace(config, **changes)


def figsize(what, value):
    """A figure size: (width, height) in inches, two positive numbers."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        fail(what, "(width, height) in inches, e.g. (12, 4)", value)
    return tuple(positive(f"{what}[{i}]", v) for i, v in enumerate(value))


def folder(what, value):
    """None (the package's own folder) or a folder path (a str or os.PathLike), as a Path."""
    import os
    from pathlib import Path

    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        fail(what, "None or a folder path (a str or pathlib.Path)", value)
    return Path(value)


def file_path(what, path):
    """A file path: a str or os.PathLike (pathlib.Path), not another kind of value."""
    import os

    if not isinstance(path, (str, os.PathLike)):
        fail(what, "a file path (str or os.PathLike)", path)
    return path


def writable_path(what, path):
    """A file path that can be written: a str or os.PathLike, not a directory, in a folder that
    exists or can be made and that this process may write to. Checked before any work starts."""
    import os

    path = os.fspath(file_path(what, path))
    if os.path.isdir(path):
        fail(what, "a file path that can be written", f"{path!r}, which is a directory", described=True)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        fail(what, "a file path that can be written", f"{path!r}: its folder cannot be made ({exc.strerror or exc})",
             described=True)
    if not os.access(folder, os.W_OK):
        fail(what, "a file path that can be written", f"{path!r}: its folder {folder!r} is not writable", described=True)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        fail(what, "a file path that can be written", f"{path!r}: the file is not writable", described=True)
    return path
