"""The learner copies (learner/NN_name.ipynb, python -m bayesattn_lite.instructor.learner_copies): up to date,
plain Markdown, no solution code, every exercise with its solution link; the converter on a small notebook;
and (slower) chapters 1-2 executed, where only the stubs may raise."""

import ast
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

from bayesattn_lite.instructor import learner_copies as lc

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = lc.chapters(ROOT)
BOOK = lc.load_book(ROOT)
MYST = re.compile(r"^[ \t]*(`{3,}|:{3,})[ \t]*\{|\{(cite[:\w]*|doc|term|ref|numref|prf:ref)\}`|^\([^()\s]+\)=[ \t]*$", re.M)


def copy_of(chapter):
    return ROOT / lc.LEARNER / chapter.name


@pytest.fixture(scope="module")
def rendered():
    return {chapter.name: lc.render(chapter, BOOK, ROOT) for chapter in CHAPTERS}


def test_there_are_chapters():
    assert len(CHAPTERS) >= 9


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_an_up_to_date_copy(chapter, rendered):
    assert copy_of(chapter).exists(), f"{copy_of(chapter)} missing: run python -m bayesattn_lite.instructor.learner_copies"
    assert copy_of(chapter).read_text(encoding="utf-8") == rendered[chapter.name][0], \
        f"{copy_of(chapter)} is out of date: run python -m bayesattn_lite.instructor.learner_copies"
    meta = nbformat.read(copy_of(chapter), as_version=4).metadata["bayesattn_lite"]
    assert meta == {"learner_copy_of": f"book/{chapter.name}",
                    "source_sha256": lc.source_sha256(nbformat.read(chapter, as_version=4))}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_myst_and_no_outputs(chapter, rendered):
    nb = nbformat.reads(rendered[chapter.name][0], as_version=4)
    for n, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            found = MYST.search(cell.source)
            assert not found, f"{chapter.name} copy, cell {n}: raw MyST {found.group(0)!r}"
        else:
            assert cell.outputs == [] and cell.execution_count is None


def _exempt_lines(source):
    """The line numbers of a solution cell that a stub may show: imports, def signatures, check calls."""
    tree = ast.parse(lc._parseable(source))
    exempt = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or lc._is_check_call(node):
            exempt |= set(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            exempt |= set(range(first, node.body[0].lineno))
    return exempt


def _solution_code(nb):
    cells = nb.cells
    return [[c.source for c in cells[s + 1:e] if c.cell_type == "code"] for s, e, _ in lc._solutions(cells)]


def _meaningful(line):
    line = line.strip()
    return len(line) > 3 and not line.startswith("#") and re.search(r"\w", line)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_line_of_solution_code_in_the_copy(chapter, rendered):
    text, result = rendered[chapter.name]
    nb = nbformat.read(chapter, as_version=4)
    inside = {n for s, e, _ in lc._solutions(nb.cells) for n in range(s, e + 1)}
    elsewhere = {line.strip() for n, c in enumerate(nb.cells) if c.cell_type == "code" and n not in inside
                 for line in c.source.splitlines()}
    kept = {line.strip() for statements in result.kept.values() for s in statements for line in s.splitlines()}
    copy = nbformat.reads(text, as_version=4)
    shown = {line.strip() for c in copy.cells if c.cell_type == "code" for line in c.source.splitlines()}
    for sources in _solution_code(nb):
        for source in sources:
            exempt = _exempt_lines(source)
            for number, line in enumerate(source.splitlines(), start=1):
                if number in exempt or not _meaningful(line) or line.strip() in elsewhere | kept:
                    continue
                assert line.strip() not in shown, f"{chapter.name}: the copy shows the solution's line {line!r}"


def test_the_only_kept_statements_are_needed_later(rendered):
    """A stub keeps a statement of a solution only where a later cell needs its value (it is printed by
    the generator, and named in the stub's first line)."""
    for name, (text, result) in rendered.items():
        stubs = [c.source for c in nbformat.reads(text, as_version=4).cells if lc.STUB_TAG in c.metadata.get("tags", [])]
        for statements in result.kept.values():
            assert any(s.startswith("# kept from the solution: a later cell uses") and statements[0] in s
                       for s in stubs), name


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_exercise_has_its_heading_and_solution_link(chapter, rendered):
    nb = nbformat.read(chapter, as_version=4)
    exercises = [m.group(1).strip() for c in nb.cells if c.cell_type == "markdown"
                 for m in re.finditer(r"^[ \t]*(?:`{3,}|:{3,})\{exercise\}(.*)$", c.source, re.M)]
    labels = [label for _, _, label in lc._solutions(nb.cells)]
    copy = nbformat.reads(rendered[chapter.name][0], as_version=4)
    markdown = "\n".join(c.source for c in copy.cells if c.cell_type == "markdown")
    assert exercises, f"{chapter.name}: no exercise found"
    for title in exercises:
        heading = f"#### Exercise: {lc.convert_roles(title, BOOK, 'book/' + chapter.stem)}".rstrip(": ")
        assert heading in markdown, f"{chapter.name}: no heading {heading!r}"
    page = BOOK.page(f"book/{chapter.stem}")
    for label in labels:
        assert f"**Solution:** [open it in the book]({page}#{label})" in markdown, f"{chapter.name}: {label}"
    assert markdown.count("**Solution:** [open it in the book]") == len(labels)


def test_base_url():
    assert lc.base_url("repository:\n  url: https://github.com/Owner/my-book\n") == "https://owner.github.io/my-book/"
    assert lc.base_url("html:\n  baseurl: https://example.org/course\n") == "https://example.org/course/"
    with pytest.raises(ValueError, match="repository.url"):
        lc.base_url("title: x\n")


def test_citation_labels():
    bib = ("@misc{a1,\n  author = {Agarwal, Naman and Dalal, S. and Misra, V.},\n  year = {2025}\n}\n"
           "@misc{a2,\n  author = {Agarwal, Naman and Dalal, S. and Misra, V.},\n  year = {2025}\n}\n"
           "@book{b,\n  author = {Christopher M. Bishop},\n  year = 2006\n}\n"
           "@article{c,\n  author = {Kaiser, {\\L}ukasz and Gomez, Aidan},\n  year = {2017}\n}\n")
    assert lc.citation_labels(bib) == {"a1": "Agarwal et al., 2025a", "a2": "Agarwal et al., 2025b",
                                       "b": "Bishop, 2006", "c": "Kaiser and Gomez, 2017"}


def test_the_converter_on_a_small_notebook():
    book = lc.Book("https://example.org/course/", titles={"book/02_next": "2. The next chapter"},
                   labels={"lem-x": ("book/01_small", "Lemma (A fact)")},
                   citations={"vaswani2017attention": "Vaswani et al., 2017", "bishop2006prml": "Bishop, 2006"})
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [
        md("# 1. Small"),
        md("(sec-head)=\n## Head\n\nAs {cite}`vaswani2017attention,bishop2006prml` show, see {doc}`02_next` "
           "and {doc}`that page <02_next>`, {prf:ref}`lem-x` and the {term}`advantage law`; $a_i$ stays."),
        md(":::{admonition} Before you start\n:class: tip\nRead **this**.\n:::"),
        md("````{exercise} Write f (★)\n:label: ex-f\n\nWrite `f(x)`.\n\n```python\nf(1)\n```\n````"),
        code("import math\nanswer = 41"),
        md("```{solution-start} ex-f\n:class: dropdown\n```"),
        md("Add one."),
        code("import torch\ndef f(x):\n    y = x + 1\n    return y\n\nhelper = f(0) * 2\nchecks.check_f(f)"),
        md("```{solution-end}\n```"),
        code("print(f(2))"),
    ]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [nbformat.v4.new_output("stream", text="x")], 3
    result = lc.learner_copy(nb, "book/01_small.ipynb", book)
    cells = [(c.cell_type, c.source) for c in result.notebook.cells]
    page = "https://example.org/course/book/01_small.html"
    assert cells[0] == ("markdown", "# 1. Small")
    assert cells[1][0] == "markdown" and cells[1][1].startswith("> **Learner copy.**")
    assert cells[2:] == [
        ("markdown", "## Head\n\nAs ([Vaswani et al., 2017](https://example.org/course/book/bibliography.html); "
                     "[Bishop, 2006](https://example.org/course/book/bibliography.html)) show, see "
                     "[2. The next chapter](https://example.org/course/book/02_next.html) and "
                     "[that page](https://example.org/course/book/02_next.html), "
                     f"[Lemma (A fact)]({page}#lem-x) and the "
                     "[advantage law](https://example.org/course/book/glossary.html#term-advantage-law); $a_i$ stays."),
        ("markdown", "> **Before you start**\n>\n> Read **this**."),
        ("markdown", "#### Exercise: Write f (★)\n\nWrite `f(x)`.\n\n```python\nf(1)\n```"),
        ("code", "import math\nanswer = 41"),
        ("code", "import torch\n\n# Until you write f and it passes its check, the cells below that call it use the "
                 "course's reference answer (they say so).\n@checks.until_written(checks.check_f)\n"
                 "def f(x):\n    raise NotImplementedError('write f: see the exercise above')\n\n"
                 "checks.check_f(f)"),  # the last cell calls f
        ("markdown", f"**Solution:** [open it in the book]({page}#ex-f)"),
        ("code", "print(f(2))"),
    ]
    assert all(c.outputs == [] and c.execution_count is None for c in result.notebook.cells if c.cell_type == "code")
    assert result.notebook.metadata["bayesattn_lite"] == {"learner_copy_of": "book/01_small.ipynb",
                                                          "source_sha256": lc.source_sha256(nb)}
    # a later cell that needs a value of the solution gets the statements computing it, unless it is the answer
    nb.cells[-1] = code("print(helper)")
    stub = next(c.source for c in lc.learner_copy(nb, "book/01_small.ipynb", book).notebook.cells
                if lc.STUB_TAG in c.metadata.get("tags", []))
    assert "# kept from the solution: a later cell uses helper" not in stub  # it calls the learner's f
    assert "helper = f(0) * 2" not in stub


def test_the_stub_keeps_what_later_cells_need_unless_it_is_the_answer():
    source = "base = torch.ones(3)\nscale = base.sum()\nanswer = base * 2\nprint(answer)"
    stub = lc.solution_stub([source], needed={"scale"}, answers=set())
    assert stub.source == "# kept from the solution: a later cell uses scale\nbase = torch.ones(3)\nscale = base.sum()"
    stub = lc.solution_stub([source], needed={"answer"}, answers={"answer"})
    assert stub.source == "# Your code for the exercise above." and stub.kept == []
    assert "answer" in stub.notes[0]


def test_term_links_use_the_ids_sphinx_gives_the_glossary_terms():
    nodes = pytest.importorskip("sphinx.util.nodes")
    terms = re.findall(r"^([^\s`:].*)\n  ", (ROOT / "book" / "glossary.md").read_text(encoding="utf-8"), re.M)
    assert len(terms) > 50 and "KL in bits" in terms and "frame–precision dissociation" in terms
    for term in terms:
        assert lc.term_anchor(term) == nodes._make_id("term-" + term), term


def test_links_to_other_pages_by_file_name_go_to_the_online_book():
    book = lc.Book(base_url="https://example.org/course/")
    text = lc.convert_roles("See [chapter 2](02_score_gradient.ipynb#the-lemma), [the map](course_map.md) and "
                            "[Colab](https://colab.research.google.com/x.ipynb).", book, "book/07_bayesian_manifolds")
    assert text == ("See [chapter 2](https://example.org/course/book/02_score_gradient.html#the-lemma), "
                    "[the map](https://example.org/course/book/course_map.html) and "
                    "[Colab](https://colab.research.google.com/x.ipynb).")


def test_a_stub_with_nothing_to_fill_in_but_imports_says_what_the_cell_is_for():
    stub = lc.solution_stub(["import copy\n\ndef helper(layer):\n    return copy.deepcopy(layer)\n\nprint(helper(1))"])
    assert stub.source == "# Your code for the exercise above.\nimport copy"


def test_check_exits_1_and_names_a_stale_copy(tmp_path, capsys):
    for name in ("_config.yml",):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / CHAPTERS[0].name).write_bytes(CHAPTERS[0].read_bytes())
    assert lc.main(["--root", str(tmp_path), "--check"]) == 1
    assert f"learner/{CHAPTERS[0].name}" in capsys.readouterr().out
    assert lc.main(["--root", str(tmp_path)]) == 0
    assert lc.main(["--root", str(tmp_path), "--check"]) == 0


# ----------------------------------------------------------------------------- executing the copies (slower)

def test_a_stub_that_a_later_cell_calls_answers_with_the_reference_until_written():
    solution = "def f(x):\n    return 2 * x\n\nchecks.check_error_signal(f)"
    stub = lc.solution_stub([solution], needed={"f"}, answers={"f"})
    assert "@checks.until_written(checks.check_error_signal)\ndef f(x):" in stub.source
    assert "return 2 * x" not in stub.source and not stub.notes
    stub = lc.solution_stub([solution], needed=set(), answers={"f"})  # nobody calls it later: a plain stub
    assert "until_written" not in stub.source
    unchecked = lc.solution_stub(["def g(x):\n    return x"], needed={"g"}, answers={"g"})
    assert "until_written" not in unchecked.source and "g" in unchecked.notes[0]


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c.name[:2] in ("01", "02", "03")], ids=lambda p: p.stem)
def test_a_copy_runs_to_its_end_with_every_exercise_unanswered(chapter):
    """Executed top to bottom with every stub as it is, a copy raises nowhere: checks give verdicts, and
    a later cell that calls an unwritten exercise runs on the reference and says so."""
    pytest.importorskip("nbclient")
    sys.path.insert(0, str(ROOT / "scripts"))
    from steady_client import SteadyNotebookClient   # polls the kernel's replies (nbclient#312)
    nb = nbformat.read(copy_of(chapter), as_version=4)
    env = {"MPLBACKEND": "Agg", "BAYESATTN_PROGRESS": "0", "PYTHONPATH": str(ROOT)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        SteadyNotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True,
                             resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    bad = [f"cell {n}: {out.ename}: {out.evalue}" for n, cell in enumerate(nb.cells)
           for out in cell.get("outputs", []) if out.output_type == "error"]
    assert not bad, f"{chapter.name}: cells broken by an unanswered exercise: {bad}"
    calls_a_stub = any("until_written" in c.source for c in nb.cells if c.cell_type == "code")
    said = any("is not written yet, so this cell used the course's reference" in out.get("text", "")
               for c in nb.cells for out in c.get("outputs", []))
    assert said == calls_a_stub
