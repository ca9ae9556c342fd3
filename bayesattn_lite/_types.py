"""Types and tensor shapes declared in the signatures, checked at every call.

A public function says what it takes in its signature, with jaxtyping's shapes::

    @checked
    def scores(q: Float[Tensor, "*B Tq d_k"], k: Float[Tensor, "*B Tk d_k"], causal: bool = True): ...

``help(scores)`` shows the shapes, and ``checked`` has beartype check them at each call: the types,
the number of axes, and that an axis named twice (d_k above) has one size across the arguments.
A number's range is declared too, with ``typing.Annotated`` and a beartype validator::

    def train(steps: Whole(1) = 100, lr: Positive = 0.01, seed: Seed = 0, schedule: OneOf("constant", "cosine") = "constant"): ...

    Whole(low, high)    an int (numpy's and a 0-d tensor's too) in [low, high], either end optional
    Real(low, high)     a finite number in [low, high]; low_open/high_open make an end open
    Positive            a finite number > 0 (a learning rate, a variance)
    Seed                a random seed, an int in [0, 2**63); SeedBelow(limit) one in [0, limit)
    Seeds               one or more distinct seeds (a list, tuple or range), received as a tuple
    OneOf(*options)     one of the strings given (a schedule's name, an architecture)
    Distinct(items, one, counted, key=None)   a list or tuple whose items (or ``key(item)``) differ:
                        "names: expected distinct names (a name given twice would count one model twice)"
    Finite[Float[Tensor, "n d"]]   that array type, its float values all finite (no NaN, no inf)
    NonNegative[Int[Tensor, "n"]]  that array type, its values all >= 0 (positions, counts)

They accept and refuse what ``_validate.integer``, ``real``, ``positive``, ``seed``, ``distinct_seeds``
and ``choice`` do (a bool is never a number; NaN and inf are not finite), say so in the same words
("steps: expected an int >= 1, got 0"), and the function receives a Python int or float (JSON
cannot save numpy's), converted once in ``checked``. A frozen dataclass declares its fields the
same way and calls ``declared_fields(self)`` in its ``__post_init__``. What a type cannot say (rows
that sum to 1, a range that depends on another argument, the finite values of what is no argument)
stays a short check at the top of the function (``_validate``); so does a range checked in a
function a training loop calls every step, where a declaration would cost a check's 20 microseconds.

Where one comes from goes after the type in the message: a class of the package says it in
``_made_by`` ("what run_schedules returns"), another class in its annotation,
``Annotated[Axes, "fig, ax = plt.subplots()"]``.

beartype's own message is a page long (the value, the type, every parameter, the axis sizes);
``checked`` turns it into the package's one format, a ValueError::

    k: expected a float tensor of shape (*B, Tk, d_k) with d_k = 8 (as in q), got Tensor of shape
    (6, 5) and dtype torch.float32

Why jaxtyping with beartype (``benchmarks/type_checks.py`` measures the three candidates): beartype
checks every argument, shapes across arguments included, for about 30 microseconds a call; Colab
preinstalls it. typeguard 4 (Colab's) cannot read jaxtyping's shape strings at all, and pydantic's
``validate_call`` misses a size that two arguments must share and prints the tensor's values.
A training loop's step passes ``check=False`` (its data was checked once before the loop), which
skips the annotations too: ``benchmarks/type_checks.py`` times both.
"""

import contextlib
import dataclasses
import functools
import inspect
import math
import numbers
import re
import types
import typing

import numpy as np
import torch
from beartype import beartype
from beartype.vale import Is
from jaxtyping import AbstractArray, AbstractDtype, Bool, Float, Int, Shaped, TypeCheckError, jaxtyped
from torch import Tensor

from . import _validate

__all__ = ["Array", "Bool", "Distinct", "Finite", "Flag", "Float", "Int", "NonNegative", "OneOf", "Positive", "Real",
           "Seed", "SeedBelow", "Seeds", "Shaped", "Tensor", "TokenIds", "Whole", "checked", "declared_fields", "unchecked"]

Array = Tensor | np.ndarray   # where a numpy array is taken as well as a tensor: Float[Array, "n d"]


class TokenIds(AbstractDtype):
    """The integer dtypes an nn.Embedding looks up: TokenIds[Tensor, "B T"] for a model's tokens."""
    dtypes = ["int64", "int32"]


class _Declared(typing.NamedTuple):
    words: str       # for the message and help()
    test: object     # value -> bool
    convert: object  # value -> what the function receives (a Python int or float), or None: the value itself
    explain: object  # (name, value) -> raises the message where the words do not say enough, or None


_SCALARS = {}   # each validator below -> its _Declared


def _declared(words, test, convert=None, explain=None):
    """``Annotated[object, Is[test]]``, said in ``words`` (by help() too); the function receives
    ``convert(value)``, and ``explain(name, value)`` raises the message where words do not say enough."""
    validator = Is[test]
    validator.get_repr = words   # help(fn) shows "steps: Annotated[object, an int >= 1]"
    _SCALARS[validator] = _Declared(words, test, convert, explain)   # not in the Annotated: beartype refuses
    return typing.Annotated[object, validator]                      # other metadata beside its validators


def _flag(value):
    """A yes/no value as a Python bool: numpy's bool (what a comparison of arrays gives) and a 0-d
    bool tensor are one too."""
    if isinstance(value, np.bool_) or isinstance(value, Tensor) and value.dtype == torch.bool and value.ndim == 0:
        return bool(value)
    return value


Flag = _declared("True or False", lambda value: isinstance(value, bool), convert=_flag)   # a yes/no argument


def _declarations(hint):
    """The _Declared of each alternative of ``hint`` (``Whole(1) | None``: one), and whether None is one."""
    found = [_SCALARS[m] for h in _alternatives(hint) if typing.get_origin(h) is typing.Annotated
             for m in typing.get_args(h)[1:] if m in _SCALARS]
    return found, type(None) in _alternatives(hint)


def declared_fields(obj):
    """Check each field of a frozen dataclass declared with a type above (``steps: Whole(1) = 1000``),
    in order, and store it as the Python value its function would receive: its ``__post_init__``
    calls this, so that a bad field is named where the object is made, in the package's message."""
    for f in dataclasses.fields(obj):
        found, none_ok = _declarations(f.type)
        value = getattr(obj, f.name)
        if not found or (value is None and none_ok):
            continue
        d = found[0]
        if d.explain:
            d.explain(f.name, value)
        converted = d.convert(value) if d.convert else value
        if not d.test(converted):
            raise ValueError(f"{f.name}: expected {words(f.type)}, got {_validate.describe(value)}")
        object.__setattr__(obj, f.name, converted)


def _number(kind, within):
    """A test of ``within(number)`` on the Python number in a value (a numpy scalar, a 0-d tensor), and
    the conversion to ``kind`` (int: integers only, never a bool) that the function receives."""
    def number(value):
        n = _validate._scalar(value)
        return None if n is None or (kind is int and not isinstance(n, numbers.Integral)) else kind(n)

    def test(value):
        n = number(value)
        return n is not None and math.isfinite(n) and within(n)

    return test, lambda value: value if value is None or type(value) is kind or number(value) is None else number(value)


@functools.lru_cache(maxsize=None, typed=True)   # typed: Real(0, 1) and Real(0.0, 1.0) are said as written
def Whole(low=None, high=None):  # noqa: N802 (a type, spelt like one)
    """An int (a numpy integer or 0-d integer tensor too, never a bool) in [low, high], either end optional."""
    bounds = ([f">= {low}"] if low is not None else []) + ([f"<= {high}"] if high is not None else [])
    return _declared("an int" + (" " + " and ".join(bounds) if bounds else ""),
                     *_number(int, lambda n: (low is None or n >= low) and (high is None or n <= high)))


@functools.lru_cache(maxsize=None, typed=True)
def Real(low=None, high=None, low_open=False, high_open=False):  # noqa: N802
    """A finite real number in [low, high] (an end None is unbounded; ``low_open``/``high_open`` exclude it)."""
    if low is None and high is None:
        said = "a finite number"
    else:
        said = (f"a number in {'(' if low_open or low is None else '['}{'-inf' if low is None else low}, "
                f"{'inf' if high is None else high}{')' if high_open or high is None else ']'}")
    return _declared(said, *_number(float, lambda x: (low is None or (x > low if low_open else x >= low))
                                    and (high is None or (x < high if high_open else x <= high))))


Positive = _declared("a positive finite number", *_number(float, lambda x: x > 0))


@functools.lru_cache(maxsize=None, typed=True)
def SeedBelow(limit):  # noqa: N802
    """A random seed, an int in [0, limit): numpy's generators take < 2**32, a task's own seeds fewer."""
    return _declared(f"an int in [0, {'2**63' if limit == 2**63 else limit})", *_number(int, lambda n: 0 <= n < limit))


Seed = SeedBelow(2**63)


def _seeds(value):
    try:
        return _validate.distinct_seeds("seeds", value)
    except ValueError:
        return None


# One or more distinct seeds, received as a tuple of ints: a seed given twice would count one run twice.
Seeds = _declared("one or more distinct ints (e.g. [0, 1, 2])", lambda value: _seeds(value) is not None,
                  lambda value: _seeds(value) or value, _validate.distinct_seeds)


def OneOf(*options):  # noqa: N802
    """One of the strings ``options`` (a schedule's name, an optimizer's), or of one collection of them:
    ``OneOf(SCHEDULES)``, listed in its order if a list or tuple, else sorted (as ``_validate.choice``)."""
    if len(options) == 1 and not isinstance(options[0], str):
        options = options[0] if isinstance(options[0], (list, tuple)) else sorted(options[0])
    return _one_of(tuple(options))


@functools.lru_cache(maxsize=None, typed=True)
def _one_of(options):
    return _declared(f"one of {list(options)}", lambda value: isinstance(value, str) and value in options)


def _hashable(item):
    """``item`` as something a set holds: a dict or list by its contents, a numpy or 0-d torch number as a Python one."""
    if isinstance(item, dict):
        return tuple(sorted((repr(k), _hashable(v)) for k, v in item.items()))
    if isinstance(item, (list, tuple)):
        return tuple(_hashable(v) for v in item)
    if isinstance(item, (np.generic, Tensor, np.ndarray)) and getattr(item, "ndim", 0) == 0:
        return item.item()
    hash(item)
    return item


def _repeated(value, key):
    """The first item of ``value`` (a list, tuple, range or array) whose ``key`` came before, as a 1-tuple;
    () if none, or if ``value`` is not such a sequence (its own check says so)."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple, range, np.ndarray, Tensor)):
        return ()
    seen = set()
    for item in value:
        try:
            k = _hashable(key(item) if key else item)
        except Exception:  # noqa: BLE001 - an item the key cannot read: the function's own check names it
            return ()
        if k in seen:
            return (item,)
        seen.add(k)
    return ()


def Distinct(items, one, counted, key=None):  # noqa: N802
    """A list or tuple of ``items`` none given twice (by ``key(item)`` where given): ``Distinct("names", "a name",
    "model")`` says "distinct names (a name given twice would count one model twice)". Its type and items are
    the function's to check; this says only that none repeats."""
    said = f"distinct {items} ({one} given twice would count one {counted} twice)"

    def explain(name, value):
        twice = _repeated(value, key)
        if twice:
            raise ValueError(f"{name}: expected {said}, got {twice[0]!r} twice in {_validate.describe(value)}")

    return _declared(said, lambda value: not _repeated(value, key), explain=explain)


class _Check(typing.NamedTuple):
    test: object     # value -> bool (True for a value of another type: the annotation it wraps refuses that)
    explain: object  # (name, value) -> raises the message


_CHECKS = {}   # each validator of a wrapping annotation (Finite[...]) -> its _Check; said by the type it wraps


class _Wrapping:
    """``Finite[Float[Tensor, "n d"]]``: the type in brackets, whose values also pass ``test``; a value that
    fits the type but not the test gets ``explain(name, value)``'s message, any other the type's own."""

    def __init__(self, words, test, explain):
        self._validator = Is[test]
        self._validator.get_repr = words   # help(fn): "Annotated[Float[Tensor, 'n d'], finite values]"
        _CHECKS[self._validator] = _Check(test, explain)

    def __getitem__(self, hint):
        return typing.Annotated[hint, self._validator]


def _values(value):
    """A numpy array as a tensor (a view), anything else as it is."""
    return torch.from_numpy(value) if isinstance(value, np.ndarray) and value.dtype != object else value


def _negatives(name, value):
    bad = torch.as_tensor(value) < 0
    _validate.fail(name, "values >= 0", f"{int(bad.sum())} negative (the first at index "
                   f"{tuple(bad.nonzero()[0].tolist())})", described=True)


# Only finite values (NaN in must not become NaN out without a word): "x: expected finite values, got 1 NaN/inf ...".
Finite = _Wrapping("finite values", lambda value: not (
    isinstance(v := _values(value), Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())),
    lambda name, value: _validate.finite_values(name, torch.as_tensor(value)))
# Only values >= 0 (positions, counts): "positions: expected values >= 0, got 1 negative (the first at index (1,))".
NonNegative = _Wrapping("values >= 0", lambda value: not (
    isinstance(v := _values(value), Tensor) and v.numel() and not v.is_complex() and bool((v < 0).any())), _negatives)


def _conversions(signature):
    """{parameter: (its position or None, the conversion the function receives it through)} for
    those declared above: the body gets a Python int or float whatever kind of number came."""
    found = {}
    for i, (name, parameter) in enumerate(signature.parameters.items()):
        positional = parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        for hint in _alternatives(parameter.annotation):
            for meta in typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ():
                if meta in _SCALARS and _SCALARS[meta].convert:
                    found[name] = (i if positional else None, _SCALARS[meta].convert)
    return found


def _converted(conversions, args, kwargs):
    """``args`` and ``kwargs`` with each value ``conversions`` names converted; a value of another
    kind is left as it is, for the check to refuse."""
    args = list(args)
    for name, (i, convert) in conversions.items():
        if name in kwargs:
            kwargs[name] = convert(kwargs[name])
        elif i is not None and i < len(args):
            args[i] = convert(args[i])
    return args, kwargs


_DTYPE_WORDS = {"Float": "a float", "Int": "an integer", "Integer": "an integer", "Bool": "a bool",
                "TokenIds": "an int64 (torch.long) or int32"}
_CLASS_WORDS = {bool: "True or False", np.bool_: "True or False", str: "a str", int: "an int", float: "a number",
                type(None): "None", np.ndarray: "a numpy array"}


_UNCHECKED = [0]   # > 0 inside ``unchecked()``


@contextlib.contextmanager
def unchecked():
    """Within it (or on a function it decorates, ``@unchecked()``), checked functions skip their
    annotations (declared ranges too): for the package's own measurements inside a training loop, on
    data it made and checked once. The checks in the bodies (finite values) still run."""
    _UNCHECKED[0] += 1
    try:
        yield
    finally:
        _UNCHECKED[0] -= 1


def checked(fn):
    """``fn`` with its annotated arguments checked at each call (jaxtyping's shapes, by beartype); a
    mismatch raises ValueError in the package's format. ``fn.__wrapped__`` is the unchecked function,
    and a function with a ``check`` argument runs unchecked when called with ``check=False``.

    On a class (above ``@dataclass``), only the call is checked: a misspelt, missing or extra argument
    of the constructor is named, with the parameters it takes; field types are left to the class."""
    if inspect.isclass(fn):
        fn.__init__ = _spelled(fn.__init__)
        return fn
    typed = jaxtyped(typechecker=beartype)(fn)
    signature = inspect.signature(fn)
    skippable = "check" in signature.parameters
    conversions = _conversions(signature)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            given = args, kwargs   # what the message describes
            if conversions:   # a declared number as a Python one (one place, not a line in each body)
                args, kwargs = _converted(conversions, args, dict(kwargs))
            if _UNCHECKED[0] or (skippable and kwargs.get("check", True) is False):  # a loop's own step or measure
                return fn(*args, **kwargs)
            return typed(*args, **kwargs)
        except TypeCheckError as exc:
            name = re.search(r"typechecking parameter '(\w+)'", str(exc))
            if name is None:  # the return value or a nested call: the package's fault, not the caller's
                raise
            raise ValueError(_message(signature, name.group(1), *given, str(exc), fn.__globals__)) from None
        except TypeError:  # a misspelt, missing or extra argument named, checked or not
            error = _binding_error(fn, signature, args, kwargs)
            if error is None:
                raise
            raise error from None

    return call


def _spelled(fn):
    """``fn`` whose TypeError for a call that does not fit its signature is ``_binding_error``'s."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError:
            error = _binding_error(fn, signature, args, kwargs)
            if error is None:
                raise
            raise error from None

    return call


def _binding_error(fn, signature, args, kwargs):
    """Python's TypeError for a call that does not fit the signature, with the function's name, the
    parameter a misspelt keyword was near, and the parameters it takes; None if the call fits."""
    try:
        signature.bind(*args, **kwargs)
        return None
    except TypeError as exc:
        takes = [name for name in signature.parameters if name != "self"]   # a constructor's self is not passed
        unknown = [k for k in kwargs if k not in signature.parameters]
        near = _validate.near_name(unknown[0], takes) if unknown else None
        hint = f"; did you mean {near!r}?" if near else ""
        # a misspelt keyword first (the argument it was meant for is then missing too), unless **kwargs takes it
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        reason = f"got an unexpected keyword argument {unknown[0]!r}" if unknown and not takes_any else exc
        keyword_only = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
        if keyword_only:   # seed=0, not 0: say which
            takes[takes.index(keyword_only[0])] = f"and by keyword only: {keyword_only[0]}"
        name = fn.__qualname__.removesuffix(".__init__")
        return TypeError(f"{fn.__module__.removeprefix('bayesattn_lite.')}.{name}(): {reason}{hint} "
                         f"(it takes {', '.join(takes)})")


def _message(signature, name, args, kwargs, text, names):
    """The package's message for argument ``name``: what its annotation asks for, what came instead
    (``names``: the function's module globals, for an annotation written as a string, "Recipe")."""
    bound = signature.bind(*args, **kwargs)
    hint, value = signature.parameters[name].annotation, bound.arguments.get(name)
    if isinstance(hint, str):
        hint = eval(hint, names)  # noqa: S307 (the package's own annotation, a class it defines later)
    for check in [_CHECKS[m] for h in _alternatives(hint, unwrap=False) if typing.get_origin(h) is typing.Annotated
                  for m in typing.get_args(h)[1:] if m in _CHECKS]:
        if not check.test(value):   # Finite[...]: the type fits, a value is NaN
            try:
                check.explain(name, value)
            except ValueError as exc:
                return str(exc)
    for explain in [d.explain for d in _declarations(hint)[0] if d.explain]:
        try:   # Seeds: which seed is wrong, or that one is given twice
            explain(name, value)
        except ValueError as exc:
            return str(exc)
    expected = words(hint)
    arrays = [h for h in _alternatives(hint) if _is_array(h)]
    with jaxtyped("context"):   # a fresh record of axis sizes, not the caller's (a checked function calling this one)
        alone = any(isinstance(value, h) for h in arrays)
    if arrays:   # the sizes the arguments before it gave its axes: those that clash, if it fits alone
        axes = list(_argument_axes(signature, bound, names))   # read once, for the sizes and the hint below
        sizes = ({d: _size(s) for d, s in re.findall(r"^(\w+)=(.+)$", text.split("as follows.")[-1], re.M)}
                 or _sizes_before(axes, name))   # jaxtyping does not always list them
        own = _axes(arrays[0].dim_str, value.shape) if alone else {}
        known = {d: _source(signature, bound, name, d) for d in arrays[0].dim_str.split()
                 if d.lstrip("*") in sizes and own.get(d, sizes[d.lstrip("*")] + "?") != sizes[d.lstrip("*")]}
        known = {d: source for d, source in known.items() if source}   # not a size this argument set itself
        if known:
            expected += " with " + ", ".join(f"{d} = {sizes[d.lstrip('*')]} (as in {source})"
                                             for d, source in known.items())
            odd = [(d, source, _agreeing(signature, axes, name, d.lstrip("*"), own[d]))
                   for d, source in known.items() if d in own]
            hint = "; ".join(f"{', '.join(others)} {'has' if len(others) == 1 else 'have'} {d} = {own[d]} too: "
                             f"{source} may be the one to change" for d, source, others in odd if others)
            if hint:
                return f"{name}: expected {expected}, got {_validate.describe(value)} ({hint})"
    return f"{name}: expected {expected}, got {_validate.describe(value)}"


def _argument_axes(signature, bound, names):
    """(argument, {axis: size}) for each array argument whose shape fits its annotation on its own, in
    the signature's order."""
    for other, parameter in signature.parameters.items():
        value, hint = bound.arguments.get(other), parameter.annotation
        if isinstance(hint, str):
            hint = eval(hint, names)  # noqa: S307 (the package's own annotation)
        for h in (h for h in _alternatives(hint) if _is_array(h)):
            with jaxtyped("context"):
                fits = isinstance(value, h)
            if fits:
                yield other, {d.lstrip("*"): size for d, size in _axes(h.dim_str, value.shape).items()}
                break


def _sizes_before(argument_axes, name):
    """The axis sizes that the arguments before ``name`` give (``argument_axes``: ``_argument_axes``'s
    pairs), read from their shapes: jaxtyping's message lists them only on some calls (which depends on
    the order it tries a union's members in)."""
    sizes = {}
    for other, axes in argument_axes:
        if other == name:
            break
        for d, size in axes.items():
            sizes.setdefault(d, size)
    return sizes


def _agreeing(signature, argument_axes, name, dim, size):
    """The arguments after ``name`` whose axis ``dim`` has ``size``, the size ``name`` has
    (``argument_axes``: ``_argument_axes``'s pairs): where any does, the argument ``name`` was checked
    against may be the one to change."""
    after = list(signature.parameters)[list(signature.parameters).index(name) + 1:]
    return [other for other, axes in argument_axes if other in after and axes.get(dim) == size]


def _source(signature, bound, name, dim):
    """The first argument before ``name`` whose annotation names axis ``dim`` ("" if none)."""
    for other, parameter in signature.parameters.items():
        if other == name:
            break
        hints = [h for h in _alternatives(parameter.annotation) if _is_array(h)]
        if bound.arguments.get(other) is not None and any(dim in h.dim_str.split() for h in hints):
            return other
    return ""


def words(hint):
    """An annotation in words: ``Float[Tensor, "*B T d"]`` is "a float tensor of shape (*B, T, d)",
    and ``Float[Tensor | np.ndarray, "n"]`` "a float tensor or array of shape (n,)"."""
    hints = _alternatives(hint)
    arrays = {}   # (dtype, shape) -> kinds: a tensor and an array of one shape are said once
    for h in hints:
        if _is_array(h):
            kind = "array" if h.array_type.__module__.startswith("numpy") else "tensor"
            arrays.setdefault((h.dtype.__name__, h.dim_str), []).append(kind)
    said = [_array_words(dtype, dims, " or ".join(kinds)) for (dtype, dims), kinds in arrays.items()]
    return " or ".join(dict.fromkeys(said + [_word(h) for h in hints if not _is_array(h)]))


def _array_words(dtype, dim_str, kind):
    dims = dim_str.split()
    one = len(dims) == 1 and not dims[0].startswith("*")
    shape = f"of shape ({', '.join(dims)}{',' if one else ''})" if dims else "with no axes (0-d)"
    article = _DTYPE_WORDS.get(dtype) or ("an" if kind.startswith("a") else "a")
    return f"{article} {kind} {shape}"


def _word(hint):
    if hint in _CLASS_WORDS:
        return _CLASS_WORDS[hint]
    if typing.get_origin(hint) is typing.Annotated:   # Annotated[Axes, "fig, ax = plt.subplots()"]: where one comes from
        base, note = typing.get_args(hint)[:2]
        if note in _SCALARS:   # a number's range: Whole(1) is "an int >= 1"
            return _SCALARS[note].words
        return f"{words(base)} ({note})"
    origin = typing.get_origin(hint) or hint
    if origin in (dict, typing.Mapping) or getattr(origin, "__name__", "") == "Mapping":
        args = typing.get_args(hint)
        return f"a mapping (a dict) of {words(args[1]).removeprefix('a ').removeprefix('an ')} values" if args \
            else "a mapping (a dict)"
    if getattr(origin, "__name__", "") == "Sequence" and typing.get_args(hint):
        return f"a list, each {words(typing.get_args(hint)[0])}"
    if callable(hint) and getattr(origin, "__name__", "") == "Callable":
        return "a function"
    module = getattr(origin, "__module__", "")
    if module.startswith("bayesattn_lite."):   # the package's own classes by the name a user imports them,
        name = f"{module.removeprefix('bayesattn_lite.')}.{origin.__qualname__}"   # and where one comes from
        made_by = f" ({origin._made_by})" if hasattr(origin, "_made_by") else ""
        return f"{'an' if name[0] in 'aeiou' else 'a'} {name}{made_by}"
    if module.startswith("torch.nn"):
        return f"a torch.nn.{origin.__qualname__}"
    if module.startswith("torch"):
        return f"a torch.{origin.__qualname__}"
    if module.startswith("matplotlib"):
        return f"a matplotlib {origin.__name__.removesuffix('Base')}"
    return f"a {getattr(origin, '__name__', str(hint))}"


def _alternatives(hint, unwrap=True):
    """The members of a Union (``X | None`` too), or the hint itself; with ``unwrap``, the type a
    ``Finite[...]`` wraps in its place (said and sized as that type)."""
    hints = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if not unwrap:
        return hints
    return tuple(a for h in hints for a in (
        _alternatives(typing.get_args(h)[0]) if typing.get_origin(h) is typing.Annotated
        and any(m in _CHECKS for m in typing.get_args(h)[1:]) else (h,)))


def _is_array(hint):
    return isinstance(hint, type) and issubclass(hint, AbstractArray)


def _axes(dim_str, shape):
    """Each named axis of ``dim_str`` with its size in ``shape`` ("(2, 3)" for a *-group), as ``_size`` writes it."""
    dims = dim_str.split()
    star = next((i for i, d in enumerate(dims) if d.startswith("*")), None)
    sizes = {}
    for i, d in enumerate(dims):
        if star is None or i < star:
            sizes[d] = str(shape[i])
        elif i > star:
            sizes[d] = str(shape[i - len(dims)])
        else:
            group = tuple(shape[star: len(shape) - (len(dims) - star - 1)])
            sizes[d] = _size(f"torch.Size({list(group)})")
    return {d: s for d, s in sizes.items() if not d.isdigit() and d not in ("...", "_")}


def _size(text):
    """jaxtyping's record of an axis size: "8", or "torch.Size([2])" for a *-axis group."""
    inner = re.fullmatch(r"torch\.Size\(\[(.*)\]\)", text.strip())
    return f"({inner.group(1)}{',' if inner.group(1) and ',' not in inner.group(1) else ''})" if inner else text.strip()
