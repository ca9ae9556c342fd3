"""The autograder: run a submitted notebook in a sandbox, decide each question in the grader, write reports.

    python -m bayesattn_lite.instructor.grading SUBMISSION.ipynb --report REPORT.json      # one submission
    python -m bayesattn_lite.instructor.grading DIR --assignment ID --csv grades.csv [--reports DIR2]  # every .ipynb in DIR
        [--jobs 2] [--course course.toml] [--submitted-times times.csv | --late-from-mtime]
        [--manual manual.csv] [--release feedback/] [--roster roster.csv --canvas-csv import.csv --canvas-column C]
    python -m bayesattn_lite.instructor.grading --reports DIR2 --csv grades.csv --manual manual.csv --release feedback/
    python -m bayesattn_lite.instructor.grading --regrade DIR2/one.json --csv grades.csv
    python -m bayesattn_lite.instructor.grading --gradescope-bundle autograder.zip --assignment ps1_derivations
    options: --timeout 60 (s per cell)  --notebook-timeout 900  --memory 4096 (MiB)  --max-output 16 (MiB)
             --assignment ID  --folder INSTRUCTOR_FOLDER  --self-test (grade instructor versions)
             --no-sandbox (trusted notebooks only: no bubblewrap)

What it does, for each submission:

1. reads the file as untrusted data (never writes it; never through a link, never a pipe; its size and
   its number of JSON values bounded before it is parsed, its cells' types checked): a file that is not
   a notebook of its own gets a report saying so;
2. finds the assignment (``--assignment``, which a folder needs: one assignment per folder, decided by
   the instructor; for one notebook without it, the notebook metadata ``bayesattn_lite.assignment``, else
   an assignment id anywhere in the file name), checks that the notebook has the assignment's question
   cells, and rejects an instructor version (metadata ``version: instructor``, cells tagged ``instructor``
   or solution markers) unless ``--self-test``;
3. executes the code cells in a fresh kernel inside a bubblewrap sandbox (``bayesattn_lite.instructor._sandbox``:
   new user, mount, PID and network namespaces, as root or not; a file system of Python, the system's
   libraries and a temporary folder, nothing else; memory, processes and CPU bounded for the whole
   sandbox by a control group of its own, its files by a file system of a fixed size; time and output
   counted by the grader, every frame of every message); a cell that
   runs too long is interrupted, and a kernel that does not stop is ended with everything it started.
   A kernel that dies is replaced (up to ``MAX_RESTARTS`` times) by a fresh one that runs the notebook
   again without the cell that killed it, so one cell cannot zero the other questions. The notebook as
   it ran, outputs included, is kept beside the report. Where bubblewrap cannot start, the grader
   refuses and says how to fix it; ``--no-sandbox`` grades trusted notebooks without one and says so;
4. decides each checked question **in the grader's own process**: the ``bayesattn_lite.checks``
   function is called here, on stand-ins for the learner's objects, with inputs drawn from a fresh
   random seed offset for each submission (``checks._engine.SEED_OFFSET``, recorded in the report so
   that ``--regrade`` replays it). Calling a stand-in sends the arguments to the kernel as data
   (numbers, arrays), runs the learner's function there and brings the result back as data, rebuilt
   into plain tensors; a value (a string, a dict of numbers) is fetched the same way. The notebook
   cannot reach the check, the comparison or the report, and nothing it prints is read (its
   ``bayesattn_lite.checks`` is a stand-in: the checks' references stay here). A failed check earns the
   partial credit the course configuration gives (``course.toml``: per right output, per named mistake);
   in graded mode its feedback names the mistake without the reference formula;
5. a written answer (``Question.check is None``) is reported with its rubric and the learner's text
   (the Markdown cells tagged ``answer-<id>`` and any Markdown cells the learner added below them),
   points empty until the instructor's manual-points file gives them;
6. writes REPORT.json and REPORT.md (for the learner); in a batch, one report per submission and a
   gradebook CSV, whatever any submission did; then merges the manual points, applies the late policy,
   writes the feedback and the LMS files (``release``, ``lms``).

Grading runs in workers (``--jobs``, one by default): processes of their own, each bounded in memory
(``--grader-memory``) and time, so that what a submission makes the grader's side cost stops at its worker;
such a submission gets 0 with the reason (status "stopped") and the batch goes on in a fresh worker.
A failure of the grader's own (a sandbox that does not start, a full disk) is tried once more, then
reported as "not graded" with its reason: never a 0 of the student's.

Exit status 0 when every submission was graded and the reports written; 1 when some could not be
graded (the grader failed on them: each still has a report and a row, and the count is printed); 2
when the reports could not be written (bad arguments, an unwritable path) or no sandbox can start.
"""

import argparse
import ast
import collections
import concurrent.futures
import contextlib
import csv
import faulthandler
import functools
import hashlib
import json
import math
import os
import queue
import re
import resource
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from ..checks import _engine as check_engine
from . import _cgroup, _sandbox, assignments, variants
from . import course as _course
from .release import (NOT_GRADED, _write_new, gradebook_rows, gradescope_results,  # noqa: F401 - the grader's names
                      markdown, points_number, summary_line, total, write_gradebook, write_report)

DEFAULT_TIMEOUT = 60  # seconds per cell (and per call of a learner's function by a check)
DEFAULT_NOTEBOOK_TIMEOUT = 900  # seconds for the whole submission, checks included
DEFAULT_MEMORY = 4096  # MiB of address space for the kernel
DEFAULT_MAX_OUTPUT = 16  # MiB the notebook may print before its kernel is killed
MAX_NOTEBOOK = 20 * 2 ** 20  # bytes: a larger file is not executed
MAX_CELLS = 2000  # cells: a notebook with more is not executed (the problem sets have about 30)
MAX_JSON_VALUES = 200_000  # JSON values in one file, counted before it is parsed (a problem set has ~3,000)
MAX_READ_CELL = assignments.MAX_CELL  # characters: a larger code cell still runs, but the grader does not parse it
MAX_ANSWER_TEXT = 20000  # characters of a written answer kept in the report
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # bayesattn_lite/, of which this is instructor/

# What the kernel's copy of the package leaves out: the grader and the problem sets' registry (rubrics,
# solutions' paths), the checks (their reference computations), and the shipped models, which no
# problem set loads (copying their 8.8 MB cost 1.35 s per submission, a quarter of a class's grading time).
KERNEL_LEAVES_OUT = ("instructor", "checks", "pretrained")

# What the kernel imports as bayesattn_lite.checks while a submission is graded: the notebook's own check
# cells still run, but the checks and the reference computations inside them stay in the grader.
KERNEL_CHECKS = '''"""Stand-in for bayesattn_lite.checks during grading: the grader runs the real checks itself."""


class CheckResult:
    def __init__(self, name, passed, message):
        self.name, self.passed, self.message = name, passed, message

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return f"{self.name}: {self.message}"


def __getattr__(name):
    if name.startswith("check_"):
        def check(*args, **kwargs):
            return CheckResult(name[len("check_"):], False, "decided by the grader, outside this notebook")
        check.__name__ = name
        return check
    raise AttributeError(f"bayesattn_lite.checks has no {name!r} while a submission is graded")
'''
# ... as the only file of the kernel's checks/ folder: no module (or bytecode) of the real checks goes along.
KERNEL_REPLACES = {"checks/__init__.py": KERNEL_CHECKS}


# ----------------------------------------------------------------------------- reading

class Refused(ValueError):
    """A submitted file the grader does not open (a link, not a regular file): the sentence says why."""


class SeveralNames(OSError):
    """A submitted file that has other names too (a hard link): whose it is, the instructor decides, so it
    is "not graded", never a 0 (the second name may be a classmate's, made to zero the first)."""


def _read(source):
    """(notebook, None) or (None, a sentence saying why it is not a readable notebook). ``source`` is a
    path, the file's bytes or a ``Refused``. The file is learner data: its size and its number of JSON
    values are bounded before it is parsed, and its cells' types checked before anything reads them."""
    import nbformat
    if isinstance(source, Refused):
        return None, str(source)
    try:
        raw = source if isinstance(source, bytes) else _bytes_or_error(source, raising=True)
    except SeveralNames:
        raise   # not graded, for the instructor to decide (``_attempt``)
    except (OSError, Refused) as exc:
        return None, f"the file could not be read: {exc}"
    if len(raw) > MAX_NOTEBOOK:
        return None, f"the file is larger than {MAX_NOTEBOOK // 2 ** 20} MiB: not executed (clear the outputs)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"the file is not a Jupyter notebook (not UTF-8 text: {exc.reason} at byte {exc.start})"
    values = _json_values(text)
    if values > MAX_JSON_VALUES:
        return None, (f"the file holds about {values} JSON values, more than {MAX_JSON_VALUES}: not parsed "
                      "(a notebook's metadata or outputs are that large only when something is wrong)")
    try:  # plain JSON first (linear time, bounded above), and its shape checked before nbformat reads it
        problem = _shape_problem(json.loads(text))
        if problem:
            return None, "the file is not a Jupyter notebook: " + problem
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat and the decoder raise several kinds
        return None, f"the file is not a Jupyter notebook (invalid JSON or notebook format): {str(exc)[:300]}"
    return nb, None


# a string to its closing quote, or to the end of the text when it has none: every match succeeds where it
# starts, so the scan is linear (a pattern that must find the closing quote retries from every quote of an
# unterminated string, and a file of '"\\"\\"...' took minutes per megabyte); possessive, so that a long
# string keeps no backtracking state (a character at a time, a 15 MB string took 1.7 GB)
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\[\s\S]?[^"\\]*+)*+(?:"|\Z)')   # possessive: no backtracking state


def _json_values(text):
    """An upper bound on the number of values in JSON ``text``, without parsing it: strings removed,
    each value is followed by a comma or closes a bracket."""
    rest = _JSON_STRING.sub("", text)
    return rest.count(",") + rest.count("[") + rest.count("{") + 1


CELL_TYPES = ("code", "markdown", "raw")


def _shape_problem(data):
    """What is wrong with the JSON ``data`` as a notebook ("" when nothing is), in words."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return "it has no list of cells"
    if len(data["cells"]) > MAX_CELLS:
        return f"it has {len(data['cells'])} cells, more than {MAX_CELLS}: not executed"
    if not isinstance(data.get("metadata", {}), dict):
        return "its metadata is not a JSON object"
    for n, cell in enumerate(data["cells"], 1):
        if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
            return f"cell {n} is not a cell (expected an object with cell_type one of {', '.join(CELL_TYPES)})"
        source = cell.get("source")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(x, str) for x in source)):
            return f"cell {n}'s source is {type(source).__name__}, expected text or a list of lines"
        if not isinstance(cell.get("metadata", {}), dict):
            return f"cell {n}'s metadata is not a JSON object"
        if cell["cell_type"] == "code" and not isinstance(cell.get("outputs", []), list):
            return f"cell {n}'s outputs are not a list"
    return ""


def identify(nb, path, override=None):
    """The assignment id: ``override``, else the notebook metadata, else the file name; None if unknown."""
    if override:
        return override if override in assignments.ASSIGNMENTS else None
    meta = (nb or {}).get("metadata", {}).get("bayesattn_lite", {}) if nb else {}
    if isinstance(meta, dict) and meta.get("assignment") in assignments.ASSIGNMENTS:
        return meta["assignment"]
    stem = Path(path).stem  # anywhere in it: Canvas names a download login_userid_submissionid_<file>
    return next((a for a in sorted(assignments.ASSIGNMENTS, key=len, reverse=True) if a in stem), None)


def _tags(cell):
    tags = cell.get("metadata", {}).get("tags", [])
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def instructor_signs(nb):
    """Why ``nb`` looks like an instructor version (empty if it does not)."""
    signs = []
    meta = nb.get("metadata", {}).get("bayesattn_lite", {})
    if isinstance(meta, dict) and meta.get("version") == "instructor":
        signs.append("its metadata says bayesattn_lite.version = instructor")
    tagged = sum(assignments.INSTRUCTOR_TAG in _tags(c) for c in nb.cells)
    if tagged:
        signs.append(f"{tagged} cell(s) tagged {assignments.INSTRUCTOR_TAG!r}")
    marked = sum("BEGIN SOLUTION" in c.source or "END SOLUTION" in c.source for c in nb.cells)
    if marked:
        signs.append(f"{marked} cell(s) with BEGIN/END SOLUTION markers")
    return signs


def _written(question):
    return getattr(question, "check", None) is None


def _answer_tag(question):
    return getattr(question, "answer_tag", f"answer-{question.id}")


def _defined_names(nb):
    """Names the code cells define (functions, classes, assignments, imports), by reading them."""
    names = set()
    deadline = time.monotonic() + assignments.SCAN_SECONDS   # a budget, as the scan's: the rest are mentioned names
    for cell in nb.cells:
        if cell.cell_type != "code" or len(cell.source) > MAX_READ_CELL:
            continue
        if time.monotonic() > deadline:
            break
        try:
            tree = assignments._parse(cell.source)   # as the scan reads it, in bounded time
        except (SyntaxError, ValueError, RecursionError, MemoryError):   # an expression nested too deep
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _mentioned_names(nb):
    """Every identifier the code cells mention, also in strings: an unanswered stub such as
    ``raise NotImplementedError("results = ...")`` still shows which question its cell is."""
    return {w for c in nb.cells if c.cell_type == "code" for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", c.source)}


def structure_problems(nb, assignment, handed_out=None):
    """What the notebook lacks of the assignment's questions: a code cell defining (or, unanswered,
    naming) each checked question's objects, the Markdown cells tagged ``answer-<id>`` for each written
    answer (``handed_out``: how many the handout has of each tag, ``handout_answer_cells``; 1 by default)."""
    defined = _defined_names(nb) | _mentioned_names(nb)
    tags = collections.Counter(t for c in nb.cells if c.cell_type == "markdown" for t in _tags(c))
    missing, lost = [], []
    for q in assignment.questions:
        expected = max((handed_out or {}).get(_answer_tag(q), 1), 1)
        if _written(q) and tags[_answer_tag(q)] < expected:   # not a mismatch: read by hand from the added cells
            some = "no Markdown cell is" if not tags[_answer_tag(q)] else \
                f"{tags[_answer_tag(q)]} of the {expected} Markdown cells handed out are"
            lost.append(f"{q.id}: {some} tagged {_answer_tag(q)!r} (a written answer's cell lost its tag): "
                        "your instructor reads the Markdown cells you added or changed instead")
        elif not _written(q):
            absent = [n for n in q.names if n not in defined]
            if absent:
                missing.append(f"{q.id}: no code cell defines {', '.join('`' + n + '`' for n in absent)}")
    checked = [q for q in assignment.questions if not _written(q)]
    if checked and all(any(m.startswith(f"{q.id}:") for m in missing) for q in checked):
        return [f"this notebook does not look like {assignment.id} ({assignment.title}): none of its question "
                "cells was found; is it the right file, or pass --assignment"]
    return [f"the notebook does not match the assignment: {m}" for m in missing] + lost


STUB = "*Your answer here.*"  # how the student version's answer cells begin: one line, with what to write


def _is_original(cell, original):
    """Whether ``cell`` was in the notebook handed out (``original``: its cells' sources), or, without
    it, looks like the handed-out text: a heading or a part of a question such as "**(c)** ..."."""
    text = cell.source.strip()
    if original:
        return text in original
    return text.startswith("#") or text.startswith("**(")


def written_answer(nb, question, original=frozenset()):
    """(text, warning) of a written question: its Markdown cells tagged ``answer-<id>``, and the Markdown
    cells a student added below each (until a cell of the handed-out notebook). A tagged cell's stub line
    does not count, what follows it does; the warning says when the answer was found only in added cells."""
    tag, parts, outside = _answer_tag(question), [], False
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown" or tag not in _tags(cell):
            continue
        own = cell.source.strip()
        if original and _is_original(cell, original):   # handed out as it is (the stub, or a question's text the tag was moved to)
            own, stub_only = "", True
        elif own.startswith(STUB):   # the stub line left in place: the lines below it are the answer
            own = own.partition("\n")[2].strip()
            stub_only = not own
        else:
            own, stub_only = cell.source, False
        if own:
            parts.append(own)
        for later in cells[i + 1:]:
            if _is_original(later, original) or any(t.startswith(assignments.ANSWER_TAG_PREFIX) for t in _tags(later)):
                break
            if later.cell_type == "markdown" and later.source.strip():
                parts.append(later.source)
                outside = outside or stub_only
    text = "\n\n".join(parts)
    warning = (f"the answer was found in cells added below the cell tagged {tag!r}, which still holds the stub: "
               "read them as the answer" if outside else None)
    return text[:MAX_ANSWER_TEXT] + (" [...]" if len(text) > MAX_ANSWER_TEXT else ""), warning


def class_forms(assignment):
    """{question id: form} of a class variant (instructor/variants.py); {} for the published problem set."""
    return {q.id: q.form for q in assignment.questions if getattr(q, "form", "")}


def _forms_said(forms):
    """A handout's forms in words: "the published questions", or "q1 in the form 'mup'"."""
    if not forms or not isinstance(forms, dict):
        return "the published questions"
    return ", ".join(f"{q} in the form {f!r}" for q, f in forms.items())


def handout_mismatch(course, folder):
    """Why the student versions in ``folder`` are not the ones this course hands out (a class variant's
    forms differ), or "" when they are: the grader would grade against one form what students did in another."""
    for aid in assignments.ASSIGNMENTS:
        nb, _ = _read(Path(folder) / f"{aid}{assignments.STUDENT_SUFFIX}.ipynb")
        if nb is None:
            continue
        handed_out, expected = variants.recorded(nb), class_forms(course.assignment(aid))
        if handed_out != expected:
            which = f"the course file {course.path}" if course.path else "no course file (the published forms)"
            return (f"{folder}/{aid}{assignments.STUDENT_SUFFIX}.ipynb is handed out with {_forms_said(handed_out)}, "
                    f"but {which} gives {_forms_said(expected)}: pass the class's course file with --course FILE, "
                    "or write the class's notebooks with python -m bayesattn_lite.instructor.assignments --course "
                    "FILE --out DIR and grade with --folder DIR")
    return ""


@functools.lru_cache(maxsize=None)
def original_cells(folder, aid):
    """The sources of the student version handed out (stripped), to tell the cells a student added;
    read once per grader process, not once per submission."""
    nb, _ = _read(Path(folder) / f"{aid}{assignments.STUDENT_SUFFIX}.ipynb") if folder else (None, None)
    return frozenset(c.source.strip() for c in nb.cells) if nb is not None else frozenset()


@functools.lru_cache(maxsize=None)
def handout_answer_cells(folder, aid):
    """{answer tag: how many Markdown cells of the student version handed out carry it} ({} without one):
    a question answered in two cells has lost a tag when one of them is missing it."""
    nb, _ = _read(Path(folder) / f"{aid}{assignments.STUDENT_SUFFIX}.ipynb") if folder else (None, None)
    return collections.Counter(t for c in (nb.cells if nb is not None else []) if c.cell_type == "markdown"
                               for t in _tags(c) if t.startswith(assignments.ANSWER_TAG_PREFIX))


# ----------------------------------------------------------------------------- the learner's objects

class _Remote:
    """Stands in, in the grader, for a function of the learner: calling it runs the function in the
    kernel on the arguments (sent as data) and returns its result (rebuilt from data)."""

    def __init__(self, sandbox, name, timeout):
        self._sandbox, self.__name__, self._timeout = sandbox, name, timeout
        self.stub = None  # the message of a NotImplementedError the learner's function raised

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = args + tuple(kwargs.values())  # checks call positionally; keep the order given
        try:
            return self._sandbox.call(self.__name__, args, self._timeout)
        except NotImplementedError as exc:
            self.stub = str(exc)
            raise

    def __repr__(self):
        return f"<your function {self.__name__}>"

    def __eq__(self, other):  # the same function of the same kernel (a check may remember a run of it)
        return isinstance(other, _Remote) and other._sandbox is self._sandbox and other.__name__ == self.__name__

    def __hash__(self):
        return hash((id(self._sandbox), self.__name__))


def _learner_objects(sandbox, names, timeout):
    """Stand-ins for ``names``: a _Remote for a callable, the fetched data for a value. Returns
    (objects, None) or (None, a sentence for the learner)."""
    objects, missing = [], []
    for name in names:
        kind = sandbox.describe(name, timeout)
        if kind == "missing":
            missing.append(name)
        elif kind == "callable":
            objects.append(_Remote(sandbox, name, timeout))
        else:
            objects.append(sandbox.fetch(name, timeout))
    if missing:
        return None, (f"{' and '.join('`' + n + '`' for n in missing)} {'is' if len(missing) == 1 else 'are'} "
                      "not defined: run the question's cell, and keep the names the assignment gives.")
    return objects, None


def _decide(sandbox, question, timeout):
    """The verdict on one checked question, as a CheckResult: its check runs here, on stand-ins."""
    name = question.check.__name__.removeprefix("check_")
    try:
        objects, problem = _learner_objects(sandbox, question.names, timeout)
        if problem:
            return check_engine.CheckResult(name, False, problem)
        form = getattr(question, "form", "")  # a class variant's form (instructor/variants.py)
        result = question.check(*objects, **({"form": form} if form else {}))
        if not isinstance(result, check_engine.CheckResult):  # an instructor's own check may return a bool
            result = check_engine.CheckResult(name, bool(result) is True, str(getattr(result, "message", result)))
    except Exception as exc:  # noqa: BLE001 - a learner's object may make a check fail in any way
        return check_engine.CheckResult(name, False, f"the check could not run: {type(exc).__name__}: {str(exc)[:300]}")
    stubs = [o.stub for o in objects if isinstance(o, _Remote) and o.stub is not None]
    if stubs and not result.passed:  # a stub nobody filled in: say so, with its hint
        words = f"not answered yet: the function still raises NotImplementedError ({stubs[0][:300]})."
        return check_engine.CheckResult(name, False, words, graded=words)
    return result


def partial_points(question, result):
    """The points a checked question earns: all when it passed, else the better of its partial credits
    (``Question.per_output``: a share per right output; ``Question.mistakes``: the points of the named
    mistakes that explain every wrong output, the smallest when there are two)."""
    if result.passed:
        return question.points
    earned = 0.0
    if getattr(question, "per_output", False) and result.outputs:
        earned = question.points * len(result.right) / len(result.outputs)
    named = dict(getattr(question, "mistakes", ()))
    if result.mistakes and all(k in named for k in result.mistakes):
        earned = max(earned, min(named[k] for k in result.mistakes))
    return points_number(earned)


def graded_feedback(result):
    """The feedback of graded mode: the mistake named, no formula and no hint that gives the answer away."""
    if result.graded:
        return result.graded
    return check_engine.without_answer(result.message)


# ----------------------------------------------------------------------------- one submission

NO_SANDBOX_WARNING = ("graded with --no-sandbox: the kernel ran as the grader's user, with the grader's files "
                      "and network (the package's files are checked and restored after each submission); use it "
                      "only for notebooks you trust")


def _isolation(info):
    """The report's account of how the kernel was isolated, with a warning where it was not."""
    return {**info, "warnings": [] if info.get("sandbox", "").startswith("bubblewrap") else [NO_SANDBOX_WARNING]}


def _new_sandbox(limits, hide):
    """A kernel for one submission, not started yet."""
    return _sandbox.Sandbox(**_sandbox_arguments(limits, hide))


def _sandbox_arguments(limits, hide):
    """``_sandbox.Sandbox``'s arguments for ``limits`` (``grade``'s: notebook_timeout, memory, ...)."""
    return {"package_dir": PACKAGE_DIR, "hide": hide, "replace": KERNEL_REPLACES, "leave_out": KERNEL_LEAVES_OUT,
            "notebook_timeout": limits.get("notebook_timeout", DEFAULT_NOTEBOOK_TIMEOUT),
            "memory_mb": limits.get("memory", DEFAULT_MEMORY), "max_output_mb": limits.get("max_output", DEFAULT_MAX_OUTPUT),
            "scratch_mb": limits.get("scratch", _sandbox.DEFAULT_SCRATCH), "sandboxed": limits.get("sandboxed", True)}


class _NextSandbox:
    """For a batch: the next submission's kernel starts in a thread while this one is graded, so that a
    kernel's start (about 0.6 s, mostly its Python importing ipykernel) is not waited for. At most one
    kernel waits, idle and in its own sandbox, and only when another submission follows (``more``). A
    kernel that started while a submission ran may not have started at all (the running kernel had its
    CPU share): its start is tried again, now, and only that failure counts."""

    def __init__(self):
        self.more = False
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.waiting = None

    def take(self, limits, hide):
        """A sandbox for this submission; the next one starts meanwhile."""
        waiting, self.waiting = self.waiting, None
        if self.more:
            self.waiting = self.pool.submit(lambda: _new_sandbox(limits, hide).start())
        if waiting is not None:
            try:
                return waiting.result()
            except Exception:  # noqa: BLE001 - it left nothing behind; start one again, on its own
                pass
        return _new_sandbox(limits, hide)

    def close(self):
        """End the kernel still waiting, if any, once the ones before it have ended."""
        if self.waiting is not None:
            try:
                self.waiting.result().close()
            except Exception:  # noqa: BLE001 - it failed to start, and left nothing behind
                pass
        self.pool.shutdown()


class InfrastructureError(RuntimeError):
    """The grader could not grade (a sandbox that does not start, a full disk): never the student's 0."""


MAX_RESTARTS = 3  # fresh kernels per submission after one died, so that one cell cannot zero the others


def _fresh(limits, hide, next_sandbox, first):
    """A started kernel: the batch's pre-started one for the first, else a new one. A kernel that does
    not start is the grader's failure, not the student's."""
    try:
        box = next_sandbox.take(limits, hide) if first and next_sandbox is not None else _new_sandbox(limits, hide)
        return box.__enter__()
    except Exception as exc:  # noqa: BLE001 - any failure to start is ours
        raise InfrastructureError(f"the sandbox did not start: {type(exc).__name__}: {str(exc)[:300]}") from exc


def _execute(box, nb, skip, problems, timeout):
    """Run the code cells but ``skip`` (their numbers); record their outputs and problems (once per
    cell). The number of the cell the kernel died in, or None."""
    number = 0
    for place, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        number += 1  # as the learner counts code cells, empty ones included (its In [number])
        if number in skip or not cell.source.strip():
            continue
        run = box.execute(cell.source, timeout)
        cell.outputs, cell.execution_count = run.outputs, number
        said = {p.split(":")[0] for p in problems}
        where = f"code cell {number} (cell {place} of the notebook)"   # the scan and the answers count all cells
        if run.status == "dead":
            problems.append(f"{where}: the kernel was stopped ({box.dead})")
            return number
        if where in said:
            continue
        if run.status == "interrupted":
            problems.append(f"{where}: ran longer than {timeout:g} s and was interrupted")
        elif run.status == "error":
            problems.append(f"{where}: raised {run.error}")
    return None


def _run(nb, assignment, limits, hide, next_sandbox=None):
    """Execute the notebook and decide its questions; (results by question id, problems, isolation).
    A kernel that dies (a cell that never stops, memory, output) is replaced by a fresh one that runs
    the notebook again without that cell, so that the questions before and after it are still graded;
    a question whose check kills the kernel is graded 0 and the next one gets a fresh kernel."""
    # inputs the submission cannot know: the checks are public, so each submission's checks draw their
    # inputs from a fresh random offset of the seeds (the kernel never sees the checks); a regrade replays one
    offset = limits.get("seed_offset")
    offset = secrets.randbelow(2 ** 31) if offset is None else int(offset)
    with _seed_offset(offset):
        results, problems, info = _run_with_restarts(nb, assignment, limits, hide, next_sandbox)
    info["input_seed_offset"] = offset  # to rerun a check on the same inputs (--regrade)
    return results, problems, info


@contextlib.contextmanager
def _seed_offset(offset):
    """The checks' inputs shifted by ``offset`` while a submission is decided, and put back after (a
    grader run inside another program leaves that program's checks as they were)."""
    before, check_engine.SEED_OFFSET = check_engine.SEED_OFFSET, offset
    try:
        yield
    finally:
        check_engine.SEED_OFFSET = before


def _run_with_restarts(nb, assignment, limits, hide, next_sandbox):
    """``_run``'s work, on the inputs its seed offset set."""
    results, problems, skip = {}, [], set()
    timeout = limits["timeout"]
    box, restarts = _fresh(limits, hide, next_sandbox, True), 0
    deadline = box.deadline   # the submission's one clock: a fresh kernel does not start a new one

    def may_replace():
        return restarts < MAX_RESTARTS and time.monotonic() < deadline

    def replace(why):
        nonlocal box, restarts
        _close(box, next_sandbox)
        restarts += 1
        problems.append(f"a fresh kernel ran the notebook again {why}")
        box = _fresh(limits, hide, next_sandbox, False)
        box.deadline = deadline

    try:
        died = _execute(box, nb, skip, problems, timeout)
        while died is not None and may_replace():
            skip.add(died)
            replace(f"without code cell {died}")
            died = _execute(box, nb, skip, problems, timeout)
        for q in assignment.questions:
            if _written(q):
                continue
            if box.dead and may_replace():
                replace(f"to check {q.id}")
                _execute(box, nb, skip, problems, timeout)
            if box.dead:
                results[q.id] = check_engine.CheckResult(q.id, False, f"not checked: the kernel was stopped ({box.dead})")
                continue
            results[q.id] = _decide(box, q, timeout)
            if box.dead:
                problems.append(f"checking {q.id} stopped the kernel ({box.dead})")
        info = _isolation(box.info)
    finally:
        _close(box, next_sandbox)
    info["restarts"] = restarts
    return results, problems, info


def _close(box, next_sandbox):
    """End a kernel: in the batch's thread when there is one, so the next submission does not wait."""
    if next_sandbox is not None:
        next_sandbox.pool.submit(box.close)
    else:
        box.close()


def _question_entry(q, result, nb, mode, original, handed_out=1):
    """The report's entry for question ``q``; ``handed_out``: how many Markdown cells of the handout carry
    a written question's answer tag (fewer in the submission: a tag was lost)."""
    if _written(q):
        answer, warning = written_answer(nb, q, original) if nb is not None else ("", None)
        entry = {"id": q.id, "title": q.title, "manual": True, "points": None, "max_points": q.points,
                 "passed": None, "rubric": getattr(q, "rubric", ""), "answer": answer, "answered": bool(answer.strip()),
                 "instructor_points": None, "comment": "",
                 "feedback": "a written answer: your instructor grades it with the rubric"}
        tagged = sum(c.cell_type == "markdown" and _answer_tag(q) in _tags(c) for c in nb.cells) if nb is not None else 0
        if nb is not None and tagged < max(handed_out, 1):
            # a tag was lost (a cell deleted and written anew, or its tag removed): not a 0 the grader decides, a
            # question to read: the tagged cells left, then every Markdown cell the student wrote that no tag claims
            added = [f"[Markdown cell {i + 1} of the notebook, added or changed by the student, untagged]\n{c.source}"
                     for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.strip()
                     and original and not _is_original(c, original) and c.source not in answer
                     and not any(t.startswith(assignments.ANSWER_TAG_PREFIX) for t in _tags(c))]
            entry.update(answered=True, tag_missing=True,
                         answer="\n\n".join(([answer] if answer.strip() else []) + added)[:MAX_ANSWER_TEXT])
            warning = (f"{'no' if not tagged else f'{tagged} of the {handed_out}'} Markdown cell(s) tagged "
                       f"{_answer_tag(q)!r} (a tag was removed, or a cell replaced): "
                       + ("shown are the tagged cells left and every untagged Markdown cell the student wrote, "
                          "which may hold the rest" if entry["answer"]
                          else "read the notebook as it ran, beside the report") + "; grade it by hand")
        if warning:
            entry["warning"] = warning
        return entry
    feedback = graded_feedback(result) if mode == "graded" else result.practice or result.message
    return {"id": q.id, "title": q.title, "manual": False, "points": partial_points(q, result),
            "max_points": q.points, "passed": result.passed, "feedback": feedback,
            "feedback_practice": result.practice or result.message,   # for --release --practice, after the deadline
            "right_outputs": list(result.right), "mistakes": list(result.mistakes)}


def grade(source, assignment_id=None, timeout=DEFAULT_TIMEOUT, *, name=None, self_test=False,
          notebook_timeout=DEFAULT_NOTEBOOK_TIMEOUT, memory=DEFAULT_MEMORY, max_output=DEFAULT_MAX_OUTPUT,
          hide=(), folder=None, sandboxed=True, next_sandbox=None, course=None, seed_offset=None,
          submitted=None, executed=None, scratch=_sandbox.DEFAULT_SCRATCH):
    """The report of one submission as a dict. ``source`` is a path or the file's bytes (then ``name``
    is its name). ``course`` (``course.load``) sets points, partial credit, mode and late policy;
    ``seed_offset`` replays a report's check inputs; ``submitted`` (a datetime) is when it was handed in;
    ``executed`` a path for the notebook as it ran, outputs included. Never raises on a bad submission;
    raises ``InfrastructureError`` when the grader could not grade it, and ``_sandbox.SandboxUnavailable``
    (saying how to fix it) when the sandbox cannot start here, unless ``sandboxed=False``."""
    if sandboxed:
        _sandbox.check_sandbox()
    course = course if course is not None else _course.load()
    started = time.monotonic()
    name = _printable(name if name is not None else source if isinstance(source, (str, Path)) else "submission")
    nb, problem = _read(source)
    report = {"submission": name, "assignment": None, "status": "graded", "score": 0, "max_score": 0,
              "automatic_max": 0, "manual_pending": 0, "questions": [],
              "problems": [] if problem is None else [problem], "reference_calls": [],
              "limits": {"timeout": timeout, "notebook_timeout": notebook_timeout, "memory_mib": memory,
                         "scratch_mib": scratch,
                         "max_output_mib": max_output}}
    if problem:
        report["status"] = "unreadable"
    aid = identify(nb, name, assignment_id)
    if aid is None:
        report["status"] = "unknown assignment" if report["status"] == "graded" else report["status"]
        report["problems"].append("could not tell which assignment this is: the notebook metadata names none "
                                  f"and the file name matches none of {sorted(assignments.ASSIGNMENTS)}; "
                                  "pass --assignment")
        report["seconds"] = round(time.monotonic() - started, 1)
        return report
    named = (nb or {}).get("metadata", {}).get("bayesattn_lite", {}) if nb else {}
    named = named.get("assignment") if isinstance(named, dict) else None
    if assignment_id and named is not None and named != assignment_id:
        report["problems"].append(f"its metadata names the assignment {str(named)[:60]!r}: graded as "
                                  f"{assignment_id}, the assignment the instructor gave")
    assignment, mode = course.assignment(aid), course.mode(aid)
    report["assignment"], report["title"], report["mode"] = aid, assignment.title, mode
    forms = class_forms(assignment)
    if forms:
        report["variant"] = forms
    if nb is not None and variants.recorded(nb) != forms:
        report["problems"].append(f"this notebook was handed out with {_forms_said(variants.recorded(nb))[:160]}, "
                                  f"not with your class's {_forms_said(forms)}: graded in your class's forms (was "
                                  "it opened from the book's page instead of your class's handout?)")
    report["max_score"] = sum(q.points for q in assignment.questions)
    report["automatic_max"] = sum(q.points for q in assignment.questions if not _written(q))
    results = {}
    if nb is not None:
        signs = instructor_signs(nb)
        if signs and not self_test:
            report["status"] = "rejected"
            report["problems"].append("rejected: this is an instructor version (" + "; ".join(signs) + "), not a "
                                      "submission. Hand in the student version with your answers; an "
                                      "instructor checks an instructor version with --self-test.")
            nb = None
        else:
            report["problems"] += structure_problems(nb, assignment, handout_answer_cells(folder, aid))
    if nb is not None:
        report["reference_calls"] = _reference_calls(nb, aid, folder)
        limits = {"timeout": timeout, "notebook_timeout": notebook_timeout, "memory": memory, "scratch": scratch,
                  "max_output": max_output, "sandboxed": sandboxed, "seed_offset": seed_offset}
        results, problems, report["isolation"] = _run(nb, assignment, limits, hide, next_sandbox)
        report["problems"] += problems
        if executed is not None:
            try:  # the kernel's outputs are the learner's data: a copy that cannot be written costs no grade
                _write_executed(nb, executed)
                report["executed"] = str(executed)
            except Exception as exc:  # noqa: BLE001 - nbformat and the file system raise several kinds
                report["problems"].append(f"the executed notebook could not be kept: {type(exc).__name__}: "
                                          f"{str(exc)[:200]}")
    why = ("the notebook did not get that far (see the problems above)" if report["status"] == "graded" else
           "the submission was rejected" if report["status"] == "rejected" else "the file could not be read")
    original = original_cells(folder, aid) if nb is not None else frozenset()
    handed_out = handout_answer_cells(folder, aid) if nb is not None else {}
    for q in assignment.questions:
        result = results[q.id] if q.id in results else check_engine.CheckResult(q.id, False, "not checked: " + why)
        report["questions"].append(_question_entry(q, result, nb, mode, original,
                                                   handed_out.get(_answer_tag(q), 1)))
    report["late"] = _late(course, aid, submitted, report["submission"])
    total(report)
    report["seconds"] = round(time.monotonic() - started, 1)
    return report


def _late(course, aid, submitted, submission=None):
    kept, note = course.late(aid, submitted, submission)
    return {"submitted": submitted.isoformat() if submitted else None, "kept": kept, "note": note}


def _write_executed(nb, path):
    """The notebook as it ran, with the outputs the sandbox kept, for the instructor (never executed again)."""
    import nbformat
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, nbformat.writes(nb))


MAX_REFERENCE_CALLS = 200   # uses listed per report: the learner's code can make them many


def _reference_calls(nb, aid, folder=None):
    """Uses of the package's reference functions in the learner's cells (``assignments``, if it has them)."""
    scan = getattr(assignments, "notebook_reference_calls", None)
    if scan is None:
        return []
    try:
        found = list(scan(nb, aid, folder))
        return found if len(found) <= MAX_REFERENCE_CALLS else \
            found[:MAX_REFERENCE_CALLS] + [f"... and {len(found) - MAX_REFERENCE_CALLS:,} more uses (not listed)"]
    except Exception as exc:  # noqa: BLE001 - a scan that fails must not cost the grade
        return [f"the scan for reference calls failed: {type(exc).__name__}: {str(exc)[:200]}"]


# ----------------------------------------------------------------------------- the package on disk

class _PackageGuard:
    """The package's source files as they were when grading started. When the kernel runs as the
    grader's user it could rewrite them (a later grader run would import the change): after each
    submission, ``restore`` puts back any changed, removed or added .py file and empties __pycache__."""

    def __init__(self, folder=PACKAGE_DIR):
        self.folder = folder
        self.files = {p: p.read_bytes() for p in folder.rglob("*.py") if "__pycache__" not in p.parts}

    def restore(self):
        """Put the package back; the relative paths of what had changed (empty when nothing did)."""
        changed = []
        current = {p for p in self.folder.rglob("*.py") if "__pycache__" not in p.parts}
        for path in sorted(current - set(self.files)):
            changed.append(str(path.relative_to(self.folder)))
            path.unlink(missing_ok=True)
        for path, data in self.files.items():
            try:
                same = path.read_bytes() == data
            except OSError:
                same = False
            if not same:
                changed.append(str(path.relative_to(self.folder)))
                path.write_bytes(data)
        if changed:
            for cache in self.folder.rglob("__pycache__"):
                for f in cache.iterdir():
                    f.unlink(missing_ok=True)
        return changed


def grade_many(paths, reports_dir, csv_path, *, jobs=1, submitted=None, **options):
    """Grade every file of ``paths``; write one report each into ``reports_dir`` (with the notebook as
    it ran) and the gradebook ``csv_path``. Every file is read before the first is run, so a submission
    cannot change another. In the sandbox, ``jobs`` grading workers (processes of their own, each
    bounded: see ``_Worker``) grade them, one submission at a time each; ``submitted`` maps a path to
    when it was handed in (for the late policy)."""
    # without a sandbox the kernel could write the package: it is checked and restored after each one
    guard = None if options.get("sandboxed", True) else _PackageGuard()
    if guard is not None and jobs > 1:
        raise ValueError("--jobs above 1 needs the sandbox: without it submissions would share the package on disk")
    reports_dir.mkdir(parents=True, exist_ok=True)
    tasks, used, earlier, times_kept = [], set(), {}, 0
    for path in paths:
        source = _bytes_or_error(path)
        name, out = _printable(path), reports_dir / f"{_stem(path, used)}.json"
        earlier[str(out)] = old = _earlier_report(out)
        when = (submitted or {}).get(path)
        if when is None and _same_file(old, source) and (old.get("late") or {}).get("submitted"):
            when = _datetime(old["late"]["submitted"])   # graded again without the times: the same file's time stays
            times_kept += 1
        tasks.append((name, source, out, when, os.path.abspath(path)))
    if times_kept:
        print(f"submission times kept from the earlier reports in {reports_dir} for {times_kept} unchanged file(s) "
              "(--submitted-times sets them anew)")
    graded, marks = [], {}  # each report is written and said as soon as it is ready: a batch stopped halfway keeps them

    def finished(report):
        graded.append(report)
        marks[report.get("report")] = _keep_instructor_marks(earlier.get(report.get("report")), report)
        _finish(report, f"[{len(graded)}/{len(tasks)}] ")

    reports = _grade_tasks(tasks, options, jobs, guard, finished)
    for r in reports:   # one the batch did not say as ready (a stopped worker's) gets them here
        if r.get("report") not in marks:
            marks[r.get("report")] = _keep_instructor_marks(earlier.get(r.get("report")), r)
    kept = [r for r in reports if marks[r.get("report")]]
    if kept:
        print(f"instructor's points and comments kept from the earlier reports in {reports_dir}: {len(kept)} report(s) "
              "(take one back with 'clear' in a manual-points file)")
    changed = [r for r in kept if earlier[r["report"]].get("sha256") not in (None, r.get("sha256"))]
    if changed:
        print(f"warning: {len(changed)} of them are new files since (e.g. {Path(changed[0]['report']).stem}): "
              "look at the points you kept for them", file=sys.stderr)
    for report in reports:  # again, now that no kernel is left: what a submission wrote is overwritten
        report["gradebook"] = str(Path(csv_path).resolve())   # where --regrade rebuilds it without --csv
        try:
            write_report(report, Path(report["report"]))
        except OSError as exc:  # one report that cannot be written never costs the batch its gradebook
            report["problems"].append(f"its report could not be written: {exc}")
    write_gradebook(reports, csv_path)
    return reports


def _same_file(report, source):
    """Whether ``report`` (or None) was graded from the bytes ``source``."""
    return isinstance(report, dict) and isinstance(source, bytes) and \
        report.get("sha256") == hashlib.sha256(source).hexdigest()


def _datetime(text):
    from datetime import datetime
    return datetime.fromisoformat(text)


def _earlier_report(path):
    """The report a submission had before in this folder (None if none or unreadable): grading a folder
    again keeps what the instructor decided in it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _keep_instructor_marks(old, report):
    """The instructor's points and comments of ``old`` (an earlier report of the same submission) carried
    into ``report``, totalled again; how many questions had any. Grading again never drops what a person
    decided, and a question whose points come back shows in the feedback as the instructor's."""
    mine = {q.get("id"): q for q in (old or {}).get("questions", []) if isinstance(q, dict)}
    if isinstance((old or {}).get("released"), dict):   # where its feedback went: rewritten there with this grade
        report["released"] = old["released"]
    n = 0
    for q in report.get("questions", []):
        kept = mine.get(q["id"], {})
        q["instructor_points"], q["comment"] = kept.get("instructor_points"), kept.get("comment", "")
        n += q["instructor_points"] is not None or bool(q["comment"])
    if report.get("status") not in NOT_GRADED:
        total(report)
    return n


def _stem(path, used):
    """The report's name: the file's own stem where it is a plain name; else the stem made plain, with a
    short hash of the file's name, so that each report keeps its name from one run to the next whatever
    else the folder holds (a classmate's file whose name cleans up alike cannot take it, nor the manual
    points filed under it)."""
    original = Path(_printable(path)).stem
    stem = re.sub(r"[^\w.-]", "_", original)[:100] or "submission"
    if stem != original or re.search(r"-[0-9a-f]{8}$", stem):   # a plain name cannot pass for a hashed one
        stem += "-" + hashlib.sha256(os.fsencode(Path(path).name)).hexdigest()[:8]
    while stem in used:   # the same file name in two folders
        stem += "_"
    used.add(stem)
    return stem


# ----------------------------------------------------------------------------- grading workers

DEFAULT_GRADER_MEMORY = 3072  # MiB for one grading worker: the grader's side of one submission at a time


class _Worker:
    """A process that grades submissions one at a time, in a control group of its own. What a
    submission makes the grader's side cost (a notebook to parse, the kernel's messages, the checks'
    work on its answers) only this process pays, up to ``memory`` MiB, and within a deadline; past
    either, the worker is ended with its sandboxes and files, that submission gets 0 with the reason,
    and a fresh worker grades the rest. Its temporary files (the sandboxes' folders and, as root, their
    staging folders) live in a folder of its own, removed, and checked to be gone, when it ends however
    it ends."""

    def __init__(self, options, jobs, memory, inbox):
        self.folder = _worker_folder()
        ours, theirs = socket.socketpair()
        self.group = _cgroup.Group(memory * 2 ** 20, float(os.cpu_count() or 1))
        # a new interpreter (never a fork of this one, which has torch's threads), this package first on its path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "bayesattn_lite.instructor._worker", str(theirs.fileno()),
                                      self.folder], pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self.group.add(self.proc.pid)
        self.conn = Connection(ours.detach())
        self.conn.send((jobs, options, _sandbox_arguments(options, options.get("hide", ())), _cgroup.kind()))
        self.task = self.deadline = self.writer = None
        self.ended, self.inbox = False, inbox
        self.listener = threading.Thread(target=self._listen, daemon=True)
        self.listener.start()

    def _listen(self):
        """Put each report of the worker into ``inbox`` (an exception for one that cannot be read), then
        None once the worker has ended. A thread of its own reads them, so a worker stopped halfway
        through a message never blocks the grader, whose deadlines keep running."""
        try:
            while True:
                self.inbox.put((self, self.conn.recv()))
        except (EOFError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - a report that does not unpickle: the submission is stopped
            self.inbox.put((self, exc))
        finally:
            self.inbox.put((self, None))

    def send(self, index, task, more, seconds):
        """Hand the worker a submission, from a thread: a worker that does not read (stuck while it
        starts, say) holds that thread, never the grader, and the deadline runs from now."""
        self.task, self.deadline = (index, task), time.monotonic() + seconds
        self.writer = threading.Thread(target=self._write, args=((task, more),), daemon=True)
        self.writer.start()

    def _write(self, message):
        with contextlib.suppress(OSError, ValueError):  # a worker that has ended: its listener reports the end
            self.conn.send(message)

    def end(self, at_once=False):
        """End the process, every sandbox it left, and their files and groups; checked. Once."""
        if self.ended:
            return
        self.ended = True
        try:
            if not at_once:
                self.conn.send(None)
                self.proc.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for thread in (self.listener, self.writer):  # they use the connection until the worker's end
            if thread is not None:
                thread.join(timeout=10)
        if self.listener.is_alive() or (self.writer is not None and self.writer.is_alive()):
            # never seen: leave the socket open rather than let a new worker's socket reuse its number
            print("warning: a grading worker's connection could not be closed", file=sys.stderr)
        else:
            self.conn.close()
        try:
            self.group.remove()
            _cgroup.remove_leftovers(self.proc.pid)
            for point in _mounts_below(self.folder):
                _sandbox._unmount(point)
            _sandbox.remove_tree(self.folder)
        except OSError as exc:  # the instructor hears of it; the batch still writes every report and the gradebook
            print(f"warning: a grading worker's files or control groups could not all be removed: {exc}",
                  file=sys.stderr)


def _worker_folder():
    """A grading worker's temporary folder. As root, one the sandboxes' users can enter (their
    staging folders are made below it, so a killed worker leaves none behind): in TMPDIR when they can
    enter it, else in /tmp, /var/tmp or /dev/shm. As an ordinary user, on /dev/shm."""
    if _sandbox.privileged():
        folder = _sandbox.staging_folder("bal-worker-")
    else:
        folder = tempfile.mkdtemp(prefix="bal-worker-", dir=_sandbox._scratch_base(True))
    os.chmod(folder, 0o711)  # the sandboxes' users enter their own folders below, by name
    return folder


def _mounts_below(folder):
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[4] for line in lines]
    return sorted((p for p in points if p.startswith(folder + "/")), key=len, reverse=True)


def serve(conn, options, jobs, early):
    """A grading worker's loop (``_worker``): submissions in, reports out, until told to stop. ``early``
    is its first kernel, started while this module imported."""
    if jobs > 1:  # one thread for torch, since the sandboxes use the other cores
        import torch
        torch.set_num_threads(1)
    next_sandbox = _NextSandbox()
    next_sandbox.waiting = early
    try:
        while True:
            message = conn.recv()
            if message is None:
                break
            task, next_sandbox.more = message
            conn.send((_attempt(task, options, next_sandbox), _peak_memory_mib()))
    finally:
        next_sandbox.close()


def _grade_tasks(tasks, options, jobs, guard=None, done=None):
    """The reports of ``tasks``, each also given to ``done`` as soon as it is ready: in workers in the
    sandbox; in this process without one (trusted notebooks, the package checked by ``guard`` after
    each), or with BAYESATTN_GRADER_IN_PROCESS=1 (for tests that patch the grader: nothing then bounds
    the grader's side)."""
    done = done or (lambda report: None)
    if options.get("sandboxed", True) and os.environ.get("BAYESATTN_GRADER_IN_PROCESS") != "1":
        return in_workers(tasks, options, jobs, done)
    options = {k: v for k, v in options.items() if k != "grader_memory"}
    next_sandbox = _NextSandbox() if options.get("sandboxed", True) else None
    reports = []
    try:
        for n, task in enumerate(tasks):
            if next_sandbox is not None:
                next_sandbox.more = n + 1 < len(tasks)
            reports.append(_restored(_attempt(task, options, next_sandbox), guard))
            done(reports[-1])
    finally:
        if next_sandbox is not None:
            next_sandbox.close()
    return reports


def in_workers(tasks, options, jobs, done=lambda report: None):
    """The reports of ``tasks`` (``_attempt``'s), graded by ``jobs`` workers, in the tasks' order; each
    is given to ``done`` as it arrives."""
    options = dict(options)
    memory = options.pop("grader_memory", DEFAULT_GRADER_MEMORY)
    per_task = options.get("notebook_timeout", DEFAULT_NOTEBOOK_TIMEOUT) * (MAX_RESTARTS + 2) + 120
    reports, pending = [None] * len(tasks), list(enumerate(tasks))[::-1]
    inbox = queue.SimpleQueue()   # (worker, its report, or None when it ended), from the workers' listeners
    workers = [_Worker(options, jobs, memory, inbox) for _ in range(min(jobs, len(tasks)))]
    peak = 0

    def stop(n, why):
        w = workers[n]
        index, task = w.task
        reports[index] = _stopped(task, options, why)
        done(reports[index])
        w.task = None
        w.end(at_once=True)
        workers[n] = _Worker(options, jobs, memory, inbox) if pending else w

    def messages():
        """Every (worker, message) waiting, after waiting up to a second for the first."""
        found = []
        with contextlib.suppress(queue.Empty):
            found.append(inbox.get(timeout=1.0))
            while True:
                found.append(inbox.get_nowait())
        return found

    try:
        while pending or any(w.task for w in workers):
            for n, w in enumerate(workers):
                if w.task is None and pending:
                    if w.proc.poll() is not None:  # it ended between two submissions: a fresh one takes its place
                        w.end(at_once=True)
                        workers[n] = w = _Worker(options, jobs, memory, inbox)
                    w.send(*pending.pop(), bool(pending), per_task)
            for sender, message in messages():   # every report that came, before any deadline is judged
                if sender not in workers or sender.task is None:
                    continue   # a worker replaced or stopped before: its end, or its report, came too late
                n = workers.index(sender)
                if isinstance(message, Exception):
                    stop(n, f"its report could not be read ({type(message).__name__})")
                elif message is not None:
                    index = sender.task[0]
                    (reports[index], used), sender.task = message, None
                    peak = max(peak, used)
                    done(reports[index])
                else:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        sender.proc.wait(timeout=5)
                    stop(n, f"grading it ended the grader's worker (over its {memory:g} MiB of memory, e.g. a "
                            "notebook or kernel messages too large to read)" if sender.group.out_of_memory()
                         else "grading it ended the grader's worker")
            for n, w in enumerate(workers):
                if w.task is not None and time.monotonic() > w.deadline:
                    stop(n, f"grading it ran past the grader's {per_task:g} s for one submission")
    finally:
        for w in workers:
            w.end()
    _WORKER_PEAK["mib"] = max(_WORKER_PEAK.get("mib", 0), peak)
    return reports


_WORKER_PEAK = {}


def _stopped(task, options, why):
    """The report of a submission whose grading had to be stopped: every question 0 with the reason."""
    name, _, out, submitted, where = task
    report = _attempt((name, Refused(why), out, submitted, where), {**options, "sandboxed": False}, None)
    report["status"] = "stopped"
    report["problems"] = [f"{why}: every question gets 0. Look at the notebook before you release grades."]
    for q in report["questions"]:
        if not q.get("manual"):
            q["feedback"] = "not checked: " + why
    if "isolation" in report:
        del report["isolation"]
    return report


def _attempt(task, options, next_sandbox):
    """One submission of a batch, inside its own error boundary: its report, whatever happened. The
    grader's own failure (a sandbox that does not start, a full disk) is tried once more, then reported
    as "not graded" with the reason, never as a 0 of the student's."""
    name, source, out, submitted, where = task
    options = dict(options)
    course_file = options.pop("course_file", None)
    for attempt in (1, 2):
        try:
            if isinstance(source, Exception) and not isinstance(source, Refused):
                raise source
            report = grade(source, name=name, next_sandbox=next_sandbox if attempt == 1 else None,
                           course=_course_of(course_file), submitted=submitted,
                           executed=out.with_suffix(".executed.ipynb"), **options)
            break
        except (InfrastructureError, _sandbox.SandboxUnavailable, OSError) as exc:
            report = _not_graded(name, options.get("assignment_id"), exc, attempt)
        except Exception as exc:  # noqa: BLE001 - a batch never stops at one submission
            report = _internal_error(name, options.get("assignment_id"), exc)
            break
    report["report"], report["source"] = str(out), _printable(where)  # the file, for --regrade from anywhere
    report["source_bytes"] = os.fsencode(str(where)).hex()   # exactly: a printable name may stand for two files
    if isinstance(source, bytes):
        report["sha256"] = hashlib.sha256(source).hexdigest()   # what was graded, for --regrade to compare
    # what it was graded against, so that --regrade uses the same course file and instructor versions
    report["graded_with"] = {"course": str(Path(course_file).resolve()) if course_file else None,
                             "course_sha256": _file_sha256(course_file),
                             "course_policy_sha256": _policy_sha256(course_file),
                             "folder": str(options["folder"]) if options.get("folder") else None}
    return report


def _file_sha256(path):
    """The SHA-256 of a file's contents (None without a file, or if it cannot be read): a course file edited
    since a report was graded is told apart from the same file."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    except OSError:
        return None


def _policy_sha256(path):
    """The SHA-256 of the course file without its extensions tables and comments (None without a file, or if
    it cannot be read): an edit of one student's extension is told apart from one of everybody's policy."""
    try:
        return hashlib.sha256(_course.without_extensions(path).encode()).hexdigest() if path else None
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=None)
def _course_of(path):
    """The course configuration, read once per grader process (each --jobs worker reads its own)."""
    return _course.load(path)


def _restored(report, guard):
    """After a submission ran without a sandbox: the package put back as it was, and 0 if it had changed."""
    changed = guard.restore() if guard is not None else []
    if changed:
        report["status"] = "tampered"
        report["score"] = 0
        report["problems"].append("the submission changed the grader's package on disk ("
                                  + ", ".join(changed) + "): restored, and the submission gets 0")
    return report


def _finish(report, progress=""):
    """After a submission: write its report, say it (after ``progress``, e.g. "[3/40] ")."""
    try:
        write_report(report, Path(report["report"]))
    except OSError as exc:
        report["problems"].append(f"its report could not be written: {exc}")
    print(progress + summary_line(report), flush=True)
    return report


def _printable(path):
    """A file's name as text whatever its bytes (a name that is not UTF-8 gets U+FFFD for each bad byte)."""
    return os.fsencode(path).decode("utf-8", "replace")


def ungraded(reports):
    """How many of ``reports`` could not be graded (the grader itself failed on them)."""
    return sum(r.get("status") in NOT_GRADED for r in reports)


def _internal_error(name, assignment_id, exc):
    return {"submission": name, "assignment": assignment_id, "status": "grader error", "score": None, "max_score": 0,
            "automatic_max": 0, "manual_pending": 0, "questions": [], "reference_calls": [],
            "problems": [f"internal grader error: {type(exc).__name__}: {exc}", traceback.format_exc(limit=3)]}


def _not_graded(name, assignment_id, exc, attempts):
    report = _internal_error(name, assignment_id, exc)
    report["status"] = "not graded"
    report["problems"] = [f"not graded (for you to decide, not the submission's 0): {exc}" if isinstance(exc, SeveralNames)
                          else f"not graded (the grader's failure, not the submission's; tried {attempts} time(s)): "
                          f"{type(exc).__name__}: {str(exc)[:300]}. Grade it again with --regrade."]
    return report


# ----------------------------------------------------------------------------- the command line

def _positive(text):
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _peak_memory_mib():
    """The grader's own peak resident memory. On Linux, VmHWM of this process image: ru_maxrss would
    also count the memory of whatever process forked the grader (the kernel keeps the larger of the
    two across exec), e.g. a test runner that had grown to gigabytes."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform != "darwin" else 2 ** 20)


def _arguments():
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.instructor.grading", description=__doc__.splitlines()[0])
    parser.add_argument("submission", type=Path, nargs="?",
                        help="a submitted notebook (.ipynb), or a folder of them (none: --release from --reports)")
    parser.add_argument("--report", type=Path, help="one submission: where to write the JSON report (.md beside it)")
    parser.add_argument("--csv", type=Path, help="a folder: where to write the gradebook CSV")
    parser.add_argument("--reports", type=Path, help="a folder: where to write the reports "
                                                     "(default: <csv name>_reports beside the CSV)")
    parser.add_argument("--course", type=Path, help="the course configuration (TOML): points, partial credit, "
                        "mode, deadlines (default: course.toml beside the problem sets)")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at once, each in its own sandbox")
    parser.add_argument("--manual", type=Path, help="the manual-points CSV (submission,question,points,comment) to "
                        "merge; a template is written beside the gradebook when there is none")
    parser.add_argument("--release", type=Path, help="write each student's feedback (Markdown and HTML) here")
    parser.add_argument("--practice", action="store_true",
                        help="with --release: the checks' practice-mode words (the formula), for after the deadline")
    parser.add_argument("--regrade", type=Path, help="a report (.json): grade its submission again on the same "
                        "check inputs, keep the instructor's points, update the report and the gradebook")
    parser.add_argument("--submitted-times", type=Path, help="a CSV (submission,submitted_at in ISO 8601) of "
                        "when each was handed in, for the late policy")
    parser.add_argument("--late-from-mtime", action="store_true", help="take each file's modification time as "
                        "its submission time (only if the files kept the times the LMS gave them)")
    parser.add_argument("--roster", type=Path, help="Canvas: the gradebook export CSV of the class")
    parser.add_argument("--canvas-csv", type=Path, help="Canvas: where to write the gradebook import CSV (needs --roster)")
    parser.add_argument("--allow-pending", action="store_true", help="write --canvas-csv although some written "
                        "answers have no manual points yet (refused otherwise: Canvas takes the score as final)")
    parser.add_argument("--canvas-column", help="Canvas: the assignment's column, e.g. 'Problem set 1 (12345)'")
    parser.add_argument("--gradescope-bundle", type=Path, help="write a Gradescope autograder zip for --assignment")
    parser.add_argument("--wheel", type=Path, help="with --gradescope-bundle: the course's wheel to ship in the zip and "
                        "install (your own questions' code included); else setup.sh installs this version's release")
    parser.add_argument("--timeout", type=_positive, default=DEFAULT_TIMEOUT, help="seconds allowed per cell")
    parser.add_argument("--notebook-timeout", type=_positive, default=DEFAULT_NOTEBOOK_TIMEOUT,
                        help="seconds allowed per submission, checks included")
    parser.add_argument("--memory", type=_positive, default=DEFAULT_MEMORY, help="MiB of memory for the kernel")
    parser.add_argument("--grader-memory", type=_positive, default=DEFAULT_GRADER_MEMORY,
                        help="MiB for the grader's side of one submission (its worker process)")
    parser.add_argument("--scratch", type=_positive, default=_sandbox.DEFAULT_SCRATCH,
                        help="MiB of files one sandbox may write")
    parser.add_argument("--max-output", type=_positive, default=DEFAULT_MAX_OUTPUT,
                        help="MiB a notebook may print before its kernel is killed")
    parser.add_argument("--assignment", choices=sorted(assignments.ASSIGNMENTS), help="override the detection")
    parser.add_argument("--folder", type=Path, help="the instructor notebooks' folder, hidden from the kernel "
                                                    "(default: the package's book/assignments, if it exists)")
    parser.add_argument("--gradescope", type=Path, help="one submission: also write Gradescope's results.json here")
    parser.add_argument("--self-test", action="store_true", help="accept instructor versions (to check that "
                                                                 "they get full marks)")
    parser.add_argument("--no-sandbox", action="store_true", help="run the kernels without bubblewrap, as your "
                        "user (for notebooks you trust; every report says so)")
    return parser


def _warn_shipped_course(course_file, aid):
    """Say what of the course file the Gradescope zip carries, where any submission can read it (no sandbox
    there), and what it leaves out: the students' extensions and the comments."""
    if course_file is None:
        return
    shipped = _course.without_extensions(course_file)
    for key, what, advice in (("rubric", "its rubrics", "keep model answers out of the rubrics you ship"),
                              ("variant", "its class variants' seeds", "pick a new seed for each class, since "
                               "a seed used again tells a later class's forms")):
        if re.search(rf"^\s*{key}\s*=", shipped, re.M):
            print(f"warning: {course_file} goes into the zip with {what} included; on Gradescope a submission "
                  f"runs without the sandbox and could read them: {advice}", file=sys.stderr)
    if _course.load(course_file).extensions:
        print(f"warning: the zip's copy of {course_file} leaves out its [<set>.extensions] tables and its comments "
              "(students' ids and your notes, which a submission could read there): on Gradescope give extensions "
              f"in Gradescope itself, whose deadlines apply to {aid}", file=sys.stderr)


def _submitted_times(args, paths, whole_folder=True):
    """When each path was handed in: from --submitted-times, else the files' times with --late-from-mtime.
    ``whole_folder``: ``paths`` are every file graded, so a row of the times file that names none is said."""
    from datetime import datetime, timezone
    times = {}
    if args.late_from_mtime:
        times = {p: datetime.fromtimestamp(p.lstat().st_mtime, timezone.utc) for p in paths}   # a link: its own time (links are not graded)
    if args.submitted_times:
        with args.submitted_times.open(newline="", encoding="utf-8-sig") as f:
            given = {row["submission"]: datetime.fromisoformat(row["submitted_at"]) for row in csv.DictReader(f)}
        times.update({p: given[p.name] for p in paths if p.name in given})
        _warn_unmatched_times(args.submitted_times, given, paths, whole_folder)
    naive = [p.name for p, t in times.items() if t.tzinfo is None]
    if naive:
        raise ValueError(f"{args.submitted_times}: submitted_at needs its time zone (2027-02-01T23:59:00+00:00), "
                         f"not given for {', '.join(naive[:3])}")
    return times


def _warn_unmatched_times(times_file, given, paths, whole_folder):
    """Name the rows of the times file that match no file graded, and the files it has no row for: a file
    renamed (a resubmission's "-1") would otherwise lose its time, and so its late penalty, without a word."""
    names = {p.name for p in paths}
    unmatched = sorted(set(given) - names) if whole_folder else []
    if unmatched:
        print(f"warning: {len(unmatched)} row(s) of {times_file} match no file graded, so their times were not used: "
              f"{', '.join(unmatched)} (expected a submission's file name, as in the folder)", file=sys.stderr)
    missing = sorted(names - set(given))
    if missing:
        print(f"warning: {times_file} has no row for {len(missing)} file(s), graded without a time from it: "
              f"{', '.join(missing)}", file=sys.stderr)


def _warn_extensions(course, aid, paths):
    """Name the extension keys of ``aid`` that match no file graded (a mistyped id or name would leave that
    student's extension unapplied without a word)."""
    unmatched = course.unmatched_extensions(aid, paths)
    if unmatched:
        print(f"warning: {len(unmatched)} key(s) of [{aid}.extensions] in {course.path} match no submission, so "
              f"their extensions were not applied: {', '.join(unmatched)} (expected a Canvas user id, as in "
              "smithjane_12345_..., or the start of a file's name)", file=sys.stderr)


def _warn_late(reports):
    """Say where the late policy could not be applied, or where its times disagree with Canvas's LATE mark
    (a file name carries the mark, not the time, so the mark alone cannot set a penalty)."""
    from . import lms
    from .release import _one_line

    def canvas_late(r):
        parsed = lms.parse_canvas_name(r["submission"])
        return parsed is not None and parsed.late
    no_time = [r for r in reports if (r.get("late") or {}).get("note") == _course.NO_TIME]
    if no_time:
        marked = [_one_line(r["submission"]) for r in no_time if canvas_late(r)]
        print(f"warning: {len(no_time)} submission(s) of a set with a deadline have no submission time, so the late "
              "policy was not applied to them: grade with --submitted-times FILE.csv or --late-from-mtime"
              + (f"; Canvas marks {len(marked)} of them LATE: {', '.join(marked)}" if marked else ""), file=sys.stderr)
    on_time = [_one_line(r["submission"]) for r in reports if canvas_late(r) and (r.get("late") or {}).get("submitted")
               and not (r["late"].get("note") or "")]
    if on_time:
        print(f"warning: Canvas marks {len(on_time)} submission(s) LATE whose given submission time is before the "
              f"deadline, so no penalty was applied: check the times (a file's modification time is often when it "
              f"was unzipped): {', '.join(on_time)}", file=sys.stderr)


class PendingPoints(ValueError):
    """Written answers not graded yet, where a step needs every point (the Canvas import)."""


def _after_grading(args, reports, csv_path, regraded=None):
    """Manual points, feedback and the LMS files, from the reports: the same whether just graded or not.
    ``regraded``: the one report a --regrade graded again, whose late warnings alone are said."""
    from . import release
    if csv_path is not None:   # the template, or the rows it lacks for files graded since (written answers)
        template = csv_path.with_name(csv_path.stem + "_manual.csv")
        existed = template.exists()
        added = release.manual_template(reports, template) if existed or args.manual is None else []
        if added and existed:
            print(f"manual points: {len(added)} row(s) added to {template} for written answers it had none for "
                  f"(e.g. {added[0][0]} {added[0][1]}): fill them in")
        elif added:
            print(f"manual points: fill in {template} and pass it with --manual")
        page = csv_path.with_name(csv_path.stem + "_written_answers.md")
        if release.written_answers_page(reports, page):   # one question across the class, in one read
            print(f"manual points: every written answer, question by question, with its rubric: {page}")
    if args.manual is not None:
        notes = []
        release.merge_manual(reports, release.read_manual(args.manual), notes)
        for note in notes:
            print(f"manual points: {note}")
        print(f"manual points: {args.manual} merged into {len(reports)} report(s)")
    _warn_mixed(reports)
    pending = [r for r in reports if r.get("manual_pending")]
    if args.canvas_csv is not None and pending and not args.allow_pending:   # an LMS takes the number as final:
        # refused before feedback is released or the import written (the reports and the template are kept)
        withheld = "no feedback was released by this command and no Canvas import written" if args.release else \
            "no Canvas import was written"
        raise PendingPoints(f"{len(pending)} submission(s) have written answers not graded yet (e.g. "
                            f"{release.report_name(pending[0])}: {pending[0]['manual_pending']} points), so {withheld}: "
                            "fill in the manual-points file and pass it with --manual, or pass --allow-pending to "
                            "export the scores without them")
    if args.manual is not None:
        for r in reports:
            try:
                release.write_report(r, Path(r["report"]))
            except OSError as exc:
                r["problems"].append(f"its report could not be written: {exc}")
    if csv_path is not None:
        release.write_gradebook(reports, csv_path)
    if args.release is not None:
        if pending:   # released all the same: the feedback says "to grade" for those answers
            print(f"warning: {len(pending)} submission(s) have written answers not graded yet (e.g. "
                  f"{release.report_name(pending[0])}): their feedback says 'to grade'; merge --manual first "
                  "to release final feedback", file=sys.stderr)
        print(f"feedback: {release.release(reports, args.release, practice=args.practice)}")
        for r in reports:   # where it went, so that a --regrade, a --manual merge or grading the folder again
            # rewrites it there (released feedback never goes stale)
            r["released"] = {"folder": str(Path(args.release).resolve()), "practice": bool(args.practice)}
            with contextlib.suppress(OSError):
                release.write_report(r, Path(r["report"]))
    elif args.manual is not None or args.submission is not None:   # points merged or graded anew since the release
        _rewrite_released(reports)
    _warn_late(reports if regraded is None else [regraded])
    if args.canvas_csv is not None:
        from . import lms
        notes = []
        unmatched = lms.canvas_import_csv(reports, lms.read_roster(args.roster), args.canvas_column, args.canvas_csv,
                                          notes)
        for note in notes:
            print(f"Canvas import: {note}")
        print(f"Canvas import: {args.canvas_csv}" + (f"; not on the roster: {', '.join(unmatched)}" if unmatched else ""))


def _rewrite_released(reports):
    """Rewrite the feedback of every report that records a release, where it went and in its words (graded or
    practice), with the report's grade now; say where, or warn which feedback is out of date."""
    from . import release
    groups = {}
    for r in reports:
        where = r.get("released")
        if isinstance(where, dict) and where.get("folder"):
            groups.setdefault((where["folder"], bool(where.get("practice"))), []).append(r)
    for (folder, practice), group in groups.items():
        failed = [release.report_name(r) for r in group if r.get("status") in NOT_GRADED]
        if failed:   # the grader's own failure never replaces a student's feedback with "not graded"
            print(f"warning: the feedback released in {folder} is left as it was for {', '.join(failed)}, which could "
                  "not be graded this time: it is rewritten when a --regrade grades them", file=sys.stderr)
            group = [r for r in group if r.get("status") not in NOT_GRADED]
        if not group:
            continue
        try:
            release.release(group, folder, practice=practice)
        except OSError as exc:
            names = ", ".join(release.report_name(r) for r in group)
            print(f"warning: the feedback released in {folder} is out of date for {names}: it could not be rewritten "
                  f"({exc}); release it again with --release {folder}", file=sys.stderr)
            continue
        print(f"feedback: rewritten in {folder}, where it was released ({len(group)} report(s))")


def _warn_mixed(reports):
    """A warning, naming them, when the reports were graded under different course files or out of different
    maximum scores (one graded again after the course file was edited): a gradebook column mixes two policies."""
    def policy(r):   # an extension's edit is one student's: it does not mix two policies
        used = r.get("graded_with") or {}
        return used.get("course_policy_sha256") or used.get("course_sha256")

    for what, key in (("course files", policy),
                      ("maximum scores", lambda r: r.get("max_score"))):
        groups = {}
        for r in reports:
            if r.get("status") not in NOT_GRADED and key(r) is not None:
                groups.setdefault(key(r), []).append(Path(r.get("report") or r["submission"]).stem)
        if len(groups) > 1:
            fewest = min(groups.values(), key=len)
            print(f"warning: these reports were graded under {len(groups)} different {what}: "
                  f"{', '.join(fewest[:8])} differ from the rest; grade the folder again to treat every student alike",
                  file=sys.stderr)


def main(argv=None):
    for stream in (sys.stdout, sys.stderr):   # a file name the console cannot encode must not stop the batch
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = _arguments()
    args = parser.parse_args(argv)
    if args.regrade is not None:
        _regrade_settings(args)
    if args.gradescope_bundle:
        if not args.assignment:
            parser.error("--gradescope-bundle needs --assignment")
        from . import lms
        try:
            lms.gradescope_bundle(args.gradescope_bundle, args.assignment, course_file=args.course, folder=args.folder,
                                  wheel=args.wheel)
        except ValueError as exc:
            parser.error(f"--gradescope-bundle: {exc}")
        print(f"Gradescope autograder: {args.gradescope_bundle}")
        if args.course is not None and _course.load(args.course).deadline(args.assignment) is not None:
            print(f"warning: {args.assignment} has a deadline in {args.course}, but on Gradescope the grader is given no "
                  "submission time, so the course's late policy is not applied there: use Gradescope's own late policy",
                  file=sys.stderr)
        _warn_shipped_course(args.course, args.assignment)
        if args.submission is None:
            return 0
    if args.canvas_csv and not (args.roster and args.canvas_column):
        parser.error("--canvas-csv needs --roster and --canvas-column")
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, got {args.jobs}")
    try:
        course = _course.load(args.course)  # a mistake in it is said before any grading starts
    except (OSError, ValueError) as exc:
        print(f"cannot read the course configuration: {exc}", file=sys.stderr)
        return 2
    folder = (args.folder or assignments.FOLDER).resolve()  # the instructor versions
    grades = args.submission is not None or args.regrade is not None   # not a merge or release from --reports
    mismatch = handout_mismatch(course, folder) if grades else ""
    if mismatch:
        print(f"cannot grade: {mismatch}", file=sys.stderr)
        return 2
    options = {"assignment_id": args.assignment, "timeout": args.timeout, "self_test": args.self_test, "folder": folder,
               "notebook_timeout": args.notebook_timeout, "memory": int(args.memory), "max_output": args.max_output,
               "sandboxed": not args.no_sandbox, "course_file": args.course, "scratch": int(args.scratch)}
    if not args.no_sandbox:
        options["grader_memory"] = args.grader_memory
    if args.submission is None and args.regrade is None:
        if not args.reports:
            parser.error("without a submission, give --reports DIR (to merge manual points and release feedback), "
                         "or --regrade REPORT.json")
        try:
            _after_grading(args, _release_reports(args.reports), args.csv)
        except PendingPoints as exc:
            print(f"not exported: {exc}", file=sys.stderr)
            return 2
        except (OSError, ValueError) as exc:
            print(f"cannot merge or release: {exc}", file=sys.stderr)
            return 2
        return 0
    if not args.no_sandbox:
        try:
            _sandbox.check_sandbox()
        except _sandbox.SandboxUnavailable as exc:
            print(f"cannot grade: {exc}", file=sys.stderr)
            return 2
    if args.regrade is not None:
        try:
            return _regrade(args, options)
        except PendingPoints as exc:
            print(f"graded again, not exported: {exc}", file=sys.stderr)
            return 2
    batch = args.submission.is_dir()
    if batch and not args.csv:
        parser.error("grading a folder needs --csv GRADES.csv")
    if batch and not args.assignment:  # decided by the instructor, never by what a notebook says of itself
        parser.error("grading a folder needs --assignment (one assignment per folder), e.g. --assignment "
                     + sorted(assignments.ASSIGNMENTS)[0])
    if not batch and not args.report:
        parser.error("grading one notebook needs --report REPORT.json")
    if batch:
        reports_dir = args.reports or args.csv.with_name(args.csv.stem + "_reports")
        hide = [folder, args.submission, reports_dir, args.csv]
        # links, folders and other things that are not notebooks of their own get a row saying so, not a grade
        paths = sorted(p for p in args.submission.iterdir() if p.suffix == ".ipynb")
        _warn_extensions(course, args.assignment, paths)
        try:
            reports = grade_many(paths, reports_dir, args.csv, hide=hide, jobs=args.jobs,
                                 submitted=_submitted_times(args, paths), **options)
            _after_grading(args, reports, args.csv)
        except PendingPoints as exc:
            print(f"graded, not exported: {exc}", file=sys.stderr)
            return 2
        except (OSError, ValueError, KeyError) as exc:
            print(f"could not grade or write the reports: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        warnings = {w for r in reports for w in r.get("isolation", {}).get("warnings", [])}
        for w in sorted(warnings):
            print(f"warning: {w}", file=sys.stderr)
        stopped = sum(r.get("status") == "stopped" for r in reports)
        if stopped:
            print(f"{stopped} submission(s) stopped the grader's worker and got 0: look at them (status 'stopped')",
                  file=sys.stderr)
        failed = ungraded(reports)
        if failed:
            print(f"{failed} submission(s) could not be graded: see their rows (status 'not graded' or "
                  "'grader error') and grade them again with --regrade", file=sys.stderr)
        def handout_problem(p):   # a problem string that says the notebook is not this handout's
            return "does not match the assignment" in p or "handed out" in p

        def wrong_handout(r):
            return any(handout_problem(p) for p in r.get("problems", []))

        def lost_tag(r):
            return any(q.get("tag_missing") for q in r.get("questions", []))

        def other(r):   # a problem that is neither of the two above
            return any(not (handout_problem(p) or "lost its tag" in p) for p in r.get("problems", []))

        flags = {"uses of reference functions or autograd": [r for r in reports if r.get("reference_calls")],
                 "late": [r for r in reports if (r.get("late") or {}).get("kept", 1) < 1],
                 "not this handout or a question missing": [r for r in reports if wrong_handout(r)],
                 "a written answer's cell without its tag (grade it from the added cells)":
                     [r for r in reports if lost_tag(r)],
                 "other problems (a cell's error, ...)": [r for r in reports if other(r)]}
        for what, which in flags.items():   # the rows to read first, out of a class's, by name
            if which:
                names = ", ".join(Path(r.get("report") or r["submission"]).stem for r in which[:8])
                print(f"to look at, {what}: {len(which)} ({names}{', ...' if len(which) > 8 else ''})")
        print(f"{len(reports)} submission(s); gradebook: {args.csv}; reports: {reports_dir}; "
              f"grader peak memory: {max(_peak_memory_mib(), _WORKER_PEAK.get('mib', 0))} MiB")
        return 1 if failed else 0
    hide = [folder, args.submission, args.report.parent if args.report.parent != Path(".") else None]
    guard = _PackageGuard() if args.no_sandbox else None
    submitted = _submitted_times(args, [args.submission], whole_folder=False).get(args.submission)
    task = (str(args.submission), _bytes_or_error(args.submission), args.report, submitted,
            os.path.abspath(args.submission))
    report = _grade_tasks([task], {**options, "hide": hide}, 1, guard)[0]
    report["submission"] = _printable(args.submission)
    try:
        write_report(report, args.report)
        if args.gradescope:
            args.gradescope.parent.mkdir(parents=True, exist_ok=True)
            _write_new(args.gradescope, json.dumps(gradescope_results(report), indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        print(f"could not write the report to {args.report}: {exc}", file=sys.stderr)
        return 2
    print(summary_line(report))
    for w in report.get("isolation", {}).get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    _warn_late([report])   # as a batch says it: a deadline and no time means no late policy
    print(f"report: {args.report} and {args.report.with_suffix('.md')}")
    return 1 if ungraded([report]) else 0


def _bytes_or_error(path, raising=False):
    """A submitted file's bytes, read as untrusted: never through a link, never from a pipe or a device,
    never a file with a second name (a hard link to a classmate's), never more than MAX_NOTEBOOK + 1
    bytes. A ``Refused`` (the submission's doing) or the OSError (the grader's failure) otherwise,
    returned (raised with ``raising``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        failure = exc
        if os.path.islink(path):
            failure = Refused("the submission is a link to another file, not a notebook of its own: not opened")
        if raising:
            raise failure from None
        return failure
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            failure = Refused("the submission is not a regular file: not opened")
        elif info.st_nlink > 1:
            failure = SeveralNames(f"the file has {info.st_nlink} names (hard links; another may be a classmate's): "
                                   "not opened. Whose it is, you decide: keep one name and grade it with --regrade")
        else:
            return f.read(MAX_NOTEBOOK + 1)
    if raising:
        raise failure
    return failure


def _release_reports(folder):
    """The reports of an earlier grading, read back for --manual and --release."""
    from . import release
    reports = release.load_reports(folder)
    if not reports:
        raise ValueError(f"no reports (*.json) in {folder}")
    return reports


def _regrade_settings(args):
    """--regrade with the course file and instructor folder the report was graded with, unless given:
    grading again under another course file (the default's practice mode, the published forms) would
    change the grade without a word."""
    try:
        old = json.loads(args.regrade.read_text(encoding="utf-8"))
        used, used_assignment = old.get("graded_with") or {}, old.get("assignment")
    except (OSError, ValueError, AttributeError):
        return   # _regrade says what is wrong with the file
    for name, given in (("course", args.course), ("folder", args.folder)):
        if used.get(name) is None:
            continue
        if given is None:
            setattr(args, name, Path(used[name]))
            print(f"--regrade: --{name} {used[name]}, as the report was graded")
        elif Path(given).resolve() != Path(used[name]):
            print(f"warning: the report was graded with --{name} {used[name]}; grading it again with {given}",
                  file=sys.stderr)
    if args.course is not None and used.get("course") and Path(args.course).resolve() == Path(used["course"]) \
            and used.get("course_sha256") not in (None, _file_sha256(args.course)):
        _warn_course_changed(used)
    if args.assignment is None and used_assignment:   # not what the notebook says of itself now
        args.assignment = used_assignment
        print(f"--regrade: --assignment {used_assignment}, as the report was graded")
    if args.csv is None and old.get("gradebook"):   # the folder's gradebook, so that it is never left stale
        args.csv = Path(old["gradebook"])
        print(f"--regrade: --csv {args.csv}, the gradebook its folder was graded into")
    elif args.csv is None:
        print("--regrade: the gradebook is not rebuilt without --csv", file=sys.stderr)


def _warn_course_changed(used):
    """Say what a --regrade under a course file edited since the report (``graded_with``: ``used``) means for
    the class: only where the points or the policy changed must the whole folder be graded again."""
    policy = used.get("course_policy_sha256")   # None in a report graded before it was recorded: cannot tell
    if policy is not None and policy == _policy_sha256(used["course"]):   # extensions or comments alone differ
        print(f"note: {used['course']} has changed since the report was graded, but only in its [<set>.extensions] "
              "tables (or comments): regrading the students whose extensions changed is enough, the others' grades "
              "stand", file=sys.stderr)
        return
    print(f"warning: {used['course']} has changed since the report was graded: this submission is graded under the "
          "new points and partial credit, the others keep the old until graded again (grade the folder again to "
          "treat every student alike; your manual points are kept)", file=sys.stderr)


def _regrade(args, options):
    """Grade one report's submission again on the check inputs it had, keep the instructor's points and
    comments, rewrite the report, and rebuild the gradebook from its folder's reports."""
    old = json.loads(args.regrade.read_text(encoding="utf-8"))
    path = Path(os.fsdecode(bytes.fromhex(old["source_bytes"]))) if old.get("source_bytes") else \
        Path(old.get("source") or old["submission"])
    offset = (old.get("isolation") or {}).get("input_seed_offset")
    submitted = old.get("late", {}).get("submitted")
    submitted = _datetime(submitted) if submitted else None
    source = _bytes_or_error(path)
    if isinstance(source, bytes) and old.get("sha256") not in (None, hashlib.sha256(source).hexdigest()):
        print(f"warning: {path} changed since it was graded (a new file, with the old submission time): "
              "graded again as it is now", file=sys.stderr)
    task = (old["submission"], source, args.regrade, submitted, path)
    hide = [options["folder"], path.parent, args.regrade.parent]
    options = {**options, "hide": hide, "seed_offset": offset}
    report = _grade_tasks([task], options, 1)[0]
    _keep_instructor_marks(old, report)
    if args.csv is not None:   # the gradebook it goes into, for the next --regrade without --csv
        report["gradebook"] = str(Path(args.csv).resolve())
    if args.release is None:   # the student's feedback, if released, rewritten where it went with the new grade
        _rewrite_released([report])   # (_keep_instructor_marks kept the record of where)
    write_report(report, args.regrade)
    print(summary_line(report))
    csv_path = args.csv
    if csv_path is not None:
        _after_grading(args, _release_reports(args.regrade.parent), csv_path, regraded=report)
        print(f"gradebook updated: {csv_path}")
    else:
        _warn_late([report])
    return 1 if ungraded([report]) else 0


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: where a grader that seems stuck is
    # the module under its own name, not __main__'s copy: what a worker sends back (Refused, reports) is
    # pickled by the name the worker imports
    from bayesattn_lite.instructor import grading
    sys.exit(grading.main())
