"""The autograder: run a submitted notebook in a sandbox, decide each question in the grader, write reports.

    python -m bayesattn_lite.instructor.grading SUBMISSION.ipynb --report REPORT.json      # one submission
    python -m bayesattn_lite.instructor.grading DIR --csv grades.csv [--reports DIR2]        # every .ipynb in DIR
    options: --timeout 60 (s per cell)  --notebook-timeout 900  --memory 4096 (MiB)  --max-output 16 (MiB)
             --assignment ID  --folder INSTRUCTOR_FOLDER  --self-test (grade instructor versions)
             --no-sandbox (trusted notebooks only: no bubblewrap)

What it does, for each submission:

1. reads the file (never writes it): a file that is not a notebook gets a report saying so;
2. finds the assignment (``--assignment``, else the notebook metadata ``bayesattn_lite.assignment``, else
   the file name), checks that the notebook has the assignment's question cells, and rejects an
   instructor version (metadata ``version: instructor``, cells tagged ``instructor`` or solution
   markers) unless ``--self-test``;
3. executes the code cells in a fresh kernel inside a bubblewrap sandbox (``bayesattn_lite.instructor._sandbox``:
   new user, mount, PID and network namespaces, as root or not; a file system of Python, the system's
   libraries and a temporary folder, nothing else; limits on time, memory and output); a cell that
   runs too long is interrupted, and a kernel that does not stop is ended with everything it started.
   Where bubblewrap cannot start, the grader refuses and says how to fix it; ``--no-sandbox`` grades
   trusted notebooks without one and says so in every report;
4. decides each checked question **in the grader's own process**: the ``bayesattn_lite.checks``
   function is called here, on stand-ins for the learner's objects, with inputs drawn from a fresh
   random seed offset for each submission (``checks._engine.SEED_OFFSET``). Calling a stand-in sends the
   arguments to the kernel as data (numbers, arrays), runs the learner's function there and brings the
   result back as data, rebuilt into plain tensors; a value (a string, a dict of numbers) is fetched
   the same way. The notebook cannot reach the check, the comparison or the report, and nothing it
   prints is read (its ``bayesattn_lite.checks`` is a stand-in: the checks' references stay here);
5. a written answer (``Question.check is None``) is reported with its rubric and the learner's text
   (the Markdown cells tagged ``answer-<id>``), points empty, for the instructor;
6. writes REPORT.json and REPORT.md (for the learner); in a batch, one report per submission and a
   gradebook CSV, whatever any submission did.

Exit status 0 when every submission was graded and the reports written; 1 when some could not be
graded (the grader failed on them: each still has a report and a row, and the count is printed); 2
when the reports could not be written (bad arguments, an unwritable path) or no sandbox can start.
"""

import argparse
import ast
import concurrent.futures
import contextlib
import csv
import io
import json
import math
import os
import re
import secrets
import sys
import time
import traceback
from pathlib import Path

from ..checks import _engine as check_engine
from . import _sandbox, assignments

DEFAULT_TIMEOUT = 60  # seconds per cell (and per call of a learner's function by a check)
DEFAULT_NOTEBOOK_TIMEOUT = 900  # seconds for the whole submission, checks included
DEFAULT_MEMORY = 4096  # MiB of address space for the kernel
DEFAULT_MAX_OUTPUT = 16  # MiB the notebook may print before its kernel is killed
MAX_NOTEBOOK = 20 * 2 ** 20  # bytes: a larger file is not executed
MAX_CELLS = 2000  # cells: a notebook with more is not executed (the problem sets have about 30)
MAX_READ_CELL = 2 ** 18  # characters: a larger code cell still runs, but the grader does not parse it
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

def _read(source):
    """(notebook, None) or (None, a sentence saying why it is not a readable notebook). ``source`` is a
    path or the file's bytes."""
    import nbformat
    try:
        raw = source if isinstance(source, bytes) else Path(source).read_bytes()
    except OSError as exc:
        return None, f"the file could not be read: {type(exc).__name__}: {exc}"
    if len(raw) > MAX_NOTEBOOK:
        return None, f"the file is larger than {MAX_NOTEBOOK // 2 ** 20} MiB: not executed (clear the outputs)"
    try:  # plain JSON first (linear time), and the cell count checked before nbformat reads it
        data = json.loads(raw.decode("utf-8"))
        cells = data.get("cells") if isinstance(data, dict) else None
        if isinstance(cells, list) and len(cells) > MAX_CELLS:
            return None, f"the notebook has {len(cells)} cells, more than {MAX_CELLS}: not executed"
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat and the decoder raise several kinds
        return None, f"the file is not a Jupyter notebook (invalid JSON or notebook format): {str(exc)[:300]}"
    if not isinstance(nb.get("cells"), list) or not all(isinstance(c, dict) and "source" in c for c in nb.cells):
        return None, "the file is not a Jupyter notebook: it has no list of cells"
    return nb, None


def identify(nb, path, override=None):
    """The assignment id: ``override``, else the notebook metadata, else the file name; None if unknown."""
    if override:
        return override if override in assignments.ASSIGNMENTS else None
    meta = (nb or {}).get("metadata", {}).get("bayesattn_lite", {}) if nb else {}
    if isinstance(meta, dict) and meta.get("assignment") in assignments.ASSIGNMENTS:
        return meta["assignment"]
    stem = Path(path).stem
    return next((a for a in sorted(assignments.ASSIGNMENTS, key=len, reverse=True) if stem.startswith(a)), None)


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
    from IPython.core.inputtransformer2 import TransformerManager
    names = set()
    for cell in nb.cells:
        if cell.cell_type != "code" or len(cell.source) > MAX_READ_CELL:
            continue
        try:
            tree = ast.parse(TransformerManager().transform_cell(cell.source))
        except (SyntaxError, ValueError):
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
    import re
    return {w for c in nb.cells if c.cell_type == "code" for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", c.source)}


def structure_problems(nb, assignment):
    """What the notebook lacks of the assignment's questions: a code cell defining (or, unanswered,
    naming) each checked question's objects, a Markdown cell tagged ``answer-<id>`` for each written answer."""
    defined = _defined_names(nb) | _mentioned_names(nb)
    tags = {t for c in nb.cells if c.cell_type == "markdown" for t in _tags(c)}
    missing = []
    for q in assignment.questions:
        if _written(q):
            if _answer_tag(q) not in tags:
                missing.append(f"{q.id}: no Markdown cell tagged {_answer_tag(q)!r} (the written answer)")
        else:
            absent = [n for n in q.names if n not in defined]
            if absent:
                missing.append(f"{q.id}: no code cell defines {', '.join('`' + n + '`' for n in absent)}")
    checked = [q for q in assignment.questions if not _written(q)]
    if checked and all(any(m.startswith(f"{q.id}:") for m in missing) for q in checked):
        return [f"this notebook does not look like {assignment.id} ({assignment.title}): none of its question "
                "cells was found; is it the right file, or pass --assignment"]
    return [f"the notebook does not match the assignment: {m}" for m in missing]


def written_answer(nb, question):
    """The learner's text for a written question: its Markdown cells tagged ``answer-<id>``, joined."""
    text = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown" and _answer_tag(question) in _tags(c))
    return text[:MAX_ANSWER_TEXT] + (" [...]" if len(text) > MAX_ANSWER_TEXT else "")


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
    """(passed, feedback) of one checked question: its check runs here, on stand-ins."""
    try:
        objects, problem = _learner_objects(sandbox, question.names, timeout)
        if problem:
            return False, problem
        result = question.check(*objects)
        passed = bool(result) and getattr(result, "passed", True) is True
        feedback = str(getattr(result, "message", result))
    except Exception as exc:  # noqa: BLE001 - a learner's object may make a check fail in any way
        return False, f"the check could not run: {type(exc).__name__}: {str(exc)[:300]}"
    stubs = [o.stub for o in objects if isinstance(o, _Remote) and o.stub is not None]
    if stubs and not passed:  # a stub nobody filled in: say so, with its hint
        feedback = f"not answered yet: the function still raises NotImplementedError ({stubs[0][:300]})."
    return passed, feedback


# ----------------------------------------------------------------------------- one submission

NO_SANDBOX_WARNING = ("graded with --no-sandbox: the kernel ran as the grader's user, with the grader's files "
                      "and network (the package's files are checked and restored after each submission); use it "
                      "only for notebooks you trust")


def _isolation(info):
    """The report's account of how the kernel was isolated, with a warning where it was not."""
    return {**info, "warnings": [] if info.get("sandbox", "").startswith("bubblewrap") else [NO_SANDBOX_WARNING]}


def _new_sandbox(limits, hide):
    """A kernel for one submission, not started yet."""
    return _sandbox.Sandbox(PACKAGE_DIR, hide=hide, notebook_timeout=limits["notebook_timeout"],
                            memory_mb=limits["memory"], max_output_mb=limits["max_output"],
                            replace=KERNEL_REPLACES, leave_out=KERNEL_LEAVES_OUT,
                            sandboxed=limits["sandboxed"])


class _NextSandbox:
    """For a batch: the next submission's kernel starts in a thread while this one is graded, so that a
    kernel's start (about 0.6 s, mostly its Python importing ipykernel) is not waited for. At most one
    kernel waits, idle and in its own sandbox, and no more start than there are submissions left."""

    def __init__(self, count):
        self.left = count
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.waiting = None

    def take(self, limits, hide):
        """A sandbox for this submission (or the error its start raised); the next one starts meanwhile."""
        waiting, self.waiting = self.waiting, None
        if waiting is None:
            self.left -= 1  # this one starts now, by ``with``
        if self.left > 0:
            self.left -= 1
            self.waiting = self.pool.submit(lambda: _new_sandbox(limits, hide).start())
        return waiting.result() if waiting is not None else _new_sandbox(limits, hide)

    @contextlib.contextmanager
    def closed_later(self, box):
        """``with box``, but its end (stopping the kernel, removing its folder) runs in the thread, so
        the next submission does not wait for it; ``close`` waits for every one."""
        try:
            yield box.__enter__()
        finally:
            self.pool.submit(box.close)

    def close(self):
        """End the kernel still waiting, if any, once the ones before it have ended."""
        if self.waiting is not None:
            try:
                self.waiting.result().close()
            except Exception:  # noqa: BLE001 - it failed to start, and left nothing behind
                pass
        self.pool.shutdown()


def _run(nb, assignment, limits, hide, next_sandbox=None):
    """Execute the notebook and decide its questions; (results by question id, problems, isolation)."""
    results, problems = {}, []
    timeout = limits["timeout"]
    # inputs the submission cannot know: the checks are public, so each submission's checks draw their
    # inputs from a fresh random offset of the seeds (the kernel never sees the checks)
    check_engine.SEED_OFFSET = secrets.randbelow(2 ** 31)
    box = next_sandbox.take(limits, hide) if next_sandbox is not None else _new_sandbox(limits, hide)
    with box if next_sandbox is None else next_sandbox.closed_later(box):
        number = 0
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            number += 1  # as the learner counts code cells, empty ones included
            if not cell.source.strip():
                continue
            run = box.execute(cell.source, timeout)
            if run.status == "dead":
                problems.append(f"execution stopped at code cell {number}: {box.dead}")
                break
            if run.status == "interrupted":
                problems.append(f"code cell {number} ran longer than {timeout:g} s and was interrupted")
            elif run.status == "error":
                problems.append(f"code cell {number} raised {run.error}")
        for q in assignment.questions:
            if _written(q):
                continue
            if box.dead:
                results[q.id] = (False, f"not checked: the kernel was stopped ({box.dead})")
                continue
            results[q.id] = _decide(box, q, timeout)
        if box.dead and not any(p.startswith("execution stopped") for p in problems):
            problems.append(f"execution stopped while checking: {box.dead}")
        info = _isolation(box.info)
    info["input_seed_offset"] = check_engine.SEED_OFFSET  # to rerun a check on the same inputs
    return results, problems, info


def _question_entry(q, found, nb):
    if _written(q):
        return {"id": q.id, "title": q.title, "manual": True, "points": None, "max_points": q.points,
                "passed": None, "rubric": getattr(q, "rubric", ""),
                "answer": written_answer(nb, q) if nb is not None else "",
                "instructor_points": None,
                "feedback": "a written answer: your instructor grades it with the rubric"}
    passed, feedback = found
    return {"id": q.id, "title": q.title, "manual": False, "points": q.points if passed else 0,
            "max_points": q.points, "passed": passed, "feedback": feedback}


def grade(source, assignment_id=None, timeout=DEFAULT_TIMEOUT, *, name=None, self_test=False,
          notebook_timeout=DEFAULT_NOTEBOOK_TIMEOUT, memory=DEFAULT_MEMORY, max_output=DEFAULT_MAX_OUTPUT,
          hide=(), folder=None, sandboxed=True, next_sandbox=None):
    """The report of one submission as a dict. ``source`` is a path or the file's bytes (then ``name``
    is its name). Never raises on a bad submission; raises ``_sandbox.SandboxUnavailable`` (saying how
    to fix it) when the sandbox cannot start here, unless ``sandboxed=False`` (trusted notebooks only).
    ``next_sandbox`` (from ``grade_many``) hands out kernels started ahead, with this call's limits."""
    if sandboxed:
        _sandbox.check_sandbox()
    started = time.monotonic()
    name = _printable(name if name is not None else source if isinstance(source, (str, Path)) else "submission")
    nb, problem = _read(source)
    report = {"submission": name, "assignment": None, "status": "graded", "score": 0, "max_score": 0,
              "automatic_max": 0, "manual_pending": 0, "questions": [],
              "problems": [] if problem is None else [problem], "reference_calls": [],
              "limits": {"timeout": timeout, "notebook_timeout": notebook_timeout, "memory_mib": memory,
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
    assignment = assignments.ASSIGNMENTS[aid]
    report["assignment"], report["title"] = aid, assignment.title
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
            report["problems"] += structure_problems(nb, assignment)
    if nb is not None:
        report["reference_calls"] = _reference_calls(nb, aid, folder)
        limits = {"timeout": timeout, "notebook_timeout": notebook_timeout, "memory": memory,
                  "max_output": max_output, "sandboxed": sandboxed}
        try:
            results, problems, report["isolation"] = _run(nb, assignment, limits, hide, next_sandbox)
            report["problems"] += problems
        except Exception as exc:  # noqa: BLE001 - the grader reports, it does not crash
            report["problems"].append(f"the grader could not run the notebook: {type(exc).__name__}: {str(exc)[:300]}")
    for q in assignment.questions:
        found = results.get(q.id) or (False, "not checked: " + (
            "the notebook did not get that far (see the problems above)" if report["status"] == "graded" else
            "the submission was rejected" if report["status"] == "rejected" else "the file could not be read"))
        report["questions"].append(_question_entry(q, found, nb))
    report["score"] = sum(q["points"] or 0 for q in report["questions"])
    report["manual_pending"] = sum(q["max_points"] for q in report["questions"] if q["manual"])
    report["seconds"] = round(time.monotonic() - started, 1)
    return report


def _reference_calls(nb, aid, folder=None):
    """Uses of the package's reference functions in the learner's cells (``assignments``, if it has them)."""
    scan = getattr(assignments, "notebook_reference_calls", None)
    if scan is None:
        return []
    try:
        return list(scan(nb, aid, folder))
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


# ----------------------------------------------------------------------------- reports

def markdown(report):
    """The report in words, for the learner."""
    lines = [f"# Grading report: {report.get('title') or report['submission']}", "",
             f"**Score: {report['score']} / {report['max_score']}**"]
    if report.get("manual_pending"):
        lines.append(f"({report['manual_pending']} of these points are written answers your instructor grades.)")
    lines.append("")
    if report["questions"]:
        lines += ["| Question | Points | Feedback |", "|---|---|---|"]
        for q in report["questions"]:
            mark = "📝" if q.get("manual") else "✅" if q["passed"] else "❌"
            points = "to grade" if q["points"] is None else q["points"]
            feedback = q["feedback"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {mark} {q['id']}: {q['title']} | {points} / {q['max_points']} | {feedback} |")
        lines.append("")
    if report["problems"]:
        lines += ["## Problems while running your notebook", ""] + [f"- {p}" for p in report["problems"]] + [""]
    written = [q for q in report["questions"] if q.get("manual")]
    if written:
        lines += ["## Your written answers (as your instructor reads them)", ""]
        for q in written:
            lines += [f"### {q['id']}: {q['title']}", "", q.get("answer") or "*(no cell tagged answer-" + q["id"] + ")*", ""]
    if report.get("reference_calls"):
        lines += ["## Uses of the course's reference functions (your instructor will look at these)", ""]
        lines += [f"- {c}" for c in report["reference_calls"]] + [""]
    for warning in report.get("isolation", {}).get("warnings", []):
        lines += [f"**Warning:** {warning}.", ""]
    return "\n".join(lines)


def gradescope_results(report):
    """The report in Gradescope's autograder format (``/autograder/results/results.json``): the checked
    questions as tests; written answers are left to Gradescope's manual grading."""
    tests = [{"name": f"{q['id']}: {q['title']}", "score": q["points"], "max_score": q["max_points"],
              "output": q["feedback"], "visibility": "visible"} for q in report["questions"] if not q.get("manual")]
    output = "\n".join(["Problems while running your notebook:"] + [f"- {p}" for p in report["problems"]]
                       ) if report["problems"] else ""
    return {"score": report["score"], "output": output, "tests": tests}


def summary_line(report):
    return (f"{report['submission']}: {report['score']} / {report['max_score']} "
            f"({report['assignment'] or 'unknown assignment'}, {report.get('status', 'graded')}); "
            + "; ".join(f"{q['id']} {'manual' if q.get('manual') else q['points']}/{q['max_points']}"
                        for q in report["questions"])
            + (f"; {len(report['problems'])} problem(s)" if report["problems"] else ""))


def _write_report(report, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    _write_new(path.with_suffix(".md"), markdown(report))


def _write_new(path, text):
    """Write ``text`` to ``path`` through a new file of the grader's (created exclusively, never through
    a link) renamed over it: whatever was at ``path`` before, a planted link included, is replaced,
    never written through."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def gradebook_rows(reports):
    """The CSV header and one row per report: totals, each question's points (empty for a written
    answer, with a ``<id>_manual`` column for the instructor), problems and reference calls."""
    ids, manual = [], []
    for r in reports:
        for q in r["questions"]:
            if q["id"] not in ids:
                ids.append(q["id"])
            if q.get("manual") and q["id"] not in manual:
                manual.append(q["id"])
    header = (["submission", "assignment", "status", "score", "max_score", "manual_pending"]
              + [c for qid in ids for c in ([qid, f"{qid}_manual"] if qid in manual else [qid])]
              + ["problems", "reference_calls", "report"])
    rows = []
    for r in reports:
        by_id = {q["id"]: q for q in r["questions"]}
        row = {"submission": r["submission"], "assignment": r["assignment"] or "", "status": r.get("status", ""),
               "score": r["score"], "max_score": r["max_score"], "manual_pending": r.get("manual_pending", 0),
               "problems": " | ".join(p.replace("\n", " ")[:500] for p in r["problems"]),
               "reference_calls": " | ".join(r.get("reference_calls", [])), "report": r.get("report", "")}
        for qid in ids:
            q = by_id.get(qid)
            row[qid] = "" if q is None or q["points"] is None else q["points"]
            if qid in manual:
                row[f"{qid}_manual"] = ""  # for the instructor
        rows.append([row[h] for h in header])
    return header, rows


def grade_many(paths, reports_dir, csv_path, **options):
    """Grade every file of ``paths``; write one report each into ``reports_dir`` and the gradebook
    ``csv_path``. Every file is read before the first is run, so a submission cannot change another."""
    # without a sandbox the kernel could write the package: it is checked and restored after each one
    guard = None if options.get("sandboxed", True) else _PackageGuard()
    reports_dir.mkdir(parents=True, exist_ok=True)
    sources = {}
    for path in paths:
        try:
            sources[path] = path.read_bytes()
        except OSError as exc:
            sources[path] = exc
    reports, used = [], set()
    next_sandbox = _NextSandbox(len(paths)) if options.get("sandboxed", True) else None
    try:
        for path in paths:
            reports.append(_grade_one(path, sources[path], reports_dir, used, guard, options, next_sandbox))
    finally:
        if next_sandbox is not None:
            next_sandbox.close()
    for report in reports:  # again, now that no kernel is left: what a submission wrote is overwritten
        _write_report(report, Path(report["report"]))
    header, rows = gradebook_rows(reports)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(header)
    writer.writerows(rows)
    _write_new(csv_path, table.getvalue())
    return reports


def _grade_one(path, source, reports_dir, used, guard, options, next_sandbox):
    """One submission of a batch, inside its own error boundary; its report is written as it ends."""
    name = _printable(path)
    stem = re.sub(r"[^\w.-]", "_", Path(name).stem)[:100] or "submission"
    while stem in used:
        stem += "_"
    used.add(stem)
    out = reports_dir / f"{stem}.json"
    try:  # whatever happens to one submission, the batch goes on and it gets a row
        if isinstance(source, Exception):
            raise source
        report = grade(source, name=name, next_sandbox=next_sandbox, **options)
    except Exception as exc:  # noqa: BLE001 - a batch never stops at one submission
        report = _internal_error(name, options.get("assignment_id"), exc)
    if guard is not None:
        changed = guard.restore()
        if changed:
            report["status"] = "tampered"
            report["score"] = 0
            report["problems"].append("the submission changed the grader's package on disk ("
                                      + ", ".join(changed) + "): restored, and the submission gets 0")
    report["report"] = str(out)
    try:
        _write_report(report, out)
    except OSError as exc:
        report["problems"].append(f"its report could not be written: {exc}")
    print(summary_line(report), flush=True)
    return report


def _printable(path):
    """A file's name as text whatever its bytes (a name that is not UTF-8 gets U+FFFD for each bad byte)."""
    return os.fsencode(path).decode("utf-8", "replace")


def ungraded(reports):
    """How many of ``reports`` could not be graded (the grader itself failed on them)."""
    return sum(r.get("status") == "grader error" for r in reports)


def _internal_error(name, assignment_id, exc):
    return {"submission": name, "assignment": assignment_id, "status": "grader error", "score": 0, "max_score": 0,
            "automatic_max": 0, "manual_pending": 0, "questions": [], "reference_calls": [],
            "problems": [f"internal grader error: {type(exc).__name__}: {exc}", traceback.format_exc(limit=3)]}


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
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform != "darwin" else 2 ** 20)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.instructor.grading", description=__doc__.splitlines()[0])
    parser.add_argument("submission", type=Path, help="a submitted notebook (.ipynb), or a folder of them")
    parser.add_argument("--report", type=Path, help="one submission: where to write the JSON report (.md beside it)")
    parser.add_argument("--csv", type=Path, help="a folder: where to write the gradebook CSV")
    parser.add_argument("--reports", type=Path, help="a folder: where to write the reports "
                                                     "(default: <csv name>_reports beside the CSV)")
    parser.add_argument("--timeout", type=_positive, default=DEFAULT_TIMEOUT, help="seconds allowed per cell")
    parser.add_argument("--notebook-timeout", type=_positive, default=DEFAULT_NOTEBOOK_TIMEOUT,
                        help="seconds allowed per submission, checks included")
    parser.add_argument("--memory", type=_positive, default=DEFAULT_MEMORY, help="MiB of memory for the kernel")
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
    args = parser.parse_args(argv)
    batch = args.submission.is_dir()
    if batch and not args.csv:
        parser.error("grading a folder needs --csv GRADES.csv")
    if not batch and not args.report:
        parser.error("grading one notebook needs --report REPORT.json")
    folder = (args.folder or assignments.FOLDER).resolve()  # the instructor versions
    options = {"assignment_id": args.assignment, "timeout": args.timeout, "self_test": args.self_test, "folder": folder,
               "notebook_timeout": args.notebook_timeout, "memory": int(args.memory), "max_output": args.max_output,
               "sandboxed": not args.no_sandbox}
    if not args.no_sandbox:
        try:
            _sandbox.check_sandbox()
        except _sandbox.SandboxUnavailable as exc:
            print(f"cannot grade: {exc}", file=sys.stderr)
            return 2
    if batch:
        reports_dir = args.reports or args.csv.with_name(args.csv.stem + "_reports")
        hide = [folder, args.submission, reports_dir, args.csv]
        paths = sorted(p for p in args.submission.iterdir() if p.suffix == ".ipynb" and p.is_file())
        try:
            reports = grade_many(paths, reports_dir, args.csv, hide=hide, **options)
        except OSError as exc:
            print(f"could not write the reports or {args.csv}: {exc}", file=sys.stderr)
            return 2
        warnings = {w for r in reports for w in r.get("isolation", {}).get("warnings", [])}
        for w in sorted(warnings):
            print(f"warning: {w}", file=sys.stderr)
        failed = ungraded(reports)
        if failed:
            print(f"{failed} submission(s) could not be graded: see their rows (status 'grader error')",
                  file=sys.stderr)
        print(f"{len(reports)} submission(s); gradebook: {args.csv}; reports: {reports_dir}; "
              f"grader peak memory: {_peak_memory_mib()} MiB")
        return 1 if failed else 0
    hide = [folder, args.submission, args.report.parent if args.report.parent != Path(".") else None]
    guard = _PackageGuard() if args.no_sandbox else None
    try:
        report = grade(args.submission, args.assignment, args.timeout, self_test=args.self_test,
                       notebook_timeout=args.notebook_timeout, memory=int(args.memory),
                       max_output=args.max_output, hide=hide, folder=folder, sandboxed=not args.no_sandbox)
    except Exception as exc:  # noqa: BLE001 - last resort: still write a report
        report = _internal_error(str(args.submission), args.assignment, exc)
    if guard is not None and guard.restore():
        report["status"], report["score"] = "tampered", 0
        report["problems"].append("the submission changed the grader's package on disk: restored; 0 points")
    try:
        _write_report(report, args.report)
        if args.gradescope:
            args.gradescope.parent.mkdir(parents=True, exist_ok=True)
            _write_new(args.gradescope, json.dumps(gradescope_results(report), indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        print(f"could not write the report to {args.report}: {exc}", file=sys.stderr)
        return 2
    print(summary_line(report))
    for w in report.get("isolation", {}).get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    print(f"report: {args.report} and {args.report.with_suffix('.md')}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
