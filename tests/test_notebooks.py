"""The book's notebooks as files: listed in the table of contents, committed executed, and
installing the same release of the package from the same repository as _config.yml names.

nbval (configured in pyproject.toml) executes them; these tests check what execution cannot.
"""

import ast
import base64
import copy
import io
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from PIL import Image

import bayesattn_lite

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
# the release's wheel, attached to its GitHub release by .github/workflows/release.yml
INSTALL_SPEC = f'"{bayesattn_lite.REPOSITORY_URL}/releases/download/"\n' \
               '                          f"v{RELEASE}/bayesattn_lite-{RELEASE}-py3-none-any.whl"'
RELEASE_LINE = f'RELEASE = "{bayesattn_lite.__version__}"'



def toc_files(entries):
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        yield from toc_files(entry.get("chapters", []) + entry.get("sections", []) + entry.get("parts", []))


def test_config_names_the_package_release_and_repository():
    assert str(CONFIG["release"]) == bayesattn_lite.__version__
    assert CONFIG["repository"]["url"] == bayesattn_lite.REPOSITORY_URL
    assert CONFIG["repository"]["branch"] == f"v{bayesattn_lite.__version__}", "buttons open this release's tag"
    assert bayesattn_lite.REPOSITORY_URL in (ROOT / "pyproject.toml").read_text()


def test_every_notebook_is_in_the_table_of_contents_and_back():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(toc_files([toc, *toc.get("parts", [])])) | {toc["root"]}
    for name in listed:
        assert any((ROOT / name).with_suffix(s).exists() for s in (".md", ".ipynb")), f"{name} is missing"
    # the problem sets' instructor versions (solutions) are the one exception: out of the book, on purpose
    from bayesattn_lite.instructor.assignments import ASSIGNMENTS
    instructor = {a.instructor_path for a in ASSIGNMENTS.values()}
    for nb in NOTEBOOKS:
        name = str(nb.relative_to(ROOT).with_suffix(""))
        if nb in instructor:
            assert name not in listed, f"{nb.name} holds the solutions: it must not be a page of the book"
            assert nb.relative_to(ROOT).as_posix() in CONFIG["exclude_patterns"], f"exclude {nb.name} in _config.yml"
        else:
            assert name in listed, f"{nb.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_install_cell_pins_this_release(path):
    nb = nbformat.read(path, as_version=4)
    first = next(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert INSTALL_SPEC in first, f"first code cell should install {INSTALL_SPEC!r}"
    assert RELEASE_LINE in first, f"first code cell should say {RELEASE_LINE!r}"
    assert "bayesattn_lite.__version__ != RELEASE" in first, "check the installed version against the release"
    assert 'find_spec("bayesattn_lite") is None' in first, "install only when the package is missing"
    assert "BAYESATTN_LITE_SPEC" in first, "a test environment must be able to point at a local wheel"
    assert not re.search(r"pip install[^\n]*\btorch\b", first), "never reinstall torch"


# Student versions of the problem sets (book/assignments/*_student.ipynb) are generated with their
# solutions replaced by stubs and their outputs cleared: committed unexecuted, on purpose.
# tests/test_assignments.py checks that they are up to date; every other test here covers them.
EXECUTED = [p for p in NOTEBOOKS if not p.stem.endswith("_student")]


@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: p.name)
def test_notebook_is_committed_executed_in_order(path):
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), f"execute {path.name} top to bottom before committing"
    for cell in code:
        for out in cell.outputs:
            assert out.output_type != "error", f"{path.name} has an error output:\n{cell.source[:200]}"
            assert "Traceback" not in str(out.get("text", "")), f"{path.name} shows a traceback"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_uses_no_book_only_macros(path):
    """The MathJax macros of _config.yml exist only in the built book, not in Jupyter or Colab."""
    macros = CONFIG["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for name in macros:
                assert not re.search(rf"\\{name}(?![A-Za-z])", cell.source), f"\\{name} in {path.name}"


@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: p.name)
def test_every_figure_has_alt_text_and_a_caption(path):
    """Readers without sight get the alt text; every reader gets the caption cell after the figure."""
    nb = nbformat.read(path, as_version=4)
    for n, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and any("image/png" in out.get("data", {}) for out in cell.outputs):
            alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
            assert len(alt) > 10, f"{path.name}: a figure cell has no alt text (metadata mystnb.image.alt):\n{cell.source[:200]}"
            later = [c for c in nb.cells[n + 1:] if c.cell_type == "markdown"]
            assert later and "**Figure" in later[0].source, f"{path.name}: no **Figure.** caption after:\n{cell.source[:200]}"


def shown_width(output):
    """The width a page gives a PNG: a retina figure says it in its metadata (half its pixels)."""
    width = output.get("metadata", {}).get("image/png", {}).get("width")
    if width is None:
        width = Image.open(io.BytesIO(base64.b64decode(output["data"]["image/png"]))).size[0]
    return width


@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: p.name)
def test_wide_figures_take_the_full_width_of_the_page(path):
    """A figure wider than 10 inches (1000 px at the course's 100 dpi), squeezed into the text column,
    would show its labels at half size: such cells carry the tag full-width (sphinx-book-theme). So does
    a figure more than 2.2 times as wide as tall (a row of panels): on a phone, _static/course.css keeps
    full-width figures at a readable width in a box that scrolls on its own."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        images = [out for out in getattr(cell, "outputs", []) if "image/png" in out.get("data", {})]
        widths = [shown_width(out) for out in images]
        sizes = [Image.open(io.BytesIO(base64.b64decode(out["data"]["image/png"]))).size for out in images]
        if widths and (max(widths) > 1000 or max(w / h for w, h in sizes) > 2.2):
            assert "full-width" in cell.metadata.get("tags", []), f"{path.name}: tag this wide figure's cell full-width:\n{cell.source[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_install_cell_fails_with_a_readable_message(tmp_path, monkeypatch, path):
    """Where the package cannot be installed (the repository or release not published yet, no
    network), the first cell stops with a message that says what failed and what to do."""
    import importlib.util

    from IPython.core.interactiveshell import InteractiveShell

    nb = nbformat.read(path, as_version=4)
    first = next(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert '%pip install --quiet "{spec}"' in first, "install into the running kernel with %pip"
    guard = first.split("\n\n")[0]  # the install guard, without the imports after it
    monkeypatch.setenv("BAYESATTN_LITE_SPEC", str(tmp_path / "bayesattn_lite-0.1.0-py3-none-any.whl"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "bayesattn_lite" else real(name, *args))
    result = InteractiveShell.instance().run_cell(guard)
    error = result.error_in_exec
    assert isinstance(error, RuntimeError), f"expected a RuntimeError, got {error!r}"
    for words in ("could not be installed", "not published yet", "no network", "BAYESATTN_LITE_SPEC"):
        assert words in str(error), words


@pytest.mark.parametrize("path", NOTEBOOKS[:1], ids=lambda p: p.name)
def test_install_cell_refuses_another_release_of_the_package(monkeypatch, path):
    """A runtime that already has another release of the package (an old install) is told so, with what
    to do, instead of running this release's notebook on other functions."""
    from IPython.core.interactiveshell import InteractiveShell

    nb = nbformat.read(path, as_version=4)
    guard = next(cell.source for cell in nb.cells if cell.cell_type == "code").split("\n\n")[0]
    monkeypatch.setattr(bayesattn_lite, "__version__", "0.0.1")
    error = InteractiveShell.instance().run_cell(guard).error_in_exec
    assert isinstance(error, RuntimeError) and "0.0.1 is installed" in str(error), repr(error)
    monkeypatch.undo()
    assert InteractiveShell.instance().run_cell(guard).error_in_exec is None


CHECKED = re.compile(r"checks\.check_\w+\(([^)]*)\)")


def _exercised(code):
    """Names an exercise asks the learner to write: handed to a checks.check_* function, or named by
    a problem set's question (writing them is the exercise, so they are not pastes)."""
    exercised = {name for args in CHECKED.findall(code) for name in re.findall(r"\w+", args)}
    from bayesattn_lite.instructor import assignments
    for assignment in assignments.ASSIGNMENTS.values():
        for question in assignment.questions:
            exercised.update(question.names)
    return exercised


# ----------------------------------------------------------------------------- renamed pastes

def _code_of(source):
    """A cell's Python, without IPython's % and ! lines (which are not Python)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


class _Placeholders(ast.NodeTransformer):
    """Every argument and local name of one function becomes v0, v1, ... in order of first use, so
    that a copy with its variables renamed reads the same; names it does not bind (modules, globals,
    attributes) are kept."""

    def __init__(self, local):
        self.names = {name: f"v{i}" for i, name in enumerate(local)}

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self.names.get(node.id, node.id), node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(self.names.get(node.arg, node.arg)), node)


MIN_NODES = 25  # bodies smaller than this (a return of one call, ...) are alike by chance


def normalised_body(fn):
    """The AST of a function's body with its docstring dropped and its local names replaced by
    placeholders (``_Placeholders``), as a string; None when the body is too small to compare."""
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) \
        and isinstance(getattr(fn.body[0], "value", None), ast.Constant) else fn.body
    if sum(1 for stmt in body for _ in ast.walk(stmt)) < MIN_NODES:
        return None
    local = [a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) or isinstance(node, ast.arg):
                name = node.id if isinstance(node, ast.Name) else node.arg
                if name not in local:
                    local.append(name)
    module = ast.Module([_Placeholders(local).visit(copy.deepcopy(stmt)) for stmt in body], type_ignores=[])
    return ast.dump(module, annotate_fields=False)


def _functions(tree):
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def package_functions():
    """{name of a module-level function, public or private: "module.name"} and {normalised body of any
    function or method: "module.name"} over every module of the package (the instructor's too)."""
    names, bodies = {}, {}
    root = Path(bayesattn_lite.__file__).parent
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                names.setdefault(node.name.lstrip("_"), f"{module}.{node.name}")
        for fn in _functions(tree):
            body = normalised_body(fn)
            if body is not None:
                bodies.setdefault(body, f"{module}.{fn.name}")
    return names, bodies


def pasted_copies(code, names, bodies, exempt=()):
    """The functions ``code`` defines that the package already has: at the top level, the same name
    with or without a leading underscore; anywhere, the same body under another name."""
    found, tree = [], ast.parse(code)
    for fn in _functions(tree):
        if fn.name in exempt:
            continue
        if fn in tree.body and fn.name.lstrip("_") in names:  # a closure's name is its own business
            found.append(f"{fn.name} (the package has {names[fn.name.lstrip('_')]})")
        elif normalised_body(fn) in bodies:
            found.append(f"{fn.name} (a renamed copy of {bodies[normalised_body(fn)]})")
    return found


def test_a_renamed_paste_of_a_package_function_is_caught():
    """The check the chapters pass: a private helper pasted under its own name, and a package
    function pasted with its name, arguments and locals renamed, are both found; a function of
    the chapter's own is not."""
    names, bodies = package_functions()
    paste = '''
def first_time_within(xs, gaps, tol):
    gaps = np.atleast_2d(_validate.number_array("excess", gaps))
    xs = _validate.number_array("steps", xs)
    if xs.ndim != 1 or len(xs) != gaps.shape[-1] or (np.diff(xs) <= 0).any():
        _validate.fail("steps", f"{gaps.shape[-1]} strictly increasing steps (one per column of excess)", xs)
    result = np.full(len(gaps), np.nan)
    for row, g in enumerate(gaps):
        over = np.nonzero(~(g <= tol))[0]
        if len(over) == 0:
            result[row] = xs[0]
        elif over[-1] < len(g) - 1:
            result[row] = xs[over[-1] + 1]
    return result

def one_thread():
    pass

def my_table(rows):
    for row in rows:
        print(row)
'''
    found = pasted_copies(paste, names, bodies)
    assert any(f.startswith("first_time_within (a renamed copy of experiments.within") for f in found), found
    assert any(f.startswith("one_thread (the package has ") for f in found), found
    assert not any(f.startswith("my_table") for f in found), found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapters_import_helpers_instead_of_pasting_them(path):
    """A notebook that defines a function the package already has is a second copy that will drift:
    one of the same name (public or private, with or without the leading underscore) or one whose
    body is the same up to the names of its arguments and locals (a renamed paste).
    Exempt: an exercise's own implementation (``_exercised``)."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(_code_of(c.source) for c in nb.cells if c.cell_type == "code")
    names, bodies = package_functions()
    pasted = pasted_copies(code, names, bodies, _exercised(code))
    assert not pasted, f"{path.name} defines functions the package has; import them instead: {pasted}"


CHAPTERS = sorted((ROOT / "book").glob("0[0-9]*_*.ipynb"))  # 04b_feedback_loop too


LAB_NOTES = "## Lab notes"      # the heading that ends a chapter's core path; the evidence follows it
READING_SPEED = 75              # words of prose a minute, with the formulas and code around them: what a
                                # first-year graduate student took on chapters 1-9 (63-103; outside review, Dec 2026)
MINUTES_BY_STARS = {1: 5, 2: 12, 3: 25}   # an exercise with its check or prediction, by its difficulty: around
                                # the same review's 7-12 minutes an exercise, and a ★★★ one a small project
CORE_PATH_WORDS = 2500          # at most, in the core path of chapters 4-9: about 33 minutes of reading


def prose_words(text):
    """The words a reader reads in Markdown: no formulas, no link targets, no directive fences or options."""
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " x ", text)              # an inline formula reads as about one word
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\{[\w:-]+\}(?=`)", "", text)              # a role reads as its text: {term}`x` as x
    text = re.sub(r"\s*<[^<>`]*>(?=`)", "", text)             # ... and {term}`x <target>` as x too
    text = "\n".join(line for line in text.splitlines() if not re.match(r"\s*(```|:\w+:)", line))
    return len(re.findall(r"[A-Za-z0-9][\w'’-]*", text))


def chapter_parts(nb):
    """(core path, lab notes, stars): the Markdown a reader reads before the lab notes heading and after it,
    each without the folded solutions, and the difficulty (1-3 stars) of each exercise of the core path."""
    core, lab, exercises, in_lab, in_solution = [], [], [], False, False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        in_lab = in_lab or cell.source.startswith(LAB_NOTES)
        if "{solution-start}" in cell.source:
            in_solution = True
        if not in_solution:
            (lab if in_lab else core).append(cell.source)
            if not in_lab:
                exercises += [len(stars) for stars in re.findall(r"\{exercise\}[^\n]*\((★+)\)", cell.source)]
                assert len(exercises) == len(re.findall(r"\{exercise\}", "\n".join(core))), \
                    f"an exercise without its stars: {cell.source[:80]!r}"
        if "{solution-end}" in cell.source:
            in_solution = False
    return "\n".join(core), "\n".join(lab), exercises


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_chapter_opens_with_its_time_what_it_builds_on_and_where_the_paper_says_it(path):
    """As Neuromatch's tutorials do: before the first idea, the reader learns how long the chapter takes
    (reading at READING_SPEED words a minute and MINUTES_BY_STARS an exercise, the stated figures
    within 20% of that; the lab notes apart), which earlier chapters it needs, and which part of which
    paper it is about."""
    nb = nbformat.read(path, as_version=4)
    box = nb.cells[1].source
    assert box.startswith("```{admonition} Before you start"), f"{path.name}: cell 2 is not the 'Before you start' box"
    core, lab, stars = chapter_parts(nb)
    count, exercise_minutes = len(stars), sum(MINUTES_BY_STARS[n] for n in stars)
    stated = re.search(r"\*\*Time:\*\* about (\d+) minutes to read, and (\d+) more for its (\d+) exercises", box)
    assert stated, f"{path.name}: the box should say 'about R minutes to read, and E more for its N exercises'"
    read, minutes, said_count = map(int, stated.groups())
    words = prose_words(core)
    assert abs(read - words / READING_SPEED) <= 0.2 * words / READING_SPEED + 1, \
        f"{path.name}: {read} minutes to read {words} words? about {words / READING_SPEED:.0f}"
    assert said_count == count and minutes == exercise_minutes, \
        f"{path.name}: {count} exercises ({stars} stars), {exercise_minutes} minutes; the box says {said_count}, {minutes}"
    if lab:
        lab_stated = re.search(r"the lab notes .*?about (\d+) minutes", box)
        assert lab_stated, f"{path.name}: the box should say how long the lab notes take, apart"
        lab_words = prose_words(lab)
        assert abs(int(lab_stated.group(1)) - lab_words / READING_SPEED) <= 0.2 * lab_words / READING_SPEED + 1, \
            f"{path.name}: lab notes of {lab_words} words take about {lab_words / READING_SPEED:.0f} minutes"
    assert "**Builds on:**" in box and "**In the paper:**" in box
    assert re.search(r"arXiv:2512\.2247[13]", box.split("**In the paper:**")[1]), f"{path.name}: cite the paper's arXiv id"
    # the exercises without their solutions, in Colab, of the release the buttons and install cell name
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    copy = f"learner/{path.name}"
    assert f"colab.research.google.com/github/{repo}/blob/{CONFIG['repository']['branch']}/{copy}" in box
    assert (ROOT / copy).exists(), f"{copy} is missing: python -m bayesattn_lite.instructor.learner_copies"


COURSE = [p for p in CHAPTERS if p.name[:2] in ("04", "05", "06", "07", "08", "09")]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_chapters_4_to_9_have_a_short_core_path_and_their_evidence_in_lab_notes(path):
    """A student follows the core path in an evening: at most CORE_PATH_WORDS of prose before the lab
    notes, which hold the controls, ladders and long tables, and which the core path links to."""
    nb = nbformat.read(path, as_version=4)
    core, lab, _ = chapter_parts(nb)
    assert lab, f"{path.name}: no '{LAB_NOTES}' section"
    assert prose_words(core) <= CORE_PATH_WORDS, f"{path.name}: the core path has {prose_words(core)} words"
    labels = re.findall(r"^\((lab-[\w-]+)\)=", lab, re.M)
    assert labels, f"{path.name}: the lab notes have no (lab-...)= labels to link to"
    assert any(f"{{ref}}`{label}`" in core or f"<{label}>" in core for label in labels), \
        f"{path.name}: the core path links to none of its lab notes"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_chapters_4_to_9_have_two_coding_exercises_with_checks(path):
    """Hands-on work in every chapter: at least two exercises whose solution is code that a check of
    ``bayesattn_lite.checks`` compares with the reference (the learner copy turns it into a stub)."""
    nb = nbformat.read(path, as_version=4)
    checked, in_solution, in_lab = set(), None, False
    for cell in nb.cells:
        in_lab = in_lab or (cell.cell_type == "markdown" and cell.source.startswith(LAB_NOTES))
        start = re.search(r"\{solution-start\}\s+(\S+)", cell.source)
        if start:
            in_solution = start.group(1)
        elif "{solution-end}" in cell.source:
            in_solution = None
        elif in_solution and not in_lab and cell.cell_type == "code" and re.search(r"checks\.check_\w+\(", cell.source):
            checked.add(in_solution)
    assert len(checked) >= 2, f"{path.name}: exercises with checks in the core path: {sorted(checked)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_test_scaffolding_stays_out_of_the_page(path):
    """nbval's markers are cell tags (``nbval-check-output``), not a comment every reader sees; and the
    course's revision history lives in CHANGELOG.md, not in its text."""
    nb = nbformat.read(path, as_version=4)
    for n, cell in enumerate(nb.cells):
        assert "NBVAL_" not in cell.source, f"{path.name} cell {n}: tag the cell nbval-check-output instead"
        if cell.cell_type == "markdown":
            history = re.search(r"earlier version|withdrawn|a claim of ours|the course's sources|this revision", cell.source, re.I)
            assert not history, f"{path.name} cell {n}: revision history ({history.group(0)!r}) belongs in CHANGELOG.md"


def test_what_nbval_does_not_compare_is_named_and_has_its_lab_note():
    """nbval_sanitize.cfg hides output lines from nbval's comparison: each rule must still match a line of
    a checked cell (no stale rule), in chapter 9 only, whose lab note on the chaotic run must exist."""
    from nbval.plugin import get_sanitize_patterns

    rules = get_sanitize_patterns((ROOT / "nbval_sanitize.cfg").read_text())
    assert rules, "nbval_sanitize.cfg has no rule nbval can read"
    outputs = {}
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if "nbval-check-output" in cell.metadata.get("tags", []):
                text = "".join(o.get("text", "") for o in cell.get("outputs", []))
                outputs.setdefault(path.name, []).append(text)
    for regex, _ in rules:
        hidden = [(name, line) for name, texts in outputs.items() for text in texts
                  for line in re.findall(regex, text)]
        assert hidden, f"the rule {regex!r} hides no line of any checked cell: remove it"
        assert {name for name, _ in hidden} == {"09_diagnostics.ipynb"}, hidden
    assert "(lab-09-chaos)=" in "".join(c.source for c in nbformat.read(ROOT / "book" / "09_diagnostics.ipynb",
                                                                           as_version=4).cells)


def test_the_readme_chapter_table_matches_the_chapters():
    """The README's first screen lists every chapter with its time and its learner copy in Colab; the
    times must agree with each chapter's 'Before you start' box (read + exercises, within 5 minutes)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[(.+?)\]\((\S+?)\) \| .+? \| (?:(\d+) h)? ?(\d+)?(?: min)? \| \[open\]\((\S+?)\) \|$",
                      readme, re.M)
    assert [Path(page).stem for _, page, *_ in rows] == [p.stem for p in CHAPTERS], "one row per chapter, in order"
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    for (title, page, hours, minutes, colab), path in zip(rows, CHAPTERS):
        box = nbformat.read(path, as_version=4).cells[1].source
        read, exercises = map(int, re.search(r"about (\d+) minutes to read, and (\d+) more", box).groups())
        said = 60 * int(hours or 0) + int(minutes or 0)
        assert abs(said - (read + exercises)) <= 5, f"{path.name}: the README says {said} min, the box {read + exercises}"
        assert colab.endswith(f"{repo}/blob/{CONFIG['repository']['branch']}/learner/{path.name}"), colab


def test_the_intro_states_the_courses_total_time_as_the_chapters_boxes_add_it_up():
    """The intro's 'about H hours with their exercises' and 'lab notes about L hours more' are the sums of
    the chapters' own boxes (reading and exercises; lab notes), to the nearest hour and half hour."""
    intro = (ROOT / "book" / "intro.md").read_text()
    stated = re.search(r"about (\d+) hours with their exercises, and the lab\s+notes about ([\d.]+) hours", intro)
    assert stated, "book/intro.md should state the total time: 'about H hours with their exercises, and the lab notes about L hours'"
    core = labs = 0
    for path in CHAPTERS:
        box = nbformat.read(path, as_version=4).cells[1].source
        read, exercises = map(int, re.search(r"about (\d+) minutes to read, and (\d+) more", box).groups())
        lab = re.search(r"the lab notes .*?about (\d+) minutes", box)
        core, labs = core + read + exercises, labs + (int(lab.group(1)) if lab else 0)
    assert int(stated.group(1)) == round(core / 60), f"the boxes add up to {core / 60:.1f} hours"
    assert abs(float(stated.group(2)) - labs / 60) <= 0.25, f"the lab notes add up to {labs / 60:.1f} hours"


def test_the_glossarys_first_evening_list_names_the_terms_each_core_path_introduces():
    """The glossary's "On a first evening" paragraph lists, per chapter, the glossary terms its core path
    uses for the first time in the course; a chapter edited without the list (or the list without it) fails."""
    term = re.compile(r"\{term\}`([^`<]+?)(?:\s*<([^>]+)>)?`")
    glossary = (ROOT / "book" / "glossary.md").read_text()
    paragraph = next(p for p in glossary.split("\n\n") if p.startswith("**On a first evening**"))
    listed = {m.group(1): [t.group(2) or t.group(1) for t in term.finditer(m.group(2))]
              for m in re.finditer(r"Chapter (\w+):\s(.*?)(?=Chapter \w+:|$)", paragraph, re.S)}
    seen = set(re.findall(r"^(\S.*)\n  .*Defined in \{doc\}`0[123]_", glossary, re.M))   # chapters 1-3's terms
    for path in CHAPTERS:
        core, _, _ = chapter_parts(nbformat.read(path, as_version=4))
        used = list(dict.fromkeys((t.group(2) or t.group(1)).strip() for t in term.finditer(core)))
        new = [t for t in used if t not in seen]
        seen.update(used)
        number = path.name[:3].lstrip("0").rstrip("_")
        if new or number in listed:
            assert listed.get(number) == new, f"{path.name}: its core path introduces {new}; the glossary lists {listed.get(number)}"
