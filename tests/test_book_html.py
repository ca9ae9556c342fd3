"""The published book shows the problem sets' student versions only (issue 34): no page built from an
instructor version, no solution, no model answer anywhere in the built HTML or the sources it offers for
download. The configuration tests run always; those over the build skip when there is none (CI builds the
book first, .ci/run: ``jupyter-book build . --all -W -n --keep-going``). ``BAYESATTN_BOOK_HTML`` names
another build's html folder (``jupyter-book build . --path-output DIR`` writes DIR/_build/html)."""

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
import yaml

from bayesattn_lite.instructor import assignments
from bayesattn_lite.instructor.assignments import ASSIGNMENTS, INSTRUCTOR_TAG, SOLUTION_TAG
from test_notebooks import toc_files  # the one walk of _toc.yml the tests share

ROOT = Path(__file__).resolve().parent.parent
HTML = Path(os.environ.get("BAYESATTN_BOOK_HTML", ROOT / "_build" / "html"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
MIN_WORDS = 7  # a snippet shorter than this could be an ordinary sentence of a chapter


def words(text):
    """Text as lowercase words and numbers, one space apart: HTML markup, highlighting spans and Markdown
    emphasis vanish, so a sentence matches however it was rendered."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts, self._skip = [], 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def page_words(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        parser = _Text()
        parser.feed(text)
        text = " ".join(parser.parts)
    return words(text)


# ----------------------------------------------------------------------------- what must not be published

def _sentences(markdown):
    """The sentences of Markdown that render as their own words (no links, roles or directives)."""
    for sentence in re.split(r"(?<=[.:;!?])\s+|\n\s*\n|\n[-*] ", markdown):
        if "](" not in sentence and "{" not in sentence and "<" not in sentence:
            yield words(sentence)


def _code_lines(code):
    for line in code.splitlines():
        if not line.strip().startswith("#"):
            yield words(line)


def _solution_parts(cell):
    """What the student version does not show of a cell: all of an instructor cell, the solution blocks
    of a solution cell."""
    tags = cell.metadata.get("tags", [])
    if INSTRUCTOR_TAG in tags:
        return [cell.source]
    if SOLUTION_TAG not in tags:
        return []
    pattern = assignments._CODE_BLOCK if cell.cell_type == "code" else assignments._MD_BLOCK
    # without the markers: their hints are the stubs' text, which the student version shows
    return [re.sub(r"<!--.*?-->", "\n\n", m.group(0), flags=re.S) for m in pattern.finditer(cell.source)]


def _public_words():
    """Every book source a student may see (chapters, pages, student versions): a snippet found there is
    not instructor-only."""
    instructor = {a.instructor_path for a in ASSIGNMENTS.values()} | {assignments.FOLDER / "RUBRICS.md",
                                                                      assignments.FOLDER / "SCAN_LIMITS.md"}
    texts = []
    for path in sorted((ROOT / "book").rglob("*")):
        if path.suffix == ".md" and path not in instructor:
            texts.append(words(path.read_text(encoding="utf-8")))
        elif path.suffix == ".ipynb" and path not in instructor and ".ipynb_checkpoints" not in path.parts:
            texts += [words(c.source) for c in nbformat.read(path, as_version=4).cells]
    return "\n".join(texts)


def secrets():
    """{assignment id: distinctive word sequences of its model answers and instructor-only cells}."""
    public = _public_words()
    found = {}
    for a in ASSIGNMENTS.values():
        snippets = set()
        for q in a.questions:  # the rubrics: model answers
            snippets |= {words(line.split(": ", 1)[1]) for line in q.rubric.splitlines()}
        for cell in nbformat.read(a.instructor_path, as_version=4).cells:
            for part in _solution_parts(cell):
                split = _code_lines if cell.cell_type == "code" else _sentences
                snippets |= set(split(part))
        found[a.id] = sorted(s for s in snippets if len(s.split()) >= MIN_WORDS and s not in public)
    return found


SECRETS = secrets()


def test_there_are_secrets_to_look_for():
    # a snippet extraction that found nothing would make the build test pass vacuously
    for aid, snippets in SECRETS.items():
        assert len(snippets) >= 10, f"{aid}: only {len(snippets)} instructor-only snippets found"
    rubric = words(ASSIGNMENTS["ps2_dynamics"].questions[1].rubric.splitlines()[0].split(": ", 1)[1])
    assert rubric in SECRETS["ps2_dynamics"]


# ----------------------------------------------------------------------------- the configuration

def test_the_toc_lists_student_versions_and_the_config_excludes_instructor_ones():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(toc_files([toc]))
    for a in ASSIGNMENTS.values():
        instructor, student = (p.relative_to(ROOT) for p in (a.instructor_path, a.student_path))
        assert instructor.with_suffix("").as_posix() not in listed, f"{instructor} must not be a page"
        assert student.with_suffix("").as_posix() in listed, f"{student} is the problem set's page"
        assert instructor.as_posix() in CONFIG["exclude_patterns"], f"exclude {instructor} in _config.yml"
    for private in ("RUBRICS", "SCAN_LIMITS"):   # model answers; the ways around the reference-call report
        assert f"book/assignments/{private}.md" in CONFIG["exclude_patterns"]
        assert f"book/assignments/{private}" not in listed


# ----------------------------------------------------------------------------- the build

def _stale(html):
    pages = [html / a.student_path.relative_to(ROOT).with_suffix(".html") for a in ASSIGNMENTS.values()]
    if not all(p.exists() for p in pages):
        return f"{html} has no page of a student version"
    sources = [ROOT / "_config.yml", ROOT / "_toc.yml", *(ROOT / "book").rglob("*")]
    if min(p.stat().st_mtime for p in pages) < max(p.stat().st_mtime for p in sources if p.is_file()):
        return f"{html} is older than its sources: rebuild it (jupyter-book build . --all)"
    return None


@pytest.fixture(scope="module")
def built():
    if not (HTML / "index.html").exists():
        pytest.skip(f"no built book at {HTML}: jupyter-book build . (CI builds it first)")
    reason = _stale(HTML)
    if reason:
        pytest.skip(reason)
    files = [p for p in HTML.rglob("*") if p.is_file() and (p.suffix == ".html" or "_sources" in p.parts)]
    return {p.relative_to(HTML).as_posix(): p for p in files}


def test_no_file_is_built_from_an_instructor_version_or_the_rubrics(built):
    for a in ASSIGNMENTS.values():
        stem = a.instructor_path.stem
        leaked = [name for name in built if re.search(rf"(^|/){stem}\.", name)]
        assert not leaked, f"the build holds the instructor version of {a.id}: {leaked}"
        assert any(name.endswith(f"{a.student_path.stem}.html") for name in built), f"no page for {a.id}"
    assert not [name for name in built if "RUBRICS" in name]


def test_no_solution_marker_or_instructor_cell_is_published(built):
    for name, path in built.items():
        text = path.read_text(encoding="utf-8", errors="replace")
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "tag_instructor"):
            assert marker not in text, f"{name} shows {marker!r}"


def test_no_model_answer_or_solution_is_published(built):
    pages = {name: page_words(path) for name, path in built.items()}
    # the method finds what is there: the student versions' own question text and stubs
    for a in ASSIGNMENTS.values():
        page = pages[a.student_path.relative_to(ROOT).with_suffix(".html").as_posix()]
        student = nbformat.read(a.student_path, as_version=4)
        shown = [s for s in _sentences(student.cells[0].source) if len(s.split()) >= MIN_WORDS]
        shown += [words(c.source.splitlines()[-1]) for c in student.cells if "raise NotImplementedError" in c.source
                  and c.source.splitlines()[-1].strip().startswith("raise")]
        assert shown and all(s in page for s in shown), f"{a.id}: the text of its student page is not found"
    for aid, snippets in SECRETS.items():
        for name, page in pages.items():
            leaked = [s for s in snippets if s in page]
            assert not leaked, f"{name} shows instructor-only text of {aid}: {leaked[:3]}"
