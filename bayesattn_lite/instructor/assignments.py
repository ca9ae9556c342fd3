"""The problem sets: which questions each has, how each is checked, and the student-version generator.

    python -m bayesattn_lite.instructor.assignments            # rewrite every student version from its instructor version
    python -m bayesattn_lite.instructor.assignments --check    # exit 1 if a committed student version is out of date
    python -m bayesattn_lite.instructor.assignments --course private.toml --out class/   # a class variant

Both rewrite the points table of the instructor version's first cell from the course's configuration
(``book/assignments/course.toml``, ``instructor/course.py``) first, so students read the points the grader awards.

An instructor version ``book/assignments/<id>.ipynb`` is an executed notebook with the solutions in.
The generator writes ``book/assignments/<id>_student.ipynb`` from it:

- a code cell tagged ``solution`` keeps everything outside its ``# BEGIN SOLUTION: <hint>`` ...
  ``# END SOLUTION`` block; the block becomes ``raise NotImplementedError("<hint>")`` at the same
  indentation. A Markdown cell tagged ``solution`` has the block (HTML comments
  ``<!-- BEGIN SOLUTION: <hint> -->`` ... ``<!-- END SOLUTION -->``) replaced by "*Your answer here.*"
  and the hint;
- a cell tagged ``instructor`` is dropped;
- outputs and execution counts are cleared, and the metadata ``bayesattn_lite`` says which
  assignment this is (the grader reads it) and that it is the student version.

Every checked question holds its ``bayesattn_lite.checks`` function and the names of the learner's objects
it is called on; the grader (``bayesattn_lite.instructor.grading``) runs exactly that. A written question
(``check=None``) is the Markdown cells tagged ``answer-<id>``, graded by the instructor with ``Question.rubric``.
``notebook_reference_calls`` lists where a submission calls what would answer a question for it (the
package's reference functions, autograd in a derivation, numerical differentiation in set 1's answers),
for the grader's report.
"""

import argparse
import ast
import copy
import functools
import importlib
import importlib.util
import inspect
import re
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import checks

ROOT = Path(__file__).resolve().parents[2]  # the checkout: bayesattn_lite/instructor/ is two below it
FOLDER = ROOT / "book" / "assignments"
STUDENT_SUFFIX = "_student"
SOLUTION_TAG, INSTRUCTOR_TAG = "solution", "instructor"
ANSWER_TAG_PREFIX = "answer-"  # a written answer: Markdown cells tagged answer-<question id>


@dataclass(frozen=True)
class Question:
    id: str          # "q1", shown in the report
    title: str
    points: int
    check: "Callable | None"  # its function of bayesattn_lite.checks; None: a written answer graded by hand
    names: tuple = ()    # the learner's objects the check is called with, in order
    rubric: str = ""     # for a written answer: the criteria and their points, for the instructor
    # partial credit, set in the course's configuration (instructor/course.py, book/assignments/course.toml):
    per_output: bool = False  # the points split evenly over the check's outputs, each right one earns its share
    mistakes: tuple = ()      # (knob, points): a submission whose only mistake is this named Flaw earns these points
    form: str = ""            # a class variant's form of the question (instructor/variants.py); "": the published one

    @property
    def written(self):
        """True for a written answer: the Markdown cells tagged ``answer-<id>``, graded by the instructor."""
        return self.check is None

    @property
    def answer_tag(self):
        return f"{ANSWER_TAG_PREFIX}{self.id}"


@dataclass(frozen=True)
class Assignment:
    id: str
    title: str
    chapters: str
    questions: tuple

    @property
    def instructor_path(self):
        return FOLDER / f"{self.id}.ipynb"

    @property
    def student_path(self):
        return FOLDER / f"{self.id}{STUDENT_SUFFIX}.ipynb"


# Rubrics of the written answers: each criterion with its points (they add up to the question's points).
# They are model answers, so they live in the repository only (book/assignments/RUBRICS.md, outside the
# book and the wheel) and are read from there; tests/test_assignments.py checks that the points add up.
RUBRICS = FOLDER / "RUBRICS.md"
NO_RUBRIC = "(the rubric is in book/assignments/RUBRICS.md of the course's repository, not installed here)"


def read_rubrics(path=RUBRICS):
    """{(assignment id, question id): rubric}, a rubric being its criteria, one per line ("1 pt: ...").
    RUBRICS.md has a ``### <title> (`<assignment id>`)`` section per problem set, a ``**<id>, <title>**``
    line per question, then its criteria as a list."""
    rubrics, aid, qid = {}, None, None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            found = re.search(r"\(`(\w+)`\)", line)
            aid, qid = found and found.group(1), None
        elif line.startswith("**q") and "," in line:
            qid = line[2:].split(",", 1)[0]
        elif line.startswith("- ") and aid and qid:
            key = (aid, qid)
            rubrics[key] = (rubrics[key] + "\n" if key in rubrics else "") + line[2:].strip()
    return rubrics


_RUBRICS = read_rubrics() if RUBRICS.exists() else {}


def _written(assignment_id, qid, title, points):
    return Question(qid, title, points, None, (), _RUBRICS.get((assignment_id, qid), NO_RUBRIC))


ASSIGNMENTS = {a.id: a for a in (
    Assignment("ps1_derivations", "Problem set 1: one head with a temperature and a positional bias", "1-3", (
        Question("q1", "gradients with a temperature and an ALiBi bias", 3, checks.check_biased_qk_gradients,
                 ("biased_qk_gradients",)),
        _written("ps1_derivations", "q2", "why the bias has no gradient of its own", 2),
        Question("q3", "the directions one step moves W_V in", 3, checks.check_value_update_basis,
                 ("value_update_basis",)),
        _written("ps1_derivations", "q4", "rank(ΔW_V) ≤ C − 1: proof, prediction, measurement", 2),
    )),
    Assignment("ps2_dynamics", "Problem set 2: score dynamics beyond the first order", "2-4", (
        Question("q1", "the second-order term of Δα", 3, checks.check_second_order_attention_change,
                 ("second_order_attention_change",)),
        _written("ps2_dynamics", "q2", "predict, then measure: how the errors scale with η", 2),
        Question("q3", "the score-space kernel under a temperature", 3, checks.check_tempered_score_change,
                 ("tempered_score_change",)),
        _written("ps2_dynamics", "q4", "why a small step never raises the loss, and what τ does", 2),
    )),
    Assignment("ps3_experiment", "Problem set 3: floors, a control and an experiment of your own", "6-8", (
        _written("ps3_experiment", "q1", "a falsifiable hypothesis", 1),
        Question("q2", "a reproducible experiment", 2, checks.check_reproducible, ("run_condition", "results")),
        Question("q3", "several seeds per condition", 1, checks.check_seeds, ("results", "run_condition")),
        _written("ps3_experiment", "q4", "a conclusion that quotes the measurements", 2),
        Question("q5", "the sticky chain's two floors", 2, checks.check_markov_floors, ("markov_floors",)),
        _written("ps3_experiment", "q6", "predict, then measure, the shuffled control", 2),
    )),
)}


# ----------------------------------------------------------------------------- reference calls

# What answers a problem set's questions if called from the learner's code: the package's own
# reference functions (and autograd, where the question asks for a derivation). A question's answer
# computed by one of them passes the check; the grader reports these calls so the instructor can judge.
REFERENCES = {
    "ps1_derivations": {
        "bayesattn_lite.attention.gradients": "q1/q3: every gradient of the head",
        "bayesattn_lite.attention.score_gradient": "q1: the advantage law",
        "bayesattn_lite.attention.error_signal": "q1/q3: the error signal",
        "bayesattn_lite.gradcheck.autograd_gradients": "q1: autograd gradients",
        "bayesattn_lite.gradcheck.finite_difference": "q1: numerical differentiation",
    },
    "ps2_dynamics": {
        "bayesattn_lite.attention.score_kernel": "q3: the score-space kernel",
        "bayesattn_lite.attention.predicted_score_change": "q3: the first-order score change",
        "bayesattn_lite.diagnostics.predicted_attention_change": "q1: the first-order attention change",
        "bayesattn_lite.attention.gradients": "q3: the head's gradients",
    },
    "ps3_experiment": {
        "bayesattn_lite.tasks.StickyMarkovChain.h_min": "q5: mean row entropy",
        "bayesattn_lite.tasks.StickyMarkovChain.row_entropies": "q5: row entropies",
        "bayesattn_lite.tasks.StickyMarkovChain.bayes_metrics": "q5: the chain's Bayes loss",
    },
}
PACKAGE = "bayesattn_lite"
_AUTOGRAD = ("torch.autograd", "torch.func", "functorch", "jax.grad", "jax.jacrev", "jax.jacfwd", "jax.vjp", "jax.jvp",
             "jax.hessian", "jax.value_and_grad")  # a derivation answered by differentiating automatically
_AUTOGRAD_ASSIGNMENTS = {"ps1_derivations", "ps2_dynamics"}
# attributes that name a reference whatever object they are read from (methods of the package's classes, and
# a module bound where the scan cannot follow it: a default argument, a class attribute, a walrus)
_REFERENCE_ATTRIBUTES = {aid: {name.rsplit(".", 1)[1] for name in refs} for aid, refs in REFERENCES.items()}
# the parts of a dotted name that reach autograd by another path (torch.nn.functional.torch.autograd.grad,
# torch._C._ImperativeEngine().run_backward, torch._functorch), and autograd's attributes on any object
_AUTOGRAD_PARTS = {"autograd", "func", "functorch", "_functorch", "_ImperativeEngine", "_EngineBase"}
_AUTOGRAD_ATTRIBUTES = {"run_backward", "_execution_engine", "grad_fn", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
                        "grad", "_grad",   # .grad: what a backward pass, anyone's (a training loop's too), left behind
                        # the steps of a backward pass that hand the gradient over without .grad (a hook's argument)
                        "register_hook", "register_post_accumulate_grad_hook", "retain_grad", "requires_grad_",
                        # forward-mode autograd by torch's private names (torch.autograd.forward_ad is caught as autograd)
                        "_make_dual", "_unpack_dual", "_enter_dual_level", "_exit_dual_level", "_fw_grad",
                        "make_dual", "unpack_dual", "dual_level"}
# names of autograd, written as strings (operator.methodcaller("backward"), getattr(x, name) with name = "grad")
_AUTOGRAD_STRINGS = {"backward", "autograd", "register_hook", "retain_grad", "requires_grad_"}
# Where numerical differentiation (finite differences, a complex step) answers a derivation question, it is
# no answer (book/assignments/instructors.md): flagged in the cells that define a checked question's function
# and the functions those use. Not in set 2, whose written questions measure changes under small steps.
_NUMERICAL_ASSIGNMENTS = {"ps1_derivations"}
_FINITE_DIFFERENCES = ("numpy.gradient", "torch.gradient", "scipy.optimize.approx_fprime", "scipy.optimize.check_grad",
                       "scipy.misc.derivative", "scipy.differentiate", "numdifftools", "mpmath.diff", "mpmath.diffs",
                       "mpmath.taylor")
_COMPLEX = ("torch.complex", "torch.cfloat", "torch.cdouble", "torch.chalf", "torch.view_as_complex", "torch.polar",
            "numpy.complex",
            "numpy.csingle", "numpy.cdouble", "numpy.clongdouble", "cmath")
_MPMATH_DIFFERENCES = {"diff", "diffs", "diffs_prod", "diffs_exp", "taylor", "differint", "diffun"}
_SMALL = 1e-2  # a constant this small that divides a difference is a step size
_INVERSE = 1e4  # a float this large that multiplies one is one over a step (1000.0 for milliseconds is not)

MAX_CELL = 2 ** 18  # characters (grading.MAX_READ_CELL): a larger code cell is not parsed (its AST could take GBs)
MAX_NAME_PARTS = 32   # attribute names in one dotted name the scan follows (SCAN_LIMITS.md)
SCAN_SECONDS = 20     # the scan's budget per notebook: past it, the cells left are noted as not scanned
# cell magics whose body IPython runs as Python in the kernel; another magic's body is scanned when it parses
# (%%writefile of a module), noted when it does not, except the display magics, which run no code here
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
_DISPLAY_CELL_MAGICS = {"html", "markdown", "md", "latex", "javascript", "js", "svg"}
_PYTHON_LINE_MAGICS = {"time", "timeit", "prun", "debug"}  # line magics whose argument runs as Python
_IMPORTERS = ("importlib.import_module", "importlib.__import__", "builtins.__import__")


def _getattr_constant(node):
    """True for ``getattr(x, "name")``, which the scan reads as ``x.name``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and node.args[1].value.isidentifier())


def _attribute(node):
    """(the object, the attribute's name) of ``x.name`` or ``getattr(x, "name")``; (None, None) otherwise."""
    if isinstance(node, ast.Attribute):
        return node.value, node.attr
    if _getattr_constant(node):
        return node.args[0], node.args[1].value
    return None, None


def _importer(node, aliases):
    """True for a call of ``importlib.import_module``, ``__import__`` (under any name)."""
    return isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id == "__import__"
                                           or _dotted(node.func, aliases) in _IMPORTERS)


def _imported(node, aliases):
    """The module a dynamic import with a constant name returns (``__import__("a.b")`` returns ``a``, or
    ``a.b`` with a ``fromlist``), or None."""
    if not (_importer(node, aliases) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)) or node.args[0].value.startswith("."):
        return None
    name = node.args[0].value
    if _dotted(node.func, aliases) == "importlib.import_module":
        return name
    fromlist = node.args[3] if len(node.args) > 3 else next((k.value for k in node.keywords if k.arg == "fromlist"), None)
    empty = fromlist is None or isinstance(fromlist, ast.Constant) and not fromlist.value or \
        isinstance(fromlist, (ast.List, ast.Tuple)) and not fromlist.elts
    return name.split(".")[0] if empty else name


def _dotted(node, aliases):
    """'bayesattn_lite.attention.score_kernel' for an expression attention.score_kernel, resolving imports,
    ``getattr(x, "name")`` (as ``x.name``) and dynamic imports of a constant name."""
    parts = []
    while True:
        value, attr = _attribute(node)
        if value is None:
            break
        parts.append(attr)
        if len(parts) >= MAX_NAME_PARTS:   # not followed (below); stopping here keeps the scan of an
            return None                    # n-part chain, read at each of its n levels, linear in n
        node = value
    if isinstance(node, ast.Name):
        head = aliases.get(node.id)
    elif isinstance(node, ast.Call):
        head = _imported(node, aliases)
    else:
        head = None
    if not head or head.count(".") + len(parts) >= MAX_NAME_PARTS:   # an alias chain c2 = c1.x, c3 = c2.x, ...
        return None                                                   # would grow quadratically: not followed
    return ".".join([head] + parts[::-1])


def _module(name):
    """The module ``name`` if it is already imported, or a module of the package below the instructor's
    side (imported now: down the tiers, as they allow; the kernel that runs a submission has no
    ``instructor`` to reach a reference through); else None. Nothing outside the package is imported."""
    if name in sys.modules:
        return sys.modules[name]
    if name != PACKAGE and not name.startswith(PACKAGE + ".") or name.startswith(f"{PACKAGE}.instructor"):
        return None
    try:
        return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None
    except Exception:  # noqa: BLE001 - a name that is no module of the package (or fails to import)
        return None


def _walk(name):
    """(the object the dotted ``name`` under the package finally points to, None), attribute by attribute
    (statically: no property or module __getattr__ runs), importing the package's submodules on the way;
    or (None, the name it has outside the package) once it reaches a module that is not the package's
    (``bayesattn_lite.gradcheck.torch.autograd`` -> ``torch.autograd``); (None, None) when it names nothing."""
    parts = name.split(".")
    obj = _module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] != PACKAGE:
            return None, ".".join([obj.__name__] + parts[i:])
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            obj = _module(f"{obj.__name__}.{part}") if isinstance(obj, types.ModuleType) else None
        if obj is None:
            return None, None
    return obj, None


@functools.cache
def _reference_objects(assignment_id):
    """[(the object, its name in REFERENCES)] of ``assignment_id``."""
    found = []
    for name in REFERENCES.get(assignment_id, {}):
        obj, _ = _walk(name)
        if obj is not None:
            found.append((obj, name))
    return found


@functools.lru_cache(maxsize=4096)
def _canonical(name, assignment_id):
    """The name of what the dotted ``name`` finally points to, so that a re-export is caught: a reference
    of ``assignment_id`` reached through another module of the package (``checks.problem_sets.attention.
    gradients``) has its name in REFERENCES, a module or function its own; ``name`` itself otherwise."""
    if not name or not name.startswith(PACKAGE + "."):
        return name
    obj, outside = _walk(name)
    if outside:
        return outside
    for candidate in (obj, inspect.getattr_static(obj, "__wrapped__", None)):
        for ref, ref_name in _reference_objects(assignment_id):
            if candidate is not None and candidate is ref:
                return ref_name
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if isinstance(module, str) and isinstance(qualname, str) else name


def _public_names(module_name):
    """The names ``from module_name import *`` binds, for a module of the package or one already imported."""
    module = _module(module_name)
    if module is None:
        return []
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)):
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if isinstance(n, str)]


def _aliases(tree, known=None):
    """Every name an import (or a plain renaming ``A = attention``, ``m = importlib.import_module(...)``,
    ``f = getattr(m, "name")``) binds, mapped to the full dotted name it stands for. ``from m import *``
    binds the public names of ``m`` (for the package's modules and those already imported)."""
    aliases = dict(known or {})
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name == "*":
                    aliases.update({n: f"{node.module}.{n}" for n in _public_names(node.module)})
                else:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):  # after the imports: A = attention, f = A.score_kernel, A: T = ..., (A := ...)
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        dotted = _dotted(value, aliases) if isinstance(target, ast.Name) else None
        if dotted:
            aliases[target.id] = dotted
    return aliases


# IPython's transform reads the whole cell again for each magic or shell line it turns into a call (up to
# 500 times): a large cell of many such lines took minutes. Past this many characters read, the cell is noted
# as not scanned: a cheaper rewrite of our own read a string's line ending in "?" as a help line, and missed the
# code IPython ran around it (hostile round 10).
MAX_TRANSFORM_READ = 500_000
# a line IPython may rewrite before Python reads it: a magic, a shell line, help (?id, id?) and the autocall
# escapes (/f x, ;f x, ,f x)
_IPYTHON_LINE = re.compile(r"^[ \t]*[%!?/;,]|\?[ \t]*$")


class _Untransformed(Exception):
    """A cell the scan cannot turn into Python the way IPython does: it is noted as not scanned, since any
    other reading of it may miss what the kernel runs."""


def _lines(source):
    """``source`` with every line break as Python and IPython read it (\r\n, \r, \n) written as \n."""
    return source.replace("\r\n", "\n").replace("\r", "\n")


def _parse(source):
    """The AST of a cell's source as IPython transforms it (magics turned into calls), or the SyntaxError;
    _Untransformed where IPython would read it too often (MAX_TRANSFORM_READ) or its transform fails."""
    source = _lines(source)
    magic_lines = sum(1 for line in source.split("\n") if _IPYTHON_LINE.search(line))
    if magic_lines * len(source) > MAX_TRANSFORM_READ:
        raise _Untransformed(f"{magic_lines} lines IPython may rewrite in a cell of {len(source):,} characters, "
                             f"past the {MAX_TRANSFORM_READ:,} characters the scan lets IPython's transform read")
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        python = TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError):   # the kernel runs none of it: read by _recovered, which may read more
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. "Input transformation still changing after 500 iterations"
        if not magic_lines and isinstance(exc, ImportError):
            return ast.parse(source)   # without IPython: a cell with no line it rewrites is Python as it is
        raise _Untransformed(f"IPython's transform failed: {str(exc)[:80]}") from exc
    return ast.parse(python)


def _parses(text):
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _python_argument(text):
    """The Python code a magic's argument holds after its options (``-n 1 -r 3 f(x)`` -> ``f(x)``), or ''."""
    text = text.strip()
    for _ in range(6):
        if _parses(text):
            return text
        if not text.startswith("-"):
            return ""
        text = (text.split(None, 1)[1:] or [""])[0]  # the option
        if text and not text.startswith("-") and not _parses(text):
            text = (text.split(None, 1)[1:] or [""])[0]  # its value
    return ""


def _strip_cell_magics(source):
    """(``source`` with its cell magics, ``%%time`` and the like on the first line as IPython reads them,
    replaced by their Python argument or a blank line, the body kept in place; their names). Line numbers
    stay those of the cell."""
    lines, names, i = source.split("\n"), [], 0
    while True:
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i == len(lines) or not lines[i].startswith("%%"):
            return "\n".join(lines), names
        name, _, argument = lines[i][2:].partition(" ")
        names.append(name.strip())
        lines[i] = _python_argument(argument)
        i += 1


_SHELL_OR_MAGIC = re.compile(r"^(?P<indent>[ \t]*)(?P<target>[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*=[ \t]*)?"
                             r"(?:%{1,2}(?P<magic>\w+)(?P<argument>.*)|!.*|[^#\n]*\?)$")


def _neutral(source):
    """``source`` with IPython's line magics and shell lines (``%pip ...``, ``!ls``, ``x = !ls``, ``obj?``)
    turned into neutral lines (a magic that runs Python keeps its code), for when the cell does not parse."""
    def line(match):
        code = _python_argument(match["argument"]) if match["magic"] in _PYTHON_LINE_MAGICS else ""
        if match["target"]:
            return f"{match['indent']}{match['target']}{code or 'None'}"
        return f"{match['indent']}{code or 'pass'}"
    return "\n".join(_SHELL_OR_MAGIC.sub(line, text) if not _AUTOCALL.match(text) else _AUTOCALL.sub(r"\1pass", text)
                     for text in _lines(source).split("\n"))


_AUTOCALL = re.compile(r"^([ \t]*)[/;,].*$")   # IPython's autocall escapes: /f x runs f(x)


def _line_magic_code(tree):
    """Statements of the Python that IPython's line magics (``%time f(x)``, as
    ``get_ipython().run_line_magic('time', 'f(x)')``) run, at their lines."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "run_line_magic" and len(node.args) == 2 and \
                all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args) and \
                node.args[0].value in _PYTHON_LINE_MAGICS:
            code = _python_argument(node.args[1].value)
            if code:
                body = ast.parse(code).body
                for statement in body:
                    ast.increment_lineno(statement, node.lineno - 1)
                found += body
    return found


def _tree(source):
    """(the AST of a code cell as IPython runs it, [(line, note for the report)]): cell magics stripped
    (their body read as Python), line magics and shell lines as IPython turns them, the code of ``%time``
    and the like added; a cell that still does not parse is read without its magic and shell lines, then
    without each line that does not parse (noted; the kernel runs none of such a cell). The tree is None when
    the cell is not read at all (too large, a body in another language, magics the scan cannot transform as
    IPython does), with a note that says so. Line numbers are the cell's."""
    if len(source) > MAX_CELL:
        return None, [(1, f"a cell of {len(source):,} characters, over the {MAX_CELL:,} the grader parses: "
                          "not scanned")]
    source, magics = _strip_cell_magics(_lines(source))
    lines = source.split("\n")
    blank = next((n for n, line in enumerate(lines) if line.strip()), len(lines))
    source = "\n".join(lines[blank:])  # IPython drops the leading blank lines: count them here
    other = next((m for m in magics if m not in _PYTHON_CELL_MAGICS), None)
    notes = []
    try:
        tree = _parse(source)
        tree.body += _line_magic_code(tree)
    except _Untransformed as exc:   # its magics' bodies too: %%time runs its body through the same transform
        return None, [(1 + blank, f"not scanned: {exc} (read this cell yourself)")]
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte
        if other in _DISPLAY_CELL_MAGICS:
            return ast.Module(body=[], type_ignores=[]), []
        if other is not None:
            return None, [(1, f"a %%{other} cell, not Python: not scanned")]
        tree, notes = _recovered(source, exc)
    if tree is not None:
        ast.increment_lineno(tree, blank)
        _fold_strings(tree)
    return tree, [(line + blank, note) for line, note in notes]


def _fold_strings(tree):
    """A string spelt in pieces of constants (f"backward", f"{'back'}ward", "back" + "ward", "".join(["back",
    "ward"]), "%sward" % "back", "{}ward".format("back")) made one constant in place, so that it names what it
    names. Children before parents, without recursion (a cell's chain can be thousands deep); a result over
    200 characters is left in pieces (names are short)."""
    for node in reversed(list(ast.walk(tree))):   # breadth first, reversed: a node after its children
        for field, value in ast.iter_fields(node):
            for i, child in enumerate(value if isinstance(value, list) else [value]):
                text = _constant_text(child)
                if text is not None:
                    folded = ast.copy_location(ast.Constant(value=text), child)
                    if isinstance(value, list):
                        value[i] = folded
                    else:
                        setattr(node, field, folded)


def _constant_text(node):
    def text(part):   # a piece: a constant string, or one inside an f-string's braces without a format
        if isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
            part = part.value
        return part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else None

    def texts(parts):   # the pieces of a list or tuple of constants, or a string's letters
        return [text(p) for p in parts.elts] if isinstance(parts, (ast.List, ast.Tuple)) else list(text(parts) or [None])

    template = text(node.left) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) else \
        text(node.func.value) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
    template = template if template is not None and len(template) <= 200 else None   # its copies are the result
    pieces, joined = None, None
    if isinstance(node, ast.JoinedStr):
        pieces = [text(v) for v in node.values]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        pieces = [text(node.left), text(node.right)]
    elif template is not None and isinstance(node, ast.Call) and not node.keywords and \
            node.func.attr == "join" and len(node.args) == 1:
        pieces, joined = texts(node.args[0]), template.join
    elif template is not None and isinstance(node, ast.Call) and not node.keywords and node.func.attr == "format" \
            and all(re.fullmatch(r"\{\d?\}", f) for f in re.findall(r"\{[^{}]*\}", template.replace("{{", ""))):
        pieces, joined = [text(a) for a in node.args], lambda ps: template.format(*ps)   # no width: "{:>9999999}"
    elif template is not None and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and \
            set(re.findall(r"%.", template.replace("%%", ""))) <= {"%s"}:
        pieces = [text(p) for p in node.right.elts] if isinstance(node.right, ast.Tuple) else [text(node.right)]
        joined = lambda ps: template % tuple(ps)   # noqa: E731
    if pieces is None or None in pieces or sum(map(len, pieces)) > 200:
        return None
    try:
        result = joined(pieces) if joined else "".join(pieces)
    except (TypeError, ValueError, IndexError, KeyError):   # "%d" % "x", "{0}{5}".format("a"): not a name
        return None
    return result if len(result) <= 200 else None


def _recovered(source, error):
    """The tree of a cell that does not parse: without its magic and shell lines, then without each line
    that still does not parse (at most 20), with a note of the first such line; None when that fails."""
    lines, first = _neutral(source).split("\n"), None
    for _ in range(20):
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError) as exc:
            first = first or exc
            n = (getattr(exc, "lineno", None) or 1) - 1
            if not 0 <= n < len(lines) or not lines[n].strip():
                break
            lines[n] = ""
            continue
        return tree, [] if first is None else [(first.lineno or 1, _invalid(first))]
    return None, [(getattr(error, "lineno", None) or 1, _invalid(error))]


def _invalid(error):
    return f"not valid Python, not scanned ({getattr(error, 'msg', None) or error})"


def _answer_names(assignment_id):
    """The functions a checked question of ``assignment_id`` calls, where numerical differentiation is flagged."""
    assignment = ASSIGNMENTS.get(assignment_id)
    if assignment_id not in _NUMERICAL_ASSIGNMENTS or assignment is None:
        return set()
    return {name for q in assignment.questions if not q.written for name in q.names}


def _statements(body):
    """The statements of a cell outside any function or class: those nested in an ``if``, ``for``, ``with``,
    ``try`` or ``match`` too (a helper defined under ``if True:`` is the cell's as much as one at its top)."""
    for node in body:
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, field, None) or [])
            for branch in (getattr(node, "handlers", None) or []) + (getattr(node, "cases", None) or []):
                yield from _statements(branch.body)   # except: and match's case:


def _definitions(tree):
    """{a name the cell defines outside any function (def, class, assignment): the names its definition uses}."""
    defined = {}
    for node in _statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = {node.name}
        elif isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        else:
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):   # its parameters and locals are its own:
            used -= _own_names(node)                                     # a local delta is not a cell's
        for name in names:
            defined.setdefault(name, set()).update(used)
    return defined


def _own_names(function):
    """The names a function binds inside itself: parameters, assignments, nested functions and classes,
    imports (a nested ``def attention_weights`` is not the cell's ``attention_weights``)."""
    own = set()
    for n in ast.walk(function):
        if isinstance(n, ast.arg) or isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.arg if isinstance(n, ast.arg) else n.id)
        elif n is not function and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            own |= {a.asname or a.name.split(".")[0] for a in n.names}
    return own


_NUMBER_WRAPPERS = {"float", "int", "float64", "float32", "double", "tensor", "as_tensor", "array", "asarray", "Decimal",
                    "longdouble", "float16", "half"}


def _value(node, depth=0):
    """The number a constant expression (``1e-6``, ``-1e-6``, ``10 ** -6``, ``1 / 1000``, ``np.float64(5e5)``)
    stands for, or None; read at most 8 levels deep."""
    if depth > 8:
        return None
    if isinstance(node, ast.NamedExpr):   # (h := 1e-6) is 1e-6
        return _value(node.value, depth + 1)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value) if abs(node.value) < 1e300 else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _value(node.operand, depth + 1)
        return None if value is None else -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call) and len(node.args) == 1 and \
            (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in _NUMBER_WRAPPERS:
        text = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
        if isinstance(text, str) and len(text) <= 40:   # float("1e-6"): the number the string spells
            try:
                value = float(text)
            except ValueError:
                return None
            return value if abs(value) < 1e300 else None
        return _value(node.args[0], depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.Mult, ast.Div)):
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if left is None or right is None or isinstance(node.op, ast.Pow) and \
                (abs(right) > 400 or left < 0 and right != int(right)):
            return None
        try:
            value = left ** right if isinstance(node.op, ast.Pow) else left * right if isinstance(node.op, ast.Mult) \
                else left / right
        except (OverflowError, ZeroDivisionError):
            return None
        return float(value) if abs(value) < 1e300 else None
    return None


# a floating-point type's precision (finfo(t).eps, .resolution, sys.float_info.epsilon, math.ulp(x), np.spacing(x)):
# a step's usual source, whatever number it comes to
_PRECISION = {"eps", "epsneg", "resolution", "tiny", "smallest_normal", "smallest_subnormal", "epsilon", "ulp",
              "spacing"}


def _small(node, small_names, depth=0):
    """True when ``node`` is a step size: a constant of at most _SMALL, a name bound to one, a type's
    precision (``finfo(t).eps``) or a root or power of one (``sqrt(eps)``, ``eps ** (1 / 3)``); read at most
    4 levels deep."""
    if isinstance(node, ast.Name):
        return node.id in small_names
    if isinstance(node, ast.Attribute) and node.attr in _PRECISION or _called(node) in _PRECISION:
        return True
    if depth < 4 and (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) or
                      _called(node) in ("sqrt", "cbrt") and len(node.args) == 1):
        return _small(node.left if isinstance(node, ast.BinOp) else node.args[0], small_names, depth + 1)
    value = _value(node)
    return value is not None and 0 < abs(value) <= _SMALL


MAX_FACTORS = 16   # factors of one product or quotient read (a chain of thousands would cost its square)


def _terms(node):
    """(what a product or quotient multiplies by, what it divides by): ``-(a - b) * 0.5 / h`` -> ([a - b, 0.5],
    [h]); a power's base stands for the power (a power of constants is a number), a sign is dropped; at most MAX_FACTORS are read, without
    recursion."""
    up, down, todo = [], [], [(node, False)]
    while todo and len(up) + len(down) < MAX_FACTORS:
        n, below = todo.pop()
        n = _as_operator(n.value if isinstance(n, ast.NamedExpr) else n)   # torch.mul(a - b, 5e5): an operator
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            todo.append((n.operand, below))
        elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Div)):
            todo += [(n.left, below), (n.right, below != isinstance(n.op, ast.Div))]
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and _value(n) is None:
            todo.append((n.left, below))   # h ** 2 stands for h; 2 ** 19 is a number
        else:
            (down if below else up).append(n)
    return up, down


def _factors(node):
    """The factors of a product (``2 * h`` -> 2, h); of a power, its base (``h ** 2`` -> h)."""
    return _terms(node)[0]


def _step_names(tree):
    """Names bound to a small constant (``h = 1e-6``, a default ``eps=1e-5``, ``for h in [1e-5]``) or added
    to a point (``x[i] += h``): the step sizes of a finite difference."""
    names = {name for name, value in _assigned(tree)   # h = 1e-6, (h := 1e-6), h, = (1e-6,), case h:
             if _small(value, set()) or any(_small(f, set()) for f in _factors(value))}   # 2 * finfo(t).eps
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)) and \
                isinstance(node.target, ast.Subscript) and isinstance(node.value, ast.Name):
            names.add(node.value.id)  # x[i] += h
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) and \
                isinstance(node.iter, (ast.List, ast.Tuple, ast.Set)) and node.iter.elts and \
                all(_small(e, set()) for e in node.iter.elts):
            names.add(node.target.id)   # for h in (1e-4, 1e-5): a step bound by a loop
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            names |= {a.arg for a, d in pairs if _small(d, set())}
    return names


def _reached_code(tree, reached):
    """The cell's statements (outside any function) that define or fill a name in ``reached``: a def or
    class, an assignment to it or into it (``G = ...``, ``G[i] = ...``, ``G += ...``): the code an answer can
    run or read, not the cell's other statements (a self-check of the answer at the top)."""
    for node in _statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in reached:
                yield node
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _written(node) & reached:
            yield node


def _written(statement):
    """The names an assignment binds or writes into (``a, G[i], m.w = ...`` -> a, G, m)."""
    names, todo = set(), list(getattr(statement, "targets", None) or [statement.target])
    while todo:
        target = todo.pop()
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            todo += target.elts
        elif isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
            todo.append(target.value)
    return names


def _numerical(tree, aliases, assignment_id, reached):
    """[(line, what)]: numerical differentiation in the code of a cell that an answer reaches (the
    definitions of ``reached``): a complex step (``1j``, ``complex(...)``, a complex dtype), a finite
    difference ``(f(x + h) - f(x)) / h`` or a library's finite differences. Steps are read in the whole cell
    (a module-level ``H = 1e-6`` the answer reads)."""
    steps, bound, found, covered = _step_names(tree), _call_names(tree), [], set()
    named = _difference_names(tree)
    inverses = {t.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                and _inverse_step(node.value, steps, set())
                for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)}   # inv = 5e4
    for node in (n for top in _reached_code(tree, reached) for n in ast.walk(top)):
        used, kind = None, "a complex step"
        if isinstance(node, ast.Constant) and isinstance(node.value, complex):
            used = repr(node.value)
        elif isinstance(node, ast.Name) and node.id == "complex" and isinstance(node.ctx, ast.Load):
            used = "complex"
        elif isinstance(node, ast.keyword) and node.arg == "dtype" and isinstance(node.value, ast.Constant) and \
                "complex" in str(node.value.value):
            used = f"dtype={node.value.value!r}"
        elif isinstance(node, (ast.Attribute, ast.Name)):
            name = _canonical(_dotted(node, aliases), assignment_id) or ""
            root, last = name.split(".")[0], name.split(".")[-1]
            if name.startswith(_COMPLEX + _FINITE_DIFFERENCES) or (   # np.lib._function_base_impl.gradient too
                    root in ("numpy", "torch", "scipy") and last == "gradient") or (
                    root == "mpmath" and last in _MPMATH_DIFFERENCES):   # mpmath.mp.diff: any context's
                used, kind = name, "a complex step" if name.startswith(_COMPLEX) else "finite differences"
        elif id(node) not in covered and (_finite_difference(_scaled(node), steps, inverses, bound, named)
                                          or _shifted_calls(node) or _stencil(node)):
            used, kind = ast.unparse(node)[:80], "a finite difference"
            covered |= {id(n) for n in ast.walk(node)}   # its own f(x + h) - f(x - h) is not a second one
        if used:
            found.append((getattr(node, "lineno", 1), f"{used} ({kind}: numerical differentiation, the question "
                                                      "asks for the derived gradient)"))
    return found


def _inverse_step(node, steps, inverses, at_least=_INVERSE):
    """True when ``node`` is one over a step: a number of at least ``at_least`` written in the expression
    (``5e4``, ``500000``, ``2**19``, ``np.float64(5e5)``), a name bound to a float one (``inv = 5e4``; an int
    name such as ``T = 10000`` is a count, not a step's inverse) or ``1 / h``."""
    if isinstance(node, ast.Name):
        return node.id in inverses
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and any(_small(f, steps) for f in _factors(node.right)):
        return True
    value = _value(node)
    return value is not None and abs(value) >= at_least


def _shifted_calls(node):
    """True for one function's calls at two points one argument apart, ``f(x + h) - f(x - h)`` or
    ``f(x + h) - f(x)``: the difference a finite difference is made of, whatever then scales it."""
    node = _as_operator(node)
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
        return False
    a, b = node.left, node.right
    if not (isinstance(a, ast.Call) and isinstance(b, ast.Call) and len(a.args) == len(b.args)
            and ast.dump(a.func) == ast.dump(b.func) and not a.keywords and not b.keywords):
        return False
    moved = [(x, y) for x, y in zip(a.args, b.args) if ast.dump(x) != ast.dump(y)]
    if len(moved) != 1:
        return False

    def base(arg):   # x + h, x - h -> (x, h); anything else -> (itself, None)
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, (ast.Add, ast.Sub)) and \
                not (isinstance(arg.right, ast.Constant) and type(arg.right.value) is int):   # i + 1: an index
            return ast.dump(arg.left), arg.right
        return ast.dump(arg), None

    (x, h), (y, k) = base(moved[0][0]), base(moved[0][1])
    return x == y and (h is not None or k is not None)


_DIVIDES = {"div", "divide", "true_divide", "truediv", "div_", "__truediv__", "__div__", "__rtruediv__", "itruediv",
            "__itruediv__"}   # torch.div(a - b, 2 * h), a.div(h), operator.truediv, (a - b).__truediv__(h)
_SUBTRACTS = {"sub", "subtract", "sub_", "__sub__", "isub", "__isub__"}   # torch.sub(a, b), a.sub(b): a difference as a call
_MULTIPLIES = {"mul", "multiply", "mul_", "__mul__", "__rmul__", "imul", "__imul__"}   # torch.mul(a - b, 5e5)
_ADDS = {"add", "add_", "__add__", "__radd__", "iadd", "__iadd__"}   # torch.add(a, -b), torch.add(a, b, alpha=-1)
_REDUCTIONS = {"mean", "nanmean", "median", "max", "amax", "min", "amin", "sum", "logsumexp"}   # s - s.mean(): centring
_CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time",
           "process_time_ns", "default_timer"}   # (perf_counter() - t0) * 1e6: a time in microseconds


def _called(node):
    """The name a call calls (``np.diff(y)`` -> "diff", ``f(x)`` -> "f"), or None for what is no call."""
    return (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None


def _assigned(tree):
    """(name, value) of every binding of a name to a value written in the cell: ``x = v``, ``x: T = v``,
    ``(x := v)``, unpacking (``x, y = (v, w)``, ``x, = (v,)``) and a match's capture (``match v: case x:``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value:
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.Match):
            pairs = [(ast.Name(id=c.pattern.name), node.subject) for c in node.cases
                     if isinstance(c.pattern, ast.MatchAs) and c.pattern.name]
        else:
            continue
        while pairs:
            target, value = pairs.pop()
            if isinstance(target, ast.Name):
                yield target.id, value
            elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) and \
                    len(target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in target.elts):
                pairs += zip(target.elts, value.elts)


def _function(node, bound):
    """The function whose value ``node`` is, through the methods called on it and the names bound to a call
    (``f(x - h).clone()``, ``model(x).logits.sum()``, ``fp.sum()`` with ``fp = f(x + h)`` -> f, model, f;
    ``torch.ones_like(c)`` -> ones_like), or None where it is not known (no call, a name bound to no call)."""
    for _ in range(MAX_NAME_PARTS):
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        value = getattr(getattr(node, "func", None), "value", None)
        while isinstance(value, (ast.Attribute, ast.Subscript)):
            value = value.value
        if not isinstance(node, ast.Call) or not isinstance(value, (ast.Call, ast.Name)) or \
                isinstance(value, ast.Name) and not bound.get(value.id):
            break
        node = value
    return _called(node)


def _call_names(tree):
    """{a name: what the call it is bound to calls} (``t0 = time.perf_counter()`` -> perf_counter, ``fp =
    f(x + h)`` -> f); None for a name bound to two different calls or to something else too."""
    bound = {}
    for name, value in _assigned(tree):
        called = _function(value, bound)
        bound[name] = called if bound.get(name, called) == called else None
    return bound


def _difference_names(tree):
    """{a name: the difference it holds}: ``d = fp - fm``, ``d = torch.sub(fp, fm)``, ``d -= fm``, so that
    ``d /= 2 * h`` or ``d / h`` is read as the quotient of that difference."""
    named = {}
    for name, value in _assigned(tree):
        value = _as_operator(value)
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Sub):
            named[name] = value
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Sub) and isinstance(node.target, ast.Name):
            named[node.target.id] = ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()), op=ast.Sub(),
                                              right=node.value)
    return named


def _scaled(node):
    """An augmented division or product as the quotient it makes: ``d /= 2 * h`` -> ``d / (2 * h)``."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Div, ast.Mult)) and isinstance(node.target, ast.Name):
        return ast.copy_location(ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()), op=node.op,
                                           right=node.value), node)
    return node


def _two_points(d, bound):
    """True when the difference ``d`` (a - b) may be one function's values at two points: not a constant on
    either side (``(1.0 - keep) * -1e4`` is a mask), not a centring (``s - s.mean()``, ``s - max(s)``), not a
    duration (``time.perf_counter() - t0``), not two different functions' values (``tril(...) -
    ones_like(...)``, directly or through names bound to them) nor a value less a function of it
    (``causal - ones_like(causal)``)."""
    a, b = d.left, d.right
    if _value(a) is not None or _value(b) is not None:
        return False
    if _called(b) in _REDUCTIONS and any(ast.dump(x) == ast.dump(a) for x in [getattr(b.func, "value", None), *b.args[:1]]):
        return False
    kinds = [_function(x, bound) for x in (a, b)]
    if any(kind in _CLOCKS for kind in kinds) or None not in kinds and kinds[0] != kinds[1]:
        return False
    for x, y in ((a, b), (b, a)):   # x - f(x): f at one point, x no function's value (names only: no tree compared)
        if isinstance(x, ast.Name) and isinstance(y, ast.Call) and \
                any(isinstance(arg, ast.Name) and arg.id == x.id for arg in y.args):
            return False
    return True


def _negated(node):
    """What ``node`` negates (``-b``, ``b * -1``, ``-1 * b``), or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return node.operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for x, y in ((node.left, node.right), (node.right, node.left)):
            if _value(x) == -1:
                return y
    return None


def _as_operator(node):
    """An arithmetic call as the operator it stands for, whatever keywords it takes (``alpha=1``,
    ``rounding_mode=None``; ``input=``, ``other=`` as arguments): ``torch.div(a, h)``, ``a.div(h)``,
    ``a.__truediv__(h)``, ``operator.truediv(a, h)`` -> ``a / h``; ``torch.mul(a, k)`` -> ``a * k``;
    ``torch.sub(a, b)``, ``torch.add(a, b, alpha=-1)`` -> ``a - b``; and a sum with a negation, ``a + -b``,
    ``torch.add(a, -b)``, as the difference it is; anything else as it is."""
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
        called, keywords = _called(node), {k.arg: k.value for k in node.keywords}
        op = ast.Div() if called in _DIVIDES else ast.Sub() if called in _SUBTRACTS else ast.Mult() \
            if called in _MULTIPLIES else ast.Add() if called in _ADDS else None
        args = [a for a in [keywords.get("input"), *node.args, keywords.get("other")] if a is not None]
        if op is not None and isinstance(node.func, ast.Attribute) and len(args) == 1:
            args = [node.func.value, *args]   # a.div(h): the receiver is the first
            if called.startswith("__r"):   # h.__rtruediv__(d) is d / h
                args.reverse()
        if op is None or len(args) != 2:
            return node
        if isinstance(op, ast.Add) and (_value(keywords.get("alpha")) or 0) < 0:
            op = ast.Sub()   # torch.add(a, b, alpha=-1)
        node = ast.copy_location(ast.BinOp(left=args[0], op=op, right=args[1]), node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        for x, y in ((node.left, node.right), (node.right, node.left)):
            if _negated(y) is not None:
                return ast.copy_location(ast.BinOp(left=x, op=ast.Sub(), right=_negated(y)), node)
    return node


def _stencil(node):
    """True for a list or tuple of numbers that sum to 0 with one of at least 1 / _SMALL (``[-5e4, 0, 5e4]``,
    ``[5e3, -5e3]``): a difference and its one over a step in one, for a convolution or a product."""
    if not isinstance(node, (ast.List, ast.Tuple)) or not 2 <= len(node.elts) <= 16:
        return False
    values = [_value(e) for e in node.elts]
    return None not in values and abs(sum(values)) < 1e-9 * max(map(abs, values), default=0) + 1e-12 and \
        max(map(abs, values)) >= 1 / _SMALL


def _finite_difference(node, steps, inverses=frozenset(), bound=None, named=None):
    """True for a difference divided by a step (``(A - B) / h``, ``/ (2 * eps)``, ``/ 2 / h``, ``torch.div(A - B,
    h)``) or multiplied by one over a step (``(a - b) * inv``, ``inv = 5e4``), whatever sign or constant
    factors surround it; differences taken by ``diff`` (``np.diff(y) / np.diff(x)``, ``torch.diff(y) * 500``:
    one over a step from 1 / _SMALL); or a difference of one function's calls at two points that a name of
    the divisor moves apart (``(f(x + h) - f(x - h)) / (2 * h)``)."""
    node = _as_operator(node)
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div))):
        return False
    up, down = _terms(node)
    named = named or {}   # d = fp - fm; d / h: the difference the name holds
    up = [named.get(f.id, f) if isinstance(f, ast.Name) else f for f in up]
    def diff(f):   # np.diff(y), torch.diff(y, dim=0)[0]: a difference of neighbouring values
        while isinstance(f, ast.Subscript):
            f = f.value
        return _called(f) == "diff"

    if any(diff(f) for f in up) and (any(diff(f) for f in down) or any(_small(f, steps) for f in down)
                  or any(_inverse_step(f, steps, inverses, at_least=1 / _SMALL) for f in up)):
        return True
    differences = [f for f in up if isinstance(f, ast.BinOp) and isinstance(f.op, ast.Sub) and _two_points(f, bound or {})]
    if not differences:
        return False
    if any(_small(f, steps) for f in down) or any(_inverse_step(f, steps, inverses) for f in up):
        return True
    divisor = {n.id for f in down for n in ast.walk(f) if isinstance(n, ast.Name)}
    for d in differences:
        a, b = d.left, d.right
        if isinstance(a, ast.Call) and isinstance(b, ast.Call) and ast.dump(a.func) == ast.dump(b.func) \
                and ast.dump(a) != ast.dump(b):
            moving = {n.id for call in (a, b) for arg in call.args + [k.value for k in call.keywords]
                      for n in ast.walk(arg) if isinstance(n, ast.Name)}
            if moving & divisor:
                return True
    return False


def _reference(node, aliases, assignment_id):
    """What ``node`` (a name, ``x.name`` or ``getattr(x, "name")``) uses that answers a question, or None."""
    references = REFERENCES.get(assignment_id, {})
    written = _dotted(node, aliases)
    name = _canonical(written, assignment_id)
    base, attr = _attribute(node)
    if name in references:
        via = "" if written == name else f", reached as {written.removeprefix(PACKAGE + '.')}"
        return f"{name.removeprefix(PACKAGE + '.')} (answers {references[name]}{via})"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and name and "sympy" in name.split("."):   # torch.utils._sympy.functions.sympy
        return f"{name} (symbolic differentiation: the question asks for a derivation)"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and attr and attr.endswith(("_backward", "_backward_data")):
        return f".{attr} (a backward kernel: the question asks for a derivation)"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and attr and ("backward_hook" in attr or "backward_pre_hook" in attr):
        return f".{attr} (a backward hook, handed autograd's gradients: the question asks for a derivation)"
    if name and assignment_id in _AUTOGRAD_ASSIGNMENTS and (name.startswith(_AUTOGRAD) or (
            name.split(".")[0] == "torch" and _AUTOGRAD_PARTS & set(name.split(".")))):
        return f"{name} (autograd: the question asks for a derivation)"
    if attr in _AUTOGRAD_ATTRIBUTES and assignment_id in _AUTOGRAD_ASSIGNMENTS:
        return f".{attr} (autograd: the question asks for a derivation)"
    if attr in _REFERENCE_ATTRIBUTES.get(assignment_id, set()):
        return f".{attr} (the name of a package reference that answers {assignment_id}: see what it is read from)"
    if attr == "backward" and assignment_id in _AUTOGRAD_ASSIGNMENTS:
        return ".backward() (autograd: the question asks for a derivation)"
    if attr in ("__dict__", "__getattribute__") and _looked_up(base, aliases, assignment_id):
        return f".{attr} of {_looked_up(base, aliases, assignment_id)} (a name looked up at run time: not scanned)"
    if name == "sys.modules":   # under any alias (import sys as s), read by [...] or .get
        return "sys.modules[...] (a module looked up at run time: not scanned)"
    if attr in _RUN_TIME_LOOKUPS and assignment_id in _AUTOGRAD_ASSIGNMENTS:
        return f".{attr} (a name looked up at run time: not scanned)"   # type(x).__dict__, ip.user_ns
    runs = _runs_code(node, aliases)
    if runs:   # run = builtins.exec: the name, called or not
        return f"{runs}() (code built at run time: not scanned)"
    return None


def _unread_code(node, aliases):
    """What ``node`` names that runs code the scan cannot read (``_UNREAD_CODE``, ``_UNREAD_MODULES``) or
    keeps a shell command's output, under any receiver or alias; None otherwise."""
    written, attr = _dotted(node, aliases) or "", _attribute(node)[1]
    last = attr or written.rsplit(".", 1)[-1]
    if written.split(".")[0] in _UNREAD_MODULES or last in _UNREAD_CODE:
        return f"{written or attr}() (runs code the scan cannot read: not scanned)"
    if last in _SHELL_CAPTURE:   # x = !cmd is get_ipython().getoutput("cmd")
        return f"{written or attr}() (a shell command's output: code run outside the scan, not scanned)"
    return None


def _runs_code(node, aliases):
    """The name of what runs code the scan cannot read, when ``node`` names it: a builtin (exec, eval,
    compile, globals) bare or read from builtins; IPython's executors and a code object's makers on any
    receiver; a module's function that runs a string or looks a name up (under any alias), or starts
    another Python. re.compile or a variable called ex is not one."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in _BUILTIN_CODE:
        return node.id
    if _dotted(node, aliases) in _RUN_TIME_NAMES:
        return _dotted(node, aliases)
    if isinstance(node, ast.Attribute):
        receiver = node.value.id if isinstance(node.value, ast.Name) else ""
        if node.attr in _BUILTIN_CODE and receiver in ("builtins", "__builtins__"):
            return node.attr
        if node.attr in _RUN_TIME_CODE:
            return node.attr
    return None


def _dynamic_import(node, aliases, assignment_id):
    """What a dynamic import (``importlib.import_module``, ``__import__``) brings in, when it matters."""
    name = "importlib.import_module" if _dotted(node.func, aliases) == "importlib.import_module" else "__import__"
    module = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
    if not isinstance(module, str):
        return f"{name}() (a dynamic import: not scanned)"
    if module.split(".")[0] == PACKAGE:
        return f"{name}({module!r}) (a dynamic import of the package)"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and (module + ".").startswith(tuple(a + "." for a in _AUTOGRAD)):
        return f"{name}({module!r}) (autograd: the question asks for a derivation)"
    return None


def reference_calls(source, assignment_id, context="", context_aliases=None, answer=None, reached=None):
    """The uses, in ``source`` (Python code, IPython magics allowed), of what answers a question of
    ``assignment_id`` by itself: the package's reference functions (``REFERENCES``, under any name or
    module path of the package that re-exports them), autograd in the derivation sets, numerical
    differentiation in an answer of set 1, a dynamic import of the package. One string per use,
    ``"line N: what (why)"``. ``context``: code of other cells (a notebook's install cell) whose imports the
    names may come from; ``context_aliases``: the same, already read (``_aliases``), so a notebook's imports
    are read once. ``answer``: whether the cell is part of a checked question's answer (numerical
    differentiation is looked for there); by default, whether it defines a checked question's function.
    ``reached``: the names an answer reaches (its functions and those they call, through any cell); only
    their definitions are read for numerical differentiation (a cell's own self-check at its top level is
    not the answer). By default, the checked functions and what they use in this cell.

    Static (AST) detection: it sees imports, aliases, attribute access and ``getattr`` with a constant name,
    not code built at run time (``exec`` of a string, an object reached through ``globals()``), which it
    reports as such. A cell over ``MAX_CELL`` characters is not parsed (noted)."""
    try:
        found = _uses(source, assignment_id, context, context_aliases, answer, reached)
    except (RecursionError, MemoryError):  # nested deeper than Python compiles: it cannot run either
        found = [(1, "nested too deeply to read: not scanned")]
    # an attribute chain a.b.c is visited at every level: keep the longest match per line and name
    unique = sorted(set(found))
    return [f"line {line}: {what}" for line, what in unique
            if not any(l2 == line and w2 != what and w2.startswith(what.split(" (")[0] + ".") for l2, w2 in unique)]


def _uses(source, assignment_id, context, context_aliases, answer, reached):
    """[(line, what)]: ``reference_calls`` before it is sorted and written."""
    tree, found = _tree(source)
    if tree is None:
        return found
    aliases = dict(context_aliases or {})
    if context:
        context_tree, _ = _tree(context)
        aliases = _aliases(context_tree, aliases) if context_tree is not None else aliases
    aliases = _aliases(tree, aliases)
    # a receiver (builtins in builtins.exec) is said with what is read from it; a string that getattr, an import
    # or a subscript reads as a name is said as that name
    said_elsewhere, lookups = _said_elsewhere(tree, aliases)
    own_backward = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "backward"
                       for n in ast.walk(tree))   # a hand-written layer's own backward pass
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    called = {id(n.func) for n in calls}
    read_magics = {id(n.func) for n in calls if _magic_read(n)}
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Attribute) and node.attr in _IPYTHON_REWRITERS:
            what = f".{node.attr} (rewrites the cells that follow: not scanned)"
        elif assignment_id in _AUTOGRAD_ASSIGNMENTS and _sets_requires_grad(node):
            what = ".requires_grad (autograd: the question asks for a derivation)"
        elif isinstance(node, ast.Attribute) and node.attr == "run_line_magic" and id(node) not in read_magics:
            what = ".run_line_magic (a magic whose code the scan cannot read: not scanned)"
        elif _reducer(node):
            what = f"{_reducer(node)} (pickle and copy call what it returns: runs code the scan cannot read)"
        elif isinstance(node, ast.Name) and node.id in _LOOKUP_BUILTINS and isinstance(node.ctx, ast.Load) and \
                id(node) not in called:
            what = f"{node.id} passed as a value (a name looked up at run time: not scanned)"
        elif isinstance(node, (ast.Attribute, ast.Name)) or _getattr_constant(node):
            what = _reference(node, aliases, assignment_id) or (   # a receiver is said with what is read from it
                None if id(node) in said_elsewhere else _builtins_use(node, aliases) or _unread_code(node, aliases))
        elif _importer(node, aliases):
            what = _dynamic_import(node, aliases, assignment_id)
        elif assignment_id in _AUTOGRAD_ASSIGNMENTS and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "vars" and node.args and not _looked_up(node.args[0], aliases, assignment_id):
            what = "vars() (a name looked up at run time: not scanned)"   # vars(inspect.getmodule(len))["exec"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars") \
                and node.args and _looked_up(node.args[0], aliases, assignment_id):
            what = f"{node.func.id}() on {_looked_up(node.args[0], aliases, assignment_id)} (a name looked up at run " \
                   "time: not scanned)"
        elif assignment_id in _AUTOGRAD_ASSIGNMENTS and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr") and len(node.args) >= 2 \
                and not isinstance(node.args[1], ast.Constant):   # b = "backward"; getattr(loss, b)()
            what = f"{node.func.id}() by a name held in a variable (a name looked up at run time: not scanned)"
        elif assignment_id in _AUTOGRAD_ASSIGNMENTS and isinstance(node, ast.keyword) and node.arg == "requires_grad" \
                and not (isinstance(node.value, ast.Constant) and node.value.value is False):
            what = "requires_grad= (autograd: the question asks for a derivation)"
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("sys.modules") and \
                _module_looked_up(node.slice, assignment_id):
            what = "sys.modules[...] (a module looked up at run time: not scanned)"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 200 and \
                (node.value == "__builtins__" or id(node) in lookups and id(node) not in said_elsewhere):
            what = _named_by_string(node.value, assignment_id)
        elif isinstance(node, ast.Match):  # a class pattern reads attributes by keyword: case object(grad=g)
            found += [(read.lineno, what) for read in _match_reads(node)
                      if (what := _reference(read, aliases, assignment_id))]
            what = None
        if what == ".backward() (autograd: the question asks for a derivation)" and own_backward:
            what = ".backward() (autograd, or the backward method this cell defines: read which it calls)"
        if what and not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and not _reducer(node)):
            found.append((node.lineno, what))
    names, definitions = _answer_names(assignment_id), _definitions(tree)
    if names and (answer if answer is not None else bool(names & set(definitions))):
        reached = reached if reached is not None else _answer_cells({0: ("", "", definitions)}, names)[1]
        found += _numerical(tree, aliases, assignment_id, reached)
    return found


def _sets_requires_grad(node):
    """True where ``node`` sets ``requires_grad`` (``q.requires_grad = True``, ``setattr(q, "requires_grad", 1)``,
    ``Tensor.requires_grad.__set__(q, True)``), the first step of a backward pass; reading it (``if
    q.requires_grad: q = q.detach()``) is not one. ``requires_grad=`` and ``requires_grad_()`` have their rules."""
    if isinstance(node, ast.Attribute) and node.attr == "requires_grad":
        return not isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        return node.value.attr == "requires_grad"   # its descriptor: .__set__, .fset
    return (_called(node) or "").endswith("setattr") and any(
        isinstance(a, ast.Constant) and a.value == "requires_grad" for a in node.args)


def _magic_read(call):
    """True for IPython's call of a line magic the scan reads or that runs no code out of its sight:
    constant arguments (``%pip list``, ``%time f(x)``, whose code _line_magic_code finds), not a shell or a script."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "run_line_magic" and len(call.args) == 2 and
            not call.keywords and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)):
        return False
    magic, code = (a.value for a in call.args)
    return magic not in _UNREAD_MAGICS and not (   # %timeit with more options than _python_argument reads
        magic in _PYTHON_LINE_MAGICS and code.strip() and not _python_argument(code))


def _reducer(node):
    """``__reduce__`` or ``__reduce_ex__`` where a cell defines or sets one (a method, ``__reduce__ = f``,
    ``C.__reduce__ = f``); None elsewhere."""
    name = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
        node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) else \
        node.attr if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) else None
    return name if name in _REDUCERS else None


def _said_elsewhere(tree, aliases):
    """(ids of the nodes another rule speaks for, ids of the strings used to look something up). A receiver
    (``builtins`` in ``builtins.exec``) is said with what is read from it; a string that getattr, a dynamic
    import or ``sys.modules[...]`` reads as a name, as that name. A string looks something up where it is
    a call's argument or a subscript's key (``methodcaller("backward")``, ``members["backward"]``), not
    where it is only stored (``direction = "backward"``)."""
    said, lookups, looking_up = set(), set(), _looking_up(tree)
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            said.add(id(n.value))
        elif isinstance(n, ast.Subscript):
            said.add(id(n.value))
            lookups.add(id(n.slice))
            if (_dotted(n.value, aliases) or "").endswith("sys.modules"):
                said.add(id(n.slice))
        elif isinstance(n, ast.Compare) and id(n) in looking_up:   # name == "backward" over inspect.getmembers(...)
            lookups |= {id(c) for c in [n.left, *n.comparators]}
        elif isinstance(n, ast.MatchMapping):   # case {"backward": b}
            lookups |= {id(k) for k in n.keys}
        elif isinstance(n, ast.Call):
            lookups |= {id(a) for a in n.args} | {id(k.value) for k in n.keywords}
            if _getattr_constant(n) or _importer(n, aliases):
                said |= {id(a) for a in n.args[:2]}
    return said, lookups


# what looks a member up by a name computed at run time: a string compared in the same function may be that name
_DYNAMIC_LOOKUPS = {"getattr", "setattr", "delattr", "vars", "dir", "getmembers", "getmembers_static", "getattr_static",
                    "classify_class_attrs", "attrgetter", "methodcaller", "locate", "resolve_name", "import_module",
                    "__import__", "get_field"}   # and _RUN_TIME_LOOKUPS


def _looking_up(tree):
    """Ids of the nodes in a scope (the cell outside its functions, or one function or lambda) that looks a
    name up at run time (getattr, vars, inspect.getmembers, ``__dict__`` ...): there ``n == "backward"`` may
    pick what it calls; elsewhere (``if order == "backward":``) it is an ordinary comparison."""
    found, todo, lookups = set(), [tree], _DYNAMIC_LOOKUPS | _RUN_TIME_LOOKUPS
    while todo:
        scope, nodes = todo.pop(), []
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                todo.append(n)
                continue
            nodes.append(n)
            stack.extend(ast.iter_child_nodes(n))
        if any(isinstance(n, ast.Name) and n.id in lookups or isinstance(n, ast.Attribute) and n.attr in lookups
               for n in nodes):
            found |= {id(n) for n in nodes}
    return found


def _builtins_use(node, aliases):
    """The builtins read as a module (``import builtins as B; B.exec``, ``from builtins import getattr as ga``,
    ``vars(builtins)``, ``__builtins__``): what they run or look up, the scan does not read."""
    written = _dotted(node, aliases) or ""
    if written.split(".")[0] in ("builtins", "__builtins__") or isinstance(node, ast.Name) and node.id == "__builtins__":
        return f"{written or '__builtins__'} (the builtins as a module: what it runs or looks up is not scanned)"
    return None


def _named_by_string(text, assignment_id):
    """What a string names that the scan would report written as code: the builtins, a reference
    (``pydoc.locate("bayesattn_lite.attention.score_kernel")``, ``"module:name"``) or, where a derivation
    is asked, autograd (``operator.methodcaller("backward")``)."""
    if text == "__builtins__":
        return "'__builtins__' (the builtins by name: what they run or look up is not scanned)"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and text in _AUTOGRAD_STRINGS:
        return f"{text!r} (an autograd name as a string, looked up at run time: the question asks for a derivation)"
    dotted = text.replace(":", ".")
    if not all(part.isidentifier() for part in dotted.split(".")) or "." not in dotted:
        return None
    name = _canonical(dotted, assignment_id)
    if name in REFERENCES.get(assignment_id, {}):
        return f"{text!r} (names {name.removeprefix(PACKAGE + '.')}, which answers {REFERENCES[assignment_id][name]})"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and dotted.startswith(_AUTOGRAD):
        return f"{text!r} (names autograd: the question asks for a derivation)"
    return None


def _match_reads(match):
    """The attributes a ``match`` statement's class patterns read, as ``ast.Attribute`` nodes of its subject:
    ``case object(grad=g)`` under ``match torch.autograd`` reads ``torch.autograd.grad`` as ``x.grad`` does."""
    found = []

    def visit(pattern, subject):
        if isinstance(pattern, ast.MatchClass):
            for attr, inner in zip(pattern.kwd_attrs, pattern.kwd_patterns):
                read = ast.copy_location(ast.Attribute(value=subject, attr=attr, ctx=ast.Load()), pattern)
                found.append(read)
                visit(inner, read)
        elif isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
            visit(pattern.pattern, subject)
        elif isinstance(pattern, ast.MatchOr):
            for inner in pattern.patterns:
                visit(inner, subject)

    for case in match.cases:
        visit(case.pattern, match.subject)
    return found


def _looked_up(node, aliases, assignment_id):
    """"the package", or "autograd" where the assignment asks for a derivation, when ``node`` names a
    module or class whose attributes could answer a question (torch and anything in it: vars(torch.Tensor)
    holds backward); None otherwise."""
    name = _canonical(_dotted(node, aliases), assignment_id) or ""
    if name.split(".")[0] == PACKAGE:
        return "the package"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and name.split(".")[0] == "torch":
        return "autograd"
    return None


# calls that run code the scan cannot read, under any receiver (exec, builtins.exec, get_ipython().run_cell)
_BUILTIN_CODE = {"exec", "eval", "compile", "globals"}
_RUN_TIME_CODE = {"run_cell", "run_cell_async", "run_cell_magic", "FunctionType", "LambdaType", "CodeType", "ex", "ev",
                  "run_code", "run_ast_nodes", "run_path", "run_module", "runctx", "safe_execfile", "safe_run_module",
                  "runsource", "runcode", "InteractiveInterpreter", "InteractiveConsole",
                  "PyRun_SimpleString", "PyRun_String", "pythonapi", "exec_module", "load_module", "_gcd_import",
                  "getattr_static", "resolve_name", "methodcaller", "attrgetter",
                  "__self__", "f_builtins", "f_globals", "__globals__", "_getframe",   # the builtins by other roads
                  "get_objects", "get_referents", "get_referrers",   # gc: every object, the builtins' dict among them
                  "__builtins__", "__subclasses__",   # any module's __builtins__; object.__subclasses__()
                  "define_macro", "run_docstring_examples", "getmembers", "getmembers_static", "getmodule"}
# (IPython's macros, doctest's examples, inspect's lookups of members and modules by name)
# the same under their modules' names (from operator import methodcaller), and what starts another Python
_RUN_TIME_NAMES = {"operator.methodcaller", "operator.attrgetter", "pydoc.locate", "pkgutil.resolve_name",
                   "inspect.getattr_static", "importlib.util.spec_from_file_location", "subprocess.run",
                   "subprocess.Popen", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
                   "subprocess.getoutput", "subprocess.getstatusoutput",
                   "os.system", "os.popen", "os.execv", "os.execl", "os.spawnv", "multiprocessing.Process",
                   "gc.get_objects", "gc.get_referents", "gc.get_referrers", "doctest.testmod", "doctest.run_docstring_examples",
                   "doctest.DocTestRunner", "inspect.getmembers", "inspect.getmodule", "pickle.load", "pickle.loads",
                   "marshal.load", "marshal.loads", "dill.load", "dill.loads", "cloudpickle.loads"}   # code as bytes
# what runs code given as a string, a template, bytes or an annotation, or looks members up by name, under any
# receiver or module path (pickle.Unpickler(f).load(), torch.jit.CompilationUnit(src), jinja2's Template,
# string.Formatter().get_field("0.grad", ...), typing.get_type_hints on string annotations, doctest's suites)
_UNREAD_CODE = {"Unpickler", "_Unpickler", "classify_class_attrs", "DocTestSuite", "DocFileSuite", "CompilationUnit",
                "load_inline", "get_field", "get_type_hints", "get_annotations", "ForwardRef", "evaluate_forward_ref"}
_UNREAD_MODULES = {"doctest", "jinja2", "mako", "codeop"}   # every name of these runs or compiles text
_SHELL_CAPTURE = {"getoutput", "getstatusoutput"}   # a shell command's output, kept (x = !cmd): read as data
# line magics that run code the scan does not read (a shell whose output is kept, a script, a macro, a stored
# object unpickled, history run again) or change how later lines are read (autocall, alias)
_UNREAD_MAGICS = {"sx", "system", "sc", "run", "script", "bash", "sh", "macro", "store", "rerun", "recall", "edit",
                  "load", "autocall", "alias"}
_REDUCERS = {"__reduce__", "__reduce_ex__"}   # pickle and copy call what these return: any callable, by name
_LOOKUP_BUILTINS = {"getattr", "setattr", "vars"}   # passed as a value (map(getattr, ...)): a lookup out of sight
# attributes that look a name up at run time: flagged wherever they are read in a derivation set
_RUN_TIME_LOOKUPS = {"__dict__", "__getattribute__", "__getattr__", "user_ns", "user_global_ns"}
# IPython's hooks that rewrite the cells after them before they run
_IPYTHON_REWRITERS = {"input_transformers_cleanup", "input_transformers_post", "ast_transformers",
                      "input_transformer_manager", "line_transforms", "cleanup_transforms", "token_transformers"}


def _module_looked_up(key, assignment_id):
    """True when ``sys.modules[key]`` may be the package or (where a derivation is asked) torch: a key
    computed at run time may be either."""
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return True
    root = key.value.split(".")[0]
    return root == PACKAGE or (root == "torch" and assignment_id in _AUTOGRAD_ASSIGNMENTS)


def notebook_reference_calls(nb, assignment_id, folder=None):
    """``reference_calls`` over the code cells of a submitted notebook, except the cells the course
    gives unchanged (a code cell without the ``solution`` tag, same source, of the instructor version in
    ``folder``, default ``FOLDER``, or of the student version where the folder has no instructor version).
    One string per use, ``"cell N, line L: what (why)"``. The answer
    cells, where numerical differentiation is looked for, are those that define a checked question's
    function or a function such a definition uses (through any number of cells)."""
    import nbformat
    given = set()
    assignment = ASSIGNMENTS.get(assignment_id)
    handed_out = [] if assignment is None else [Path(folder or FOLDER) / p.name for p in
                                                 (assignment.instructor_path, assignment.student_path)]
    source = next((p for p in handed_out if p.exists()), None)   # a Gradescope bundle ships the student's only
    if source is not None:
        given = {c.source.strip() for c in nbformat.read(source, as_version=4).cells   # not the instructor's own
                 if c.cell_type == "code" and not {SOLUTION_TAG, INSTRUCTOR_TAG} & set(c.get("metadata", {}).get("tags", []))}
    # the names may come from an import or a renaming in any cell (the install cell imports the package):
    # the notebook's cells are read once for them, not once per cell (that was quadratic in the number of
    # cells), one cell's statements at a time (all of them at once could make a tree of gigabytes)
    cells = [(n, cell) for n, cell in enumerate(nb.cells, start=1) if cell.cell_type == "code"]
    # a budget, so that a notebook built to be slow to read (cells the kernel never compiles) costs the
    # grader a bounded time: the cells it leaves are reported, for the instructor to read
    deadline = time.monotonic() + SCAN_SECONDS

    def out_of_time(n):
        return f"cell {n} onward: not scanned (the scan's {SCAN_SECONDS} s per notebook ran out)"

    facts = {}
    for n, cell in cells:
        if time.monotonic() > deadline:   # before any cell's uses are read: say that none is listed
            return [f"no cell scanned: the scan's {SCAN_SECONDS} s per notebook ran out reading the names of "
                    f"cell {n} and before (a notebook built to be slow to read; read its cells yourself)"]
        facts[n] = _cell_facts(cell.source)
    context_aliases = {}
    for binding in [f[0] for f in facts.values()] + [f[1] for f in facts.values()]:  # the imports first
        context_aliases = _aliases(ast.parse(binding), context_aliases) if binding else context_aliases
    answers, reached = _answer_cells(facts, _answer_names(assignment_id))
    found = {}   # cell -> its uses
    for n, cell in cells:
        if cell.source.strip() in given and not (n in answers and _defines_function(cell.source, reached)):
            continue   # a given cell is the course's: read only where it defines a function an answer calls
        if time.monotonic() > deadline:
            return _in_order(found, answers) + [out_of_time(n)]
        found[n] = [f"cell {n} of the notebook, {use}" for use in reference_calls(
            cell.source, assignment_id, answer=n in answers, context_aliases=context_aliases, reached=reached)]
    return _in_order(found, answers)


def _in_order(found, answers):
    """The uses, those of the answer cells first, then each other cell's first use, then the rest: where a
    report lists only the first of many (a notebook can make thousands), decoys cannot push out the answer's."""
    found = {n: _grouped(uses) for n, uses in found.items()}
    answer = [u for n in found if n in answers for u in found[n]]
    first = [uses[0] for n, uses in found.items() if n not in answers and uses]
    rest = [u for n, uses in found.items() if n not in answers for u in uses[1:]]
    return answer + first + rest


def _grouped(uses):
    """A cell's uses with each kind listed once, at its first line, and how many more the cell has: a
    cell of many copies of one use (decoys) takes one line of the report."""
    kinds = {}
    for use in uses:
        kinds.setdefault(use.split(": ", 1)[-1], []).append(use)
    return [same[0] + (f" (and {len(same) - 1} more in this cell)" if len(same) > 1 else "") for same in kinds.values()]


def _defines_function(source, names):
    """True when the cell defines, outside any function, a function (or class) of ``names``."""
    tree, _ = _tree(source)
    return tree is not None and any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                                    and node.name in names for node in _statements(tree.body))


def _answer_cells(facts, names):
    """(the cells that define one of ``names`` or a name their definitions use, transitively; those names)."""
    defined = {}
    for n, (_, _, definitions) in facts.items():
        for name, used in definitions.items():
            defined.setdefault(name, []).append((n, used))
    cells, todo, seen = set(), list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for n, used in defined.get(name, ()):
            cells.add(n)
            todo += used
    return cells, seen


def _renaming(node):
    """True for ``A = attention``, ``f = getattr(m, "name")``, ``m = importlib.import_module(...)``: a statement
    that binds a name the scan may resolve in another cell."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
        return False
    value = node.value
    return isinstance(value, (ast.Name, ast.Attribute)) or _getattr_constant(value) or (
        isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))
        and (getattr(value.func, "id", None) or value.func.attr) in ("import_module", "__import__"))


def _cell_facts(source):
    """(its imports, its renamings: the statements of a cell that bind names other cells may use, as
    source; its ``_definitions``); nothing for a cell that is not read."""
    try:
        tree, _ = _tree(source)
        if tree is None:
            return "", "", {}
        nodes = list(ast.walk(tree))
        return ("\n".join(ast.unparse(node) for node in nodes if isinstance(node, (ast.Import, ast.ImportFrom))),
                "\n".join(ast.unparse(node) for node in nodes if _renaming(node)), _definitions(tree))
    except (RecursionError, MemoryError):  # reported by reference_calls
        return "", "", {}


# ----------------------------------------------------------------------------- stubs

_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?::[ \t]*(?P<hint>.*?))?[ \t]*\n.*?^[ \t]*# END SOLUTION[ \t]*$\n?",
                         re.S | re.M)
_MD_BLOCK = re.compile(r"<!--\s*BEGIN SOLUTION(?::\s*(?P<hint>.*?))?\s*-->.*?<!--\s*END SOLUTION\s*-->", re.S)


def _code_stub(match):
    hint = (match.group("hint") or "write your solution here").strip()
    return f"{match.group('indent')}raise NotImplementedError({hint!r})\n"


def _md_stub(match):
    hint = (match.group("hint") or "").strip()
    return "*Your answer here.*" + (f" ({hint})" if hint else "")


def stub_source(source, cell_type="code"):
    """The source of a solution cell with every solution block replaced by its stub.

    Raises ValueError when there is no complete BEGIN/END block (a tagged cell would leak its solution).
    """
    pattern, stub = (_CODE_BLOCK, _code_stub) if cell_type == "code" else (_MD_BLOCK, _md_stub)
    new, n = pattern.subn(stub, source)
    if not source.endswith("\n"):
        new = new.rstrip("\n")
    if n == 0 or "BEGIN SOLUTION" in new or "END SOLUTION" in new:
        marker = "# BEGIN SOLUTION: hint ... # END SOLUTION" if cell_type == "code" else \
            "<!-- BEGIN SOLUTION: hint --> ... <!-- END SOLUTION -->"
        raise ValueError(f"a {cell_type} cell tagged {SOLUTION_TAG!r}: expected complete blocks {marker}, "
                         f"got:\n{source[:300]}")
    return new


def student_version(nb, assignment_id):
    """A new notebook: ``nb`` (an instructor version) with solutions stubbed, instructor cells dropped,
    outputs cleared; a class variant's forms stay in its metadata."""
    student = copy.deepcopy(nb)
    cells = []
    for cell in student.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if INSTRUCTOR_TAG in tags:
            continue
        if SOLUTION_TAG in tags:
            cell.source = stub_source(cell.source, cell.cell_type)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.get("metadata", {}).pop("execution", None)
        cell.pop("id", None)
        cells.append(cell)
    student.cells = cells
    # only what does not depend on the kernel that executed the instructor version (its Python version
    # is in language_info): the student version changes when a source changes, not when it is re-run
    student.metadata = {
        "kernelspec": nb.metadata.get("kernelspec", {"display_name": "Python 3", "language": "python", "name": "python3"}),
        "language_info": {"name": "python"},
        "bayesattn_lite": {"assignment": assignment_id, "version": "student"},
    }
    forms = nb.metadata.get("bayesattn_lite", {}).get("variant")
    if forms:
        student.metadata["bayesattn_lite"]["variant"] = forms
    return student


def solved_submission(assignment, folder=None):
    """A correct submission of ``assignment``: its instructor version (in ``folder``, default ``FOLDER``)
    as a student hands it in (no instructor cells, no solution markers, no outputs, student metadata).
    For testing and timing the grader (tests/test_grading.py, benchmarks/grading_class.py)."""
    import nbformat
    nb = nbformat.read(Path(folder or FOLDER) / assignment.instructor_path.name, as_version=4)
    nb.cells = [c for c in nb.cells if INSTRUCTOR_TAG not in c.metadata.get("tags", [])]
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n")
                                if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    forms = nb.metadata.get("bayesattn_lite", {}).get("variant")  # a class variant's, as its handout says
    nb.metadata["bayesattn_lite"] = {"assignment": assignment.id, "version": "student",
                                     **({"variant": forms} if forms else {})}
    return nb


# ----------------------------------------------------------------------------- the points table

TABLE_HEADER = "| question | what | graded | points |"
# the table in the first cell of a problem set: the header and every line after it that starts with "|"
_TABLE = re.compile(r"^\| question \| what \| graded \| points \|[^\n]*(?:\n\|[^\n]*)*", re.M)


def points_table(assignment):
    """The Markdown table of ``assignment``'s questions and points that its first cell shows students:
    generated from the configuration (``course.toml``), so that what students read is what the grader awards."""
    rows = [TABLE_HEADER, "|---|---|---|---|"]
    for q in assignment.questions:
        how = "written, graded by your instructor" if q.written else "code, checked automatically"
        if q.per_output or q.mistakes:
            how += ", partial credit"
        rows.append(f"| {q.id} | {q.title} | {how} | {q.points:g} |")
    rows.append(f"| | total | | {sum(q.points for q in assignment.questions):g} |")
    return "\n".join(rows)


def with_points_table(nb, assignment):
    """Replace, in place, the points table of ``nb``'s first Markdown cell by ``points_table(assignment)``;
    True when it changed. ValueError when the cell has no such table (a new problem set needs one)."""
    cell = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    if cell is None or not _TABLE.search(cell.source):
        raise ValueError(f"{assignment.id}: expected a points table starting {TABLE_HEADER!r} in the first "
                         "Markdown cell of the instructor version")
    new = _TABLE.sub(lambda _: points_table(assignment), cell.source, count=1)
    changed, cell.source = new != cell.source, new
    return changed


def configured(assignment_id, folder=None, course_path=None):
    """The problem set as the course configures it: ``course_path``, else ``course.toml`` in ``folder``
    (default ``FOLDER``), else the registry's defaults."""
    from . import course  # course.py builds on this module
    path = Path(course_path) if course_path else Path(folder or FOLDER) / "course.toml"
    return (course.load(path) if course_path or path.exists() else course.defaults()).assignment(assignment_id)


def _instructor_notebook(assignment, folder=None, course_path=None):
    """The instructor version with its points table from the configuration and, for a class variant
    (``variant`` in the configuration), its questions edited into the class's forms, outputs cleared
    (the published run's outputs would show the published form)."""
    import nbformat
    from . import variants
    nb = nbformat.read(Path(folder or FOLDER) / assignment.instructor_path.name, as_version=4)
    if nb.metadata.get("bayesattn_lite", {}).get("assignment") != assignment.id:
        raise ValueError(f"{assignment.instructor_path.name}: expected metadata bayesattn_lite.assignment = "
                         f"{assignment.id!r}, got {nb.metadata.get('bayesattn_lite')!r}")
    configured_set = configured(assignment.id, folder, course_path)
    with_points_table(nb, configured_set)
    forms = {q.id: q.form for q in configured_set.questions if q.form}
    if forms:
        nb = variants.handout(nb, assignment.id, forms)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
    return nb


def render(assignment, folder=None, course_path=None):
    """The student notebook of ``assignment`` (its instructor version in ``folder``, default ``FOLDER``) as
    the text the generator writes, its points table (and class variant) from the course's configuration."""
    import nbformat
    student = student_version(_instructor_notebook(assignment, folder, course_path), assignment.id)
    for n, cell in enumerate(student.cells):  # stable ids: regenerating gives the same bytes
        cell["id"] = f"{assignment.id}-{n}".replace("_", "-")
    return nbformat.writes(student) + "\n"


def render_instructor(assignment, folder=None, course_path=None):
    """The instructor version's text with its points table (and class variant) from the configuration."""
    import nbformat
    return nbformat.writes(_instructor_notebook(assignment, folder, course_path)) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.instructor.assignments",
                                     description="Write the student versions of the problem sets.")
    parser.add_argument("ids", nargs="*", help=f"default: all of {sorted(ASSIGNMENTS)}")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if one is out of date")
    parser.add_argument("--folder", type=Path, help="the problem sets' folder (default: book/assignments of "
                        "the checkout the package sits in, else of the current directory)")
    parser.add_argument("--course", type=Path, help="the course configuration (default: course.toml in the "
                        "folder); with a class variant (variant = <seed>), the notebooks are in the class's forms")
    parser.add_argument("--out", type=Path, help="where to write the notebooks (default: the folder; a class "
                        "variant needs a folder of its own, for the grader's --folder)")
    args = parser.parse_args(argv)
    # an installed package has no book/ beside it: then the course's checkout is where we are
    folder = args.folder or (FOLDER if FOLDER.is_dir() else Path.cwd() / "book" / "assignments")
    if not folder.is_dir():
        parser.error(f"--folder: expected the folder of the problem sets (book/assignments), got {folder}")
    unknown = [i for i in args.ids if i not in ASSIGNMENTS]
    if unknown:
        parser.error(f"unknown assignment(s) {unknown}: expected some of {sorted(ASSIGNMENTS)}")
    out = args.out or folder
    stale = []
    for aid in args.ids or ASSIGNMENTS:
        a = ASSIGNMENTS[aid]
        try:  # the instructor version first: its points table, then the student version made from it
            if any(q.form for q in configured(aid, folder, args.course).questions) and \
                    out.resolve() == folder.resolve():
                parser.error(f"{aid}: the course configuration sets a class variant; write it with --out DIR, "
                             f"not over the published notebooks in {folder}")
            texts = [(out / a.instructor_path.name, render_instructor(a, folder, args.course)),
                     (out / a.student_path.name, render(a, folder, args.course))]
        except ValueError as exc:  # a bad course.toml or a notebook without a points table
            parser.error(str(exc))
        out.mkdir(parents=True, exist_ok=True)
        forms = {q.id: q.form for q in configured(aid, folder, args.course).questions if q.form}
        if forms:   # which form each varied question takes: the instructor reads it here, not in the metadata
            print(f"{aid}: class forms " + ", ".join(f"{qid} = {form}" for qid, form in forms.items()))
        for path, text in texts:
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == text:
                print(f"{path}: up to date")
            elif args.check:
                stale.append(path.name)
                print(f"{path}: OUT OF DATE (run python -m bayesattn_lite.instructor.assignments)")
            else:
                path.write_text(text, encoding="utf-8")
                print(f"{path}: written")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
