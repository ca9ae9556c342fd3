"""The book's notebooks as files: listed in the table of contents, committed executed, and
installing the same release of the package from the same repository as _config.yml names.

nbval (configured in pyproject.toml) executes them; these tests check what execution cannot.
"""

import base64
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
    for nb in NOTEBOOKS:
        assert str(nb.relative_to(ROOT).with_suffix("")) in listed, f"{nb.name} is not in _toc.yml"


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
    would show its labels at half size: such cells carry the tag full-width (sphinx-book-theme)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        widths = [shown_width(out) for out in getattr(cell, "outputs", []) if "image/png" in out.get("data", {})]
        if widths and max(widths) > 1000:
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


def package_exports():
    """Every public function and class name of every bayesattn_lite module."""
    import importlib
    import inspect
    import pkgutil
    names = {}
    for info in pkgutil.iter_modules(bayesattn_lite.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"bayesattn_lite.{info.name}")
        for name, obj in vars(module).items():
            if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj)) \
                    and getattr(obj, "__module__", "").startswith("bayesattn_lite"):
                names.setdefault(name, f"{info.name}.{name}")
    return names


CHECKED = re.compile(r"checks\.check_\w+\(([^)]*)\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapters_import_helpers_instead_of_pasting_them(path):
    """A notebook that defines a function the package already has is a second copy that will drift.
    Exempt: an exercise's own implementation, which the notebook hands to a checks.check_* function
    (writing it is the exercise)."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    exercised = {name for args in CHECKED.findall(code) for name in re.findall(r"\w+", args)}
    from bayesattn_lite.instructor import assignments
    for assignment in assignments.ASSIGNMENTS.values():
        for question in assignment.questions:
            exercised.update(question.names)
    exports = package_exports()
    pasted = sorted(f"{name} (the package has {exports[name]})"
                    for name in re.findall(r"^def (\w+)", code, re.M) if name in exports and name not in exercised)
    assert not pasted, f"{path.name} defines functions the package exports; import them instead: {pasted}"


CHAPTERS = sorted((ROOT / "book").glob("0[0-9]*_*.ipynb"))  # 04b_feedback_loop too


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_chapter_opens_with_its_time_what_it_builds_on_and_where_the_paper_says_it(path):
    """As Neuromatch's tutorials do: before the first idea, the reader learns how long the chapter takes
    (reading at about 200 words a minute, about 5 minutes an exercise: the stated figures within a factor
    of two of that), which earlier chapters it needs, and which part of which paper it is about."""
    import re
    nb = nbformat.read(path, as_version=4)
    box = nb.cells[1].source
    assert box.startswith("```{admonition} Before you start"), f"{path.name}: cell 2 is not the 'Before you start' box"
    read, exercises = re.search(r"\*\*Time:\*\* about (\d+) minutes to read, and (\d+) more for its", box).groups()
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    words, count = len(re.findall(r"\w+", markdown)), len(re.findall(r"\{exercise\}", markdown))
    assert words / 400 <= int(read) <= words / 100, f"{path.name}: {read} minutes to read {words} words?"
    assert int(exercises) == 5 * count, f"{path.name}: {count} exercises, {exercises} minutes stated"
    assert "**Builds on:**" in box and "**In the paper:**" in box
    assert re.search(r"arXiv:2512\.2247[13]", box.split("**In the paper:**")[1]), f"{path.name}: cite the paper's arXiv id"
    # the exercises without their solutions, in Colab, of the release the buttons and install cell name
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    copy = f"learner/{path.name}"
    assert f"colab.research.google.com/github/{repo}/blob/{CONFIG['repository']['branch']}/{copy}" in box
    assert (ROOT / copy).exists(), f"{copy} is missing: python -m bayesattn_lite.instructor.learner_copies"
