"""The package's shape: three tiers of flat modules, imports only downward, no cycles.

1. concepts: what the paper is about, with no chapter and no figure in them;
2. chapter experiments: compute what a chapter measures and return plain results;
3. presentation and teaching: figures, widgets, exercise checks;
4. the instructor's subpackage (``instructor``): problem sets, their student versions, the grader.

CONTRIBUTING.md draws the graph this test enforces.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "bayesattn_lite"

TIERS = {
    "concepts": ["_validate", "_types", "attention", "checkpoints", "tasks", "wind_tunnels", "models", "train",
                 "batched", "threads", "em", "diagnostics", "monitor", "gradcheck"],
    "experiments": ["specialisation", "experiments", "comparison", "converged", "distributed", "dynamics"],
    "presentation": ["plots", "widgets", "checks", "checks._engine", "checks.chapters_1_3", "checks.chapters_4_5",
                     "checks.chapters_6_9", "checks.chapter_04", "checks.chapter_04b", "checks.chapter_05",
                     "checks.chapter_06", "checks.chapter_07", "checks.chapter_08", "checks.chapter_09",
                     "checks.problem_sets", "checks.fallback"],
    "instructor": ["instructor", "instructor.assignments", "instructor.learner_copies", "instructor.grading",
                   "instructor._sandbox", "instructor._cgroup", "instructor._worker", "instructor.course",
                   "instructor.release", "instructor.variants",
                   "instructor.lms"],
}
LEVEL = {module: level for level, modules in enumerate(TIERS.values()) for module in modules}
PLOTTING = ("matplotlib", "ipywidgets", "IPython")


def modules():
    """Every module of the package by its dotted name below it ("attention", "instructor.grading"); a
    subpackage's ``__init__`` by the subpackage's name ("checks"), since that is what imports name."""
    names = []
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts and "__pycache__" not in parts:
            names.append(".".join(parts))
    return sorted(names)


def source(module):
    """The file of ``module``: its .py, or the ``__init__.py`` of a subpackage."""
    path = PACKAGE / f"{module.replace('.', '/')}.py"
    return path if path.exists() else PACKAGE / module.replace(".", "/") / "__init__.py"


def imports(module, top_level_only=False):
    """The package modules ``module`` imports (``from . import x``, ``from .x import y``, ``from .. import
    x`` in a subpackage), and the outside packages, anywhere in the file or only at its top level."""
    path = source(module)
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    inside, outside = set(), set()
    # the subpackage the module is in ([] at the top); a subpackage's __init__ is in the subpackage itself
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = here[:len(here) - (node.level - 1)]
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names
                                                                      if not a.name.startswith("__")]  # __version__
            inside.update(".".join([*base, name]) for name in names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            outside.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            outside.update(a.name.split(".")[0] for a in node.names)
    return inside, outside


def test_every_module_has_a_tier():
    assert set(modules()) == set(LEVEL), f"give these modules a tier: {set(modules()) ^ set(LEVEL)}"


@pytest.mark.parametrize("module", modules())
def test_imports_go_down_the_tiers(module):
    """A module imports only its own tier or a lower one."""
    inside, outside = imports(module)
    upward = sorted(m for m in inside if LEVEL[m] > LEVEL[module])
    assert not upward, f"{module} ({list(TIERS)[LEVEL[module]]}) imports {upward} from a higher tier"
    if LEVEL[module] < LEVEL["plots"]:
        assert not outside & set(PLOTTING), f"{module} computes; it must not import {outside & set(PLOTTING)}"


def test_no_import_cycles():
    graph = {m: imports(m, top_level_only=True)[0] for m in modules()}
    state = {}

    def visit(m, path):
        if state.get(m) == "open":
            raise AssertionError(f"import cycle: {' -> '.join(path + [m])}")
        if state.get(m) != "done":
            state[m] = "open"
            for n in sorted(graph[m]):
                visit(n, path + [m])
            state[m] = "done"

    for m in graph:
        visit(m, [])


# The hidden imports that are not shims, each with why: they import nothing of the package, or only down
# the tiers.
NOT_SHIMS = {
    "checks: module-level __getattr__": "answers a check_<name> the installed release lacks (a question an "
                                        "instructor added) with a failing verdict that says so",
    "instructor.course: importlib.import_module": "an instructor's own check, named in course.toml",
    "instructor.assignments: importlib.import_module": "the reference-call scan follows a learner's dotted name "
                                                       "into the package's modules below the instructor's side, "
                                                       "to catch a reference re-exported by another module",
}


def test_no_import_the_tiers_cannot_see():
    """The tier and cycle tests read import statements; an import by name (importlib, __import__) or a
    module-level __getattr__ that forwards names (how a shim hides an import) would slip past them."""
    hidden = []
    for module in modules():
        tree = ast.parse(source(module).read_text())
        hidden += [f"{module}: module-level __getattr__" for node in tree.body
                   if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                if called in ("importlib.import_module", "import_module", "__import__"):
                    hidden.append(f"{module}: {called}")
    assert not [h for h in hidden if h not in NOT_SHIMS], hidden


GRADER = tuple(TIERS["instructor"])  # the instructor's side: student versions and the autograder


def test_the_instructor_side_is_its_own_subpackage():
    assert sorted(m for m in modules() if m.split(".")[0] == "instructor") == sorted(GRADER)


@pytest.mark.parametrize("module", [m for m in modules() if m not in GRADER])
def test_nothing_a_learner_imports_depends_on_the_grader(module):
    """The grader (its sandbox starts processes in namespaces) is the instructor's: no module a chapter or
    a learner imports reaches it, so a learner's import never runs or needs it."""
    inside, _ = imports(module)
    assert not {m for m in inside if m == "instructor" or m.startswith("instructor.")}, \
        f"{module} imports {sorted(inside)} of the grader"


def test_only_the_grader_starts_sandboxes():
    """The grader and its worker process (which starts its first kernel before it imports the grader)."""
    assert sorted(m for m in modules() if "instructor._sandbox" in imports(m)[0]) == ["instructor._worker",
                                                                                      "instructor.grading"]


def contributing_homes():
    """The package names CONTRIBUTING.md's "Where a concept lives" table gives as homes (its second
    column, in backticks): modules (``attention``) and dotted names (``diagnostics.mean_sd``)."""
    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    table = text.split("| concept | home |", 1)[1].split("\n\n", 1)[0]
    homes = []
    for row in table.splitlines()[2:]:
        home = row.rsplit("|", 2)[-2]
        homes += [h.split("(")[0] for h in re.findall(r"`([A-Za-z_][\w.]*(?:\([^`]*\))?)`", home)]
    return [h for h in homes if h.split(".")[0] in {m.split(".")[0] for m in modules()}]


@pytest.mark.parametrize("home", contributing_homes())
def test_every_home_contributing_names_exists(home):
    """CONTRIBUTING's table is only true while each name it gives as a concept's home exists there."""
    module, _, attribute = home.partition(".")
    found = importlib.import_module(f"bayesattn_lite.{module}")
    for part in filter(None, attribute.split(".")):
        assert hasattr(found, part), f"CONTRIBUTING.md names `{home}` as a home, but {found.__name__} has no {part!r}"
        found = getattr(found, part)
