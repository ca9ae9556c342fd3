"""What both training loops (``train.train`` and ``batched.train``) share: atomic checkpoints
that say which run wrote them, the progress bar, and saving on Ctrl-C.

A checkpoint is a dict saved with ``torch.save``. Beside the loop's own state it holds ``kind``
(which loop wrote it) and ``fingerprint`` (a short hash of what defines the run: model, data,
recipe), so a file from another loop, another model or another recipe is refused with a message
that names the file, what was expected and what the file holds, instead of resuming silently.
"""

import collections
import contextlib
import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
from tqdm.auto import tqdm

from . import _validate
from ._types import Flag, Whole, checked


class CheckpointMismatch(ValueError):
    """A checkpoint that cannot be resumed into this run (damaged, another loop, another run)."""


class DamagedFile(ValueError):
    """A record, a saved run or a weights file that cannot be read as what it should be."""


def damaged(path, what, why, advice):
    """Raise DamagedFile: the file at ``path`` should hold ``what`` but ``why``; ``advice`` says what to do."""
    if Path(path).is_dir():   # not a damaged file: the wrong path, and "train it again" would not help
        raise DamagedFile(f"{path}: expected the file of {what}, got a folder")
    if not Path(path).exists():   # not damaged either: missing
        raise DamagedFile(f"{path}: expected the file of {what}, got no file there: {advice}")
    raise DamagedFile(f"{path}: expected {what}, but {why}; it may be damaged or another kind of file: {advice}")


def _key_names(what, value):
    """A list or tuple of key names: a string would be read as its letters, and the file blamed."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) for k in value):
        _validate.fail(what, "a tuple of key names, e.g. ('model',)", value)


def _no_constant(name):
    """json's hook for NaN, Infinity and -Infinity, which no record holds (JSON itself has no such numbers)."""
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path, what, keys=(), advice="delete it and train it again"):
    """The JSON object (a dict holding ``keys``) in the file at ``path``; DamagedFile naming the file,
    what it should hold and ``advice`` when it cannot be read as one."""
    _validate.file_path("path", path)
    _key_names("keys", keys)
    try:
        data = json.loads(Path(path).read_text(), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:   # JSONDecodeError is a ValueError
        damaged(path, what, f"it cannot be read ({type(exc).__name__}: {str(exc)[:100]})", advice)
    missing = [k for k in keys if k not in data] if isinstance(data, dict) else list(keys)
    if not isinstance(data, dict) or missing:
        damaged(path, what, f"it holds {type(data).__name__ if not isinstance(data, dict) else 'a dict'}"
                            f"{f' without {missing}' if missing and isinstance(data, dict) else ''}", advice)
    return data


def read_npz(path, what, advice="delete it and train it again"):
    """Every array of the .npz file at ``path`` (with ``meta``, a JSON dict, decoded), as a dict."""
    _validate.file_path("path", path)
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        arrays["meta"] = json.loads(str(arrays["meta"]))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        damaged(path, what, f"it cannot be read ({type(exc).__name__}: {str(exc)[:100]})", advice)
    if not isinstance(arrays["meta"], dict):
        damaged(path, what, "its meta is not a dict", advice)
    return arrays


@checked
def load_weights(model: Annotated[torch.nn.Module, "to load the weights into"], path, what,
                 advice="delete it and train it again", transform=None):
    """``model`` with the state dict saved at ``path`` (``transform`` maps what the file holds to the
    state dict); DamagedFile when the file cannot be read or its weights do not fit the model."""
    _validate.file_path("path", path)
    if transform is not None:
        _validate.function("transform", transform, "None or a function: what the file holds -> a state dict")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        state = transform(saved) if transform else saved
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        damaged(path, what, f"it cannot be read as one ({type(exc).__name__}: {str(exc)[:100]})", advice)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:   # missing or unexpected keys, other shapes
        lines = [line.strip() for line in str(exc).strip().splitlines()]
        detail = (lines[1] if len(lines) > 1 else lines[0])[:200]   # the first missing key or size mismatch
        damaged(path, what, f"its weights do not fit a {type(model).__name__} of these sizes ({detail})", advice)
    return model


def fingerprint(*parts):
    """A 16-hex-digit hash of tensors and JSON-able values: equal inputs give equal fingerprints."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, torch.Tensor):
            h.update(part.detach().to("cpu").contiguous().numpy().tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=_as_text).encode())
    return h.hexdigest()[:16]


def _as_text(value):
    """What json cannot write, as text; an object whose text is only its memory address would give
    equal runs different fingerprints, so it is refused."""
    text = str(value)
    if type(value).__repr__ is object.__repr__ and type(value).__str__ is object.__str__ or " at 0x" in text:
        _validate.fail("parts", "tensors and JSON-able values (numbers, strings, lists, dicts)", value)
    return text


_LEAVES = (bool, int, float, complex, str, bytes, bytearray, type(None), torch.device)
_CONTAINERS = (dict, collections.OrderedDict, list, tuple, set, torch.Size)


def _unreadable(state, where="state"):
    """The first place in ``state`` that ``load`` (torch.load with weights_only) cannot read back, or None."""
    kind = type(state)
    if kind in (dict, collections.OrderedDict):
        children = [(k, where) for k in state] + [(v, f"{where}[{k!r}]") for k, v in state.items()]
    elif kind in _CONTAINERS:
        children = [(v, f"{where}[{i}]") for i, v in enumerate(state)]
    elif isinstance(state, (torch.Tensor, torch.dtype)) or kind in _LEAVES:
        return None
    else:
        return f"a {kind.__name__} at {where}"
    return next((found for child, at in children if (found := _unreadable(child, at))), None)


def save(path, state):
    """Write to a temp file beside ``path``, then rename: a crash mid-save keeps the old checkpoint."""
    path = _validate.writable_path("path", path)
    if not os.path.basename(path):
        _validate.fail("path", "a file path with a file name", path)
    problem = _unreadable(state) if isinstance(state, dict) else f"a {type(state).__name__}"
    if problem:
        _validate.fail("state", "a dict of tensors, numbers, strings, lists and dicts (what load reads back)",
                       problem, described=True)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pt")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise


def load(path, kind, device="cpu", required=()):
    """The checkpoint at ``path`` if it is a readable checkpoint of ``kind`` holding ``required``
    keys; otherwise CheckpointMismatch saying why and what to do."""
    advice = "delete it, choose another checkpoint_path, or pass resume=False"
    _validate.file_path("path", path)   # not a number or None, which "cannot be read; it may be damaged" would blame
    _key_names("required", required)
    if device is not None:
        device = _validate.device("device", device)
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise CheckpointMismatch(f"checkpoint {path}: expected a checkpoint written by bayesattn_lite, but it "
                                 f"cannot be read ({type(exc).__name__}: {str(exc)[:120]}); it may be damaged "
                                 f"or another kind of file: {advice}") from exc
    if not isinstance(ckpt, dict) or ckpt.get("kind") != kind or not all(k in ckpt for k in required):
        found = ckpt.get("kind", "a dict without 'kind'") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointMismatch(f"checkpoint {path}: expected a checkpoint of {kind} with {list(required)}, "
                                 f"got {found!s}: {advice}")
    return ckpt


def refuse(path, expected_fingerprint, ckpt, differences):
    """Raise CheckpointMismatch when the run that wrote ``ckpt`` differs from this one."""
    _validate.record("ckpt", ckpt, (), "checkpoints.load")
    if isinstance(differences, str):   # one string would be joined letter by letter
        _validate.fail("differences", "a list of what differs, e.g. ['lr: 0.1 here, 0.01 in the checkpoint']",
                       differences)
    if differences:
        raise CheckpointMismatch(
            f"checkpoint {path}: expected a checkpoint of this run (fingerprint {expected_fingerprint}), but it "
            f"was written by another run (its fingerprint {ckpt.get('fingerprint')}): "
            + "; ".join(differences) + ". Resuming would mix two "
            "runs: train with the checkpoint's settings, or delete it, choose another checkpoint_path, "
            "or pass resume=False")


@checked
def progress_bar(start: Whole(0), steps, desc, progress: Flag = True):
    """A tqdm bar over range(start, steps); BAYESATTN_PROGRESS=0 silences every bar (CI, scripts)."""
    steps = _validate.integer("steps", steps, start)
    show = progress and os.environ.get("BAYESATTN_PROGRESS", "1") != "0"
    return tqdm(range(start, steps), desc=desc, initial=start, total=steps, disable=not show, dynamic_ncols=True)


@contextlib.contextmanager
@checked
def saved_on_interrupt(path, save_now: Callable, done: Callable):
    """On Ctrl-C inside the block, call ``save_now()`` (when there is a ``path``), say where the run
    stopped (``done()`` gives the step) and re-raise, so the user can resume from there."""
    try:
        yield
    except KeyboardInterrupt:
        if path:
            save_now()
            print(f"\ninterrupted: saved step {done()} to {path}; run again to resume")
        raise
