"""Learner copies of the chapters: the notebooks to open in Colab or Jupyter, without the solutions.

    python -m bayesattn_lite.instructor.learner_copies            # write learner/NN_name.ipynb for every chapter
    python -m bayesattn_lite.instructor.learner_copies --check    # exit 1 if a committed copy is out of date

A chapter ``book/NN_name.ipynb`` is written for the online book (MyST). Colab and Jupyter render
neither its directives nor its roles, and they show every solution right under its exercise. The copy
``learner/NN_name.ipynb``:

- replaces each solution (the cells from ``{solution-start}`` to ``{solution-end}``) with one code cell
  for the learner, when the solution had code (the ``def`` lines of the functions it defines, each body
  ``raise NotImplementedError``, its imports and its calls of ``checks.check_*``; only statements that
  later cells need and that are not the answer are kept as they are), and one Markdown cell linking to
  the solution in the online book. A stub that a later cell calls is decorated with
  ``checks.until_written(<its check>)``: until it is written, those cells run on the reference answer and
  say so, so a learner who skips an exercise can still run the chapter to its end;
- turns MyST into plain Markdown: exercises and ``prf:`` blocks become a heading and their text,
  admonitions a blockquote, ``{cite}`` author-year text linked to the bibliography page, ``{doc}``,
  ``{ref}``, ``{numref}``, ``{prf:ref}`` and ``{term}`` links to the book's pages; ``(label)=`` lines go;
- keeps every other code cell as it is (the first one installs the package in Colab), with no outputs;
- records in its metadata which chapter it copies and the sha256 of that chapter's cell sources.

The book's address is ``html.baseurl`` of ``_config.yml`` when set, else GitHub Pages of
``repository.url``. The student versions' helper (``assignments.student_version``) clears the outputs.
"""

import argparse
import ast
import copy
import hashlib
import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .assignments import ROOT, student_version

BOOK, LEARNER = "book", "learner"
CHAPTER_GLOB = "0[0-9]*_*.ipynb"  # 04_specialisation, 04b_feedback_loop, ...
STUB_TAG = "learner-stub"          # the code cell a solution became
SOLUTION_LINK_TAG = "solution-link"  # the Markdown cell that links to the solution in the book
STUB_MESSAGE = "write {name}: see the exercise above"

# ----------------------------------------------------------------------------- the book around a chapter


@dataclass
class Book:
    """What the conversion needs to know about the book: its address, the titles of its pages, its
    labels and its bibliography."""
    base_url: str
    titles: dict = field(default_factory=dict)   # "book/intro" -> "How gradient descent shapes attention"
    labels: dict = field(default_factory=dict)   # "lem-advantage" -> (docname, text shown for a reference)
    citations: dict = field(default_factory=dict)  # "agarwal2025gradient" -> "Agarwal et al., 2025b"

    def page(self, docname, anchor=""):
        """The URL of a page of the book (``docname`` like ``book/01_attention_block``)."""
        return f"{self.base_url}{docname}.html" + (f"#{anchor}" if anchor else "")


def base_url(config_text):
    """The book's address from the text of _config.yml: ``html.baseurl`` when set, else GitHub Pages of
    ``repository.url`` (https://github.com/OWNER/REPO -> https://OWNER.github.io/REPO/)."""
    import yaml
    config = yaml.safe_load(config_text) or {}
    explicit = (config.get("html") or {}).get("baseurl")
    if explicit:  # the address the book says it is published at
        return explicit.rstrip("/") + "/"
    url = (config.get("repository") or {}).get("url", "")
    match = re.match(r"https?://github\.com/([^/]+)/([^/#?]+?)(?:\.git)?/?$", url)
    if not match:
        raise ValueError(f"_config.yml: expected html.baseurl, or repository.url = https://github.com/OWNER/REPO, "
                         f"got {url!r}")
    # no html.baseurl: the book is published by .github/workflows/book.yml to GitHub Pages
    return f"https://{match.group(1).lower()}.github.io/{match.group(2)}/"


def _first_heading(text):
    match = re.search(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)
    return match.group(1).strip() if match else None


def _markdown_sources(path):
    """The Markdown text of a page: a .md file, or the Markdown cells of a notebook, in order."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells if c["cell_type"] == "markdown"]
    return [path.read_text(encoding="utf-8")]


_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})[ \t]*(?:\{(?P<name>[^}\s]+)\}[ \t]*(?P<arg>.*?))?[ \t]*$")
_LABEL_LINE = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$")
_OPTION = re.compile(r"^[ \t]*:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
PROOF_KINDS = {"prf:" + k: k.capitalize() for k in (
    "algorithm", "axiom", "conjecture", "corollary", "criterion", "definition", "example", "lemma",
    "observation", "proof", "property", "proposition", "remark", "theorem", "assumption")}
ADMONITIONS = {"note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
               "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
               "seealso": "See also", "margin": "", "sidebar": "", "epigraph": "", "admonition": "",
               "dropdown": "", "topic": "", "card": ""}


def _directive_labels(text, docname, labels):
    """Record the targets a page defines: ``(label)=`` before a heading, ``:label:`` of a directive."""
    lines = text.splitlines()
    for n, line in enumerate(lines):
        match = _LABEL_LINE.match(line)
        if match:
            heading = next((_first_heading(rest) for rest in lines[n + 1:] if rest.strip()), None)
            labels[match.group("label")] = (docname, heading or match.group("label"))
            continue
        fence = _FENCE.match(line)
        if fence and fence.group("name"):
            name, arg = fence.group("name"), (fence.group("arg") or "").strip()
            for option in lines[n + 1:]:
                opt = _OPTION.match(option)
                if not opt:
                    break
                if opt.group("key") == "label":
                    kind = PROOF_KINDS.get(name) or name.replace("prf:", "").capitalize()
                    labels[opt.group("value").strip()] = (docname, f"{kind} ({arg})" if arg else kind)


_BIB_ENTRY = re.compile(r"@\w+\s*\{\s*(?P<key>[^,\s]+)\s*,(?P<body>.*?)\n\}", re.S)


def _bib_field(body, name):
    match = re.search(rf"\b{name}\s*=\s*(?:\{{(?P<braced>(?:[^{{}}]|\{{[^{{}}]*\}})*)\}}|\"(?P<quoted>[^\"]*)\"|"
                      rf"(?P<bare>\w+))", body, re.I)
    return None if not match else next(g for g in match.groups() if g is not None)


def _last_name(author):
    author = re.sub(r"\{\\.\}|\\.|[{}]", lambda m: {"{\\L}": "Ł", "{\\l}": "ł"}.get(m.group(0), ""), author).strip()
    return author.split(",")[0].strip() if "," in author else author.split()[-1]


def citation_labels(bib_text):
    """Author-year text of each entry of a .bib file, minimally parsed: "Agarwal et al., 2025a"
    (a, b, ... in the file's order where several entries would read the same)."""
    plain = {}
    for match in _BIB_ENTRY.finditer(bib_text):
        body = match.group("body")
        authors = [_last_name(a) for a in re.split(r"\s+and\s+", _bib_field(body, "author") or "") if a.strip()]
        who = ("Anonymous" if not authors else authors[0] if len(authors) == 1 else
               f"{authors[0]} and {authors[1]}" if len(authors) == 2 else f"{authors[0]} et al.")
        plain[match.group("key")] = f"{who}, {_bib_field(body, 'year') or 'n.d.'}"
    count = {}
    for text in plain.values():
        count[text] = count.get(text, 0) + 1
    seen, labels = {}, {}
    for key, text in plain.items():
        if count[text] > 1:
            seen[text] = seen.get(text, 0) + 1
            labels[key] = text + "abcdefghijklmnopqrstuvwxyz"[seen[text] - 1]
        else:
            labels[key] = text
    return labels


def load_book(root=None):
    """The ``Book`` of the checkout at ``root`` (default: the one the package sits in)."""
    root = Path(root or ROOT)
    book = Book(base_url((root / "_config.yml").read_text(encoding="utf-8")))
    for path in sorted((root / BOOK).rglob("*")):
        if path.suffix not in (".md", ".ipynb") or ".ipynb_checkpoints" in path.parts or \
                path.stem.endswith("_student"):
            continue
        docname = path.relative_to(root).with_suffix("").as_posix()
        texts = _markdown_sources(path)
        book.titles[docname] = next((t for t in map(_first_heading, texts) if t), path.stem)
        for text in texts:
            _directive_labels(text, docname, book.labels)
    bib = root / BOOK / "references.bib"
    if bib.exists():
        book.citations = citation_labels(bib.read_text(encoding="utf-8"))
    return book


# ----------------------------------------------------------------------------- MyST -> Markdown

_ROLE = re.compile(r"\{(?P<role>[\w:+.-]+)\}`(?P<text>[^`]*)`")
_EXPLICIT = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


def _resolve_doc(target, docname):
    """A {doc} target relative to the page ``docname`` (or absolute from the root with a leading /)."""
    base = [] if target.startswith("/") else docname.split("/")[:-1]
    parts = base + [p for p in target.strip("/").split("/")]
    out = []
    for part in parts:
        if part == "..":
            out = out[:-1]
        elif part not in ("", "."):
            out.append(part)
    return re.sub(r"\.(md|ipynb)$", "", "/".join(out))


def term_anchor(term):
    """The id Sphinx gives a glossary term (as sphinx.util.nodes._make_id does with "term-<term>"): the case
    kept, letters outside ASCII dropped (an en dash too), every other run of characters but letters,
    digits, '.' and '_' one dash: "KL in bits" -> term-KL-in-bits, "frame–precision dissociation" ->
    term-frameprecision-dissociation."""
    text = unicodedata.normalize("NFKD", "term-" + term.strip()).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"^[-0-9._]+|-+$", "", re.sub(r"[^a-zA-Z0-9._]+", "-", " ".join(text.split())))


def _role(match, book, docname):
    role, text = match.group("role"), match.group("text")
    explicit = _EXPLICIT.match(text)
    title, target = (explicit.group("title"), explicit.group("target")) if explicit else (None, text)
    if role in ("cite", "cite:p", "cite:ps", "cite:t", "cite:ts", "cite:author", "cite:year"):
        links = [f"[{book.citations.get(k.strip(), k.strip())}]({book.page(f'{BOOK}/bibliography')})"
                 for k in target.split(",") if k.strip()]
        if role.startswith("cite:t"):  # textual: Agarwal et al. (2025)
            return ", ".join(re.sub(r"^\[(.*), (\w+)\]", r"[\1 (\2)]", link) for link in links)
        return "(" + "; ".join(links) + ")"
    if role == "doc":
        doc = _resolve_doc(target, docname)
        return f"[{title or book.titles.get(doc, doc.split('/')[-1])}]({book.page(doc)})"
    if role in ("ref", "numref", "prf:ref", "eq", "any"):
        target = target.strip()
        if target in book.labels:
            doc, shown = book.labels[target]
            return f"[{title or shown}]({book.page(doc, target)})"
        return title or target
    if role == "term":
        anchor = term_anchor(target)
        return f"[{title or target}]({book.page(f'{BOOK}/glossary', anchor)})"
    if role == "math":
        return f"${text}$"
    return title or text  # any other role: its text


# a Markdown link to another page of the book by its file: [chapter 2](02_score_gradient.ipynb#anchor)
_PAGE_LINK = re.compile(r"\]\((?P<target>(?![a-z]+:|#|/)[^)\s#]+\.(?:ipynb|md))(?:#(?P<anchor>[^)\s]*))?\)")


def convert_roles(text, book, docname):
    """The inline roles of ``text`` (no code blocks in it) as plain Markdown, and its links to other pages
    of the book by file name as links to the online book (a copy opened in Colab has no such files)."""
    text = _ROLE.sub(lambda m: _role(m, book, docname), text)
    return _PAGE_LINK.sub(lambda m: f"]({book.page(_resolve_doc(m.group('target'), docname), m.group('anchor') or '')})",
                          text)


def _split_options(body_lines):
    """The body of a directive without its option lines (``:key: value`` or a ``---`` YAML block)."""
    lines = list(body_lines)
    if lines and lines[0].strip() == "---":
        end = next((n for n in range(1, len(lines)) if lines[n].strip() == "---"), None)
        if end is not None:
            return lines[end + 1:]
    while lines and _OPTION.match(lines[0]):
        lines.pop(0)
    return lines



def _closing(lines, start, fence):
    """The index of the line that closes the fence opened at ``start``; len(lines) when none does."""
    char = fence[0]
    closer = re.compile(rf"^[ \t]*{re.escape(char)}{{{len(fence)},}}[ \t]*$")
    for n in range(start + 1, len(lines)):
        if closer.match(lines[n]):
            return n
    return len(lines)


def _quote(text):
    return "\n".join(("> " + line) if line.strip() else ">" for line in text.splitlines())


def _render_directive(name, arg, body, book, docname):
    """One MyST directive as plain Markdown (``body`` already has its options removed and is converted)."""
    arg = convert_roles(arg, book, docname)
    if name in ("exercise", "solution") or name in PROOF_KINDS:
        if name == "solution":
            label = arg.strip()
            return _solution_link(book, docname, label if label in book.labels else "")
        if name == "prf:proof":
            return f"**Proof.** {body.lstrip()}" if body.strip() else "**Proof.**"
        kind = "Exercise" if name == "exercise" else PROOF_KINDS[name]
        return f"#### {kind}: {arg.strip()}\n\n{body}".rstrip() if arg.strip() else f"#### {kind}\n\n{body}".rstrip()
    if name in ("math",):
        return f"$$\n{body.strip()}\n$$"
    if name in ("code", "code-block", "code-cell", "sourcecode"):
        return f"```{arg.strip()}\n{body}\n```"
    if name in ("figure", "image"):
        src = arg.strip()
        if not re.match(r"^[a-z]+://", src):
            src = f"{book.base_url}{_resolve_doc(src, docname)}" if src else src
        caption = body.strip()
        image = f"![{caption.splitlines()[0] if caption else ''}]({src})"
        return f"{image}\n\n*{caption}*" if caption and name == "figure" else image
    if name == "raw":
        return body
    if name in ("bibliography", "tableofcontents", "toctree", "glue:figure", "glue"):
        return ""
    title = arg.strip() or ADMONITIONS.get(name) or name.replace("-", " ").capitalize()
    return _quote(f"**{title}**\n\n{body.strip()}" if body.strip() else f"**{title}**")


def myst_to_markdown(text, book, docname):
    """The Markdown ``text`` of a page of the book with its MyST constructs in plain Markdown."""
    lines = text.splitlines()
    out, plain, n = [], [], 0

    def flush():
        if plain:
            out.append(convert_roles("\n".join(plain), book, docname))
            plain.clear()

    while n < len(lines):
        line = lines[n]
        fence = _FENCE.match(line)
        if _LABEL_LINE.match(line) or re.match(r"^%", line):  # a target, a MyST comment
            n += 1
            continue
        if not fence or (fence.group("fence")[0] == ":" and not fence.group("name")):
            plain.append(line)
            n += 1
            continue
        end = _closing(lines, n, fence.group("fence"))
        flush()
        if not fence.group("name"):  # a code block: verbatim
            out.append("\n".join(lines[n:end + 1]))
        else:
            name, arg = fence.group("name"), fence.group("arg") or ""
            raw = lines[n + 1:end]
            body = myst_to_markdown("\n".join(_split_options(raw)), book, docname) if name != "raw" else \
                "\n".join(_split_options(raw))
            out.append(_render_directive(name, arg, body, book, docname))
        n = end + 1
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


# ----------------------------------------------------------------------------- solutions -> stubs

_SOLUTION_START = re.compile(r"^[ \t]*(`{3,}|:{3,})[ \t]*\{solution-start\}[ \t]*(?P<label>\S*)[^\n]*$", re.M)
_SOLUTION_END = re.compile(r"^[ \t]*(`{3,}|:{3,})[ \t]*\{solution-end\}[^\n]*$", re.M)


def _parseable(source):
    """``source`` with IPython's magics and shell lines blanked (same line numbers), for ``ast``."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _is_check_call(node):
    """A statement that calls a function of ``bayesattn_lite.checks`` (``checks.check_x(f)``,
    ``display(checks.check_x(f))``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name.startswith("check_") or (isinstance(func, ast.Attribute) and
                                             isinstance(func.value, ast.Name) and func.value.id == "checks"):
                return True
    return False


def _checked_by(node):
    """{function name: the check call's module} for each ``module.check_x(name)`` in ``node``:
    ``checks.check_qkv_gradients(qkv_gradients)`` -> {"qkv_gradients": ("checks", "check_qkv_gradients")}."""
    found = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and \
                isinstance(sub.func.value, ast.Name) and sub.func.attr.startswith("check_"):
            for arg in sub.args[:1]:
                if isinstance(arg, ast.Name):
                    found[arg.id] = (sub.func.value.id, sub.func.attr)
    return found


def _stub_def(node):
    """A function (or a class's methods) with every body replaced by ``raise NotImplementedError``."""
    node = copy.deepcopy(node)
    if isinstance(node, ast.ClassDef):
        node.body = [_stub_def(n) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] \
            or [ast.Pass()]
        return node
    message = STUB_MESSAGE.format(name=node.name)
    node.body = [ast.Raise(exc=ast.Call(func=ast.Name("NotImplementedError", ast.Load()),
                                        args=[ast.Constant(message)], keywords=[]))]
    return node


def _stored(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _reads_before_writes(source):
    """The names a cell reads that it has not assigned itself before (an estimate: a comprehension's
    or a function's own variables are left out)."""
    try:
        tree = ast.parse(_parseable(source))
    except SyntaxError:
        return set()
    local = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        if isinstance(node, ast.comprehension):
            local |= _stored(node.target)
    reads, written = set(), set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            reads |= {n for n in _loaded(stmt) if n not in written} - _stored(stmt)
            written.add(stmt.name)
            continue
        bound = _stored(stmt) if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.Try)) \
            else set()  # a compound statement's own loop variables and the names its body assigns first
        reads |= {n for n in _loaded(stmt) if n not in written and n not in bound}
        written |= _stored(stmt) | {(a.asname or a.name).split(".")[0] for a in getattr(stmt, "names", [])
                                    if isinstance(stmt, (ast.Import, ast.ImportFrom))}
    return reads - local


@dataclass
class Stub:
    source: str           # the learner's code cell ("" when the solution had no code)
    kept: list            # the solution's statements kept because a later cell needs them
    notes: list           # later cells that need something the stub cannot give them


def solution_stub(code_sources, needed=(), answers=()):
    """The learner's code cell for a solution whose code cells are ``code_sources``: its imports, its
    functions as stubs, its ``checks`` calls, and the top-level statements that compute the names in
    ``needed`` (names later cells use) with what they depend on, unless one of them is in ``answers``
    (names the exercise asks for) or calls a function the solution defines. No other line of it."""
    statements = []
    for source in code_sources:
        try:
            tree = ast.parse(_parseable(source))
        except SyntaxError:
            continue
        statements += [(stmt, source) for stmt in tree.body]
    defined = {s.name for s, _ in statements if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    # the backward slice of the needed names through the solution's top-level statements
    keep, want, notes = set(), set(needed) - defined, []
    for index in range(len(statements) - 1, -1, -1):
        stmt, _ = statements[index]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        # not a statement that computes the answer, or calls the learner's own function: that would hand
        # over the answer (or fail with the stub)
        blocked = (_stored(stmt) & set(answers)) or (_loaded(stmt) & defined)
        if _stored(stmt) & want and not _is_check_call(stmt) and not blocked:
            keep.add(index)
            want |= _loaded(stmt)
    lost = sorted(set(needed) - defined - {n for i in keep for n in _stored(statements[i][0])})
    if lost:
        notes.append(f"a later cell uses {', '.join(lost)}, which only the solution computes (the answer: "
                     "not kept)")
    # the functions to write: those the exercise names, a check is called with, or a later cell calls;
    # the solution's own helpers are left for the learner to invent
    checked = {n for s, _ in statements if _is_check_call(s) for n in _loaded(s)}
    wanted = defined & (set(answers) | checked | set(needed))
    checked_by = {name: check for s, _ in statements if _is_check_call(s) for name, check in _checked_by(s).items()}
    for name in sorted(wanted & set(needed) - set(checked_by)):
        notes.append(f"a later cell calls {name}, which no check names: it stops there until the learner writes it")
    parts, kept = [], []  # (is a block of its own, text)
    only_imports = True   # nothing shown yet that the learner would fill in or run
    for index, (stmt, source) in enumerate(statements):
        is_import = isinstance(stmt, (ast.Import, ast.ImportFrom))
        if is_import or index in keep or _is_check_call(stmt):
            only_imports = only_imports and is_import
            text = ast.get_source_segment(_parseable(source), stmt, padded=True).strip("\n")
            if index in keep and not kept:
                parts.append((False, f"# kept from the solution: a later cell uses "
                                     f"{', '.join(sorted(set(needed) - defined - set(lost)))}"))
            parts.append((False, text))
            if index in keep:
                kept.append(text)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name in wanted:
            stub = ast.unparse(_stub_def(stmt))
            if stmt.name in needed and stmt.name in checked_by:  # a later cell calls it: let it run meanwhile
                module, check = checked_by[stmt.name]
                stub = (f"# Until you write {stmt.name} and it passes its check, the cells below that call it use the "
                        f"course's reference answer (they say so).\n@{module}.until_written({module}.{check})\n{stub}")
            parts.append((True, stub))
            only_imports = False
    if code_sources and only_imports:
        # nothing in the cell for the learner to fill in but imports: say what the cell is for
        parts.insert(0, (False, "# Your code for the exercise above."))
    text = ""
    for n, (block, part) in enumerate(parts):
        text += ("" if n == 0 else "\n\n" if block or parts[n - 1][0] else "\n") + part
    return Stub(text, kept, notes)


def _after_marker(text, marker):
    """The text after the directive ``marker`` matches in ``text``: past its options and its closing fence."""
    match = marker.search(text)
    lines = text[match.end():].split("\n")[1:]
    while lines and (_OPTION.match(lines[0]) or not lines[0].strip()):
        lines.pop(0)
    fence = match.group(1)
    if lines and re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[0]):
        lines.pop(0)
    return "\n".join(lines)


def _solution_link(book, docname, anchor):
    return f"**Solution:** [open it in the book]({book.page(docname, anchor)})"


def _exercise_answers(markdown):
    """The names an exercise asks the learner to write: `name(...)` and `name =` in its inline code."""
    names = set()
    for code in re.findall(r"`([^`]+)`", markdown):
        match = re.match(r"^\s*([A-Za-z_]\w*)\s*(\(|=(?!=)|$)", code)
        if match:
            names.add(match.group(1))
    return names


# ----------------------------------------------------------------------------- a chapter -> its copy


def source_sha256(nb):
    """sha256 of a notebook's cell types and sources (not its outputs: re-executing changes nothing)."""
    text = json.dumps([[c.cell_type, c.source] for c in nb.cells], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Copy:
    notebook: object
    kept: dict = field(default_factory=dict)    # solution label -> the statements kept in its stub
    notes: list = field(default_factory=list)   # what later cells need that no stub gives them


def _solutions(cells):
    """(start, end, label) of each solution: the indices of its solution-start and solution-end cells."""
    found, start, label = [], None, ""
    for n, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        if start is None:
            match = _SOLUTION_START.search(cell.source)
            if match:
                start, label = n, match.group("label")
                option = re.search(r"^[ \t]*:label:[ \t]*(\S+)", cell.source[match.end():], re.M)
                label = option.group(1) if option and not label else label
                if _SOLUTION_END.search(cell.source, match.end()):
                    found.append((start, n, label))
                    start = None
        elif _SOLUTION_END.search(cell.source):
            found.append((start, n, label))
            start = None
    if start is not None:
        raise ValueError(f"cell {start}: a {{solution-start}} without its {{solution-end}}")
    return found


def learner_copy(nb, chapter, book):
    """The learner copy (a ``Copy``) of the chapter notebook ``nb``, whose path below the root is
    ``chapter`` ("book/01_attention_block.ipynb")."""
    import nbformat
    docname = str(Path(chapter).with_suffix("").as_posix())
    base = student_version(nb, None)  # outputs, execution counts and ids cleared
    cells = base.cells
    solutions = _solutions(cells)
    inside = {n for s, e, _ in solutions for n in range(s, e + 1)}
    result = Copy(None)
    out = []
    starts = {s: (e, label) for s, e, label in solutions}
    own_labels = {}  # the chapter's own targets: an exercise's label is its solution's anchor
    for cell in cells:
        if cell.cell_type == "markdown":
            _directive_labels(cell.source, docname, own_labels)
    n = 0
    while n < len(cells):
        cell = cells[n]
        if n in starts:
            end, label = starts[n]
            before = cells[n].source[:_SOLUTION_START.search(cells[n].source).start()]
            if before.strip():
                out.append(nbformat.v4.new_markdown_cell(myst_to_markdown(before, book, docname)))
            code = [c.source for c in cells[n + 1:end] if c.cell_type == "code"]
            later = [c.source for m, c in enumerate(cells) if m > end and m not in inside and c.cell_type == "code"]
            needed = _needed_later(code, later)
            exercise = next((c.source for c in reversed(cells[:n]) if c.cell_type == "markdown" and
                             re.search(r"\{exercise\}", c.source)), "")
            stub = solution_stub(code, needed, _exercise_answers(exercise))
            if stub.source:
                out.append(nbformat.v4.new_code_cell(stub.source, metadata={"tags": [STUB_TAG]}))
            if stub.kept:
                result.kept[label or f"cell {n}"] = stub.kept
            result.notes += [f"{chapter} (solution of {label or f'cell {n}'}): {note}" for note in stub.notes]
            anchor = label if label in book.labels or label in own_labels else ""
            out.append(nbformat.v4.new_markdown_cell(_solution_link(book, docname, anchor),
                                                     metadata={"tags": [SOLUTION_LINK_TAG]}))
            after = _after_marker(cells[end].source, _SOLUTION_END)
            if after.strip():
                out.append(nbformat.v4.new_markdown_cell(myst_to_markdown(after, book, docname)))
            n = end + 1
            continue
        if cell.cell_type == "markdown":
            cell.source = myst_to_markdown(cell.source, book, docname)
        out.append(cell)
        n += 1
    if out and out[0].cell_type == "markdown":
        out.insert(1, nbformat.v4.new_markdown_cell(_banner(book, docname, chapter)))
    base.cells = out
    base.metadata = {
        "kernelspec": nb.metadata.get("kernelspec", {"display_name": "Python 3", "language": "python",
                                                      "name": "python3"}),
        "language_info": {"name": "python"},
        "bayesattn_lite": {"learner_copy_of": chapter, "source_sha256": source_sha256(nb)},
    }
    result.notebook = base
    return result


def _banner(book, docname, chapter):
    return (f"> **Learner copy.** This notebook is the chapter [{book.titles.get(docname, docname)}]"
            f"({book.page(docname)}) of the online book without its solutions: under each exercise a code cell "
            "waits for your answer, and a link opens the book's solution. Run the cells from the top; the "
            f"first code cell installs the course's package where it is missing. (Made from `{chapter}` by "
            "`python -m bayesattn_lite.instructor.learner_copies`.)")


def _needed_later(solution_code, later_code):
    """The names the solution's code defines that a later cell (outside any solution) reads before it
    assigns them: stopping at the first later cell that assigns one itself."""
    defined = set()
    for source in solution_code:
        try:
            tree = ast.parse(_parseable(source))
        except SyntaxError:
            continue
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(stmt.name)
            elif not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                defined |= _stored(stmt)
    needed, live = set(), set(defined)
    for source in later_code:
        needed |= _reads_before_writes(source) & live
        try:
            live -= {n for s in ast.parse(_parseable(source)).body for n in _stored(s)}
        except SyntaxError:
            pass
    return needed


def chapters(root=None):
    """The chapters' paths: book/0N_*.ipynb."""
    return sorted((Path(root or ROOT) / BOOK).glob(CHAPTER_GLOB))


def render(path, book, root=None):
    """The learner copy of the chapter at ``path`` as the text the generator writes, and its ``Copy``."""
    import nbformat
    root = Path(root or ROOT)
    nb = nbformat.read(path, as_version=4)
    result = learner_copy(nb, path.relative_to(root).as_posix(), book)
    for n, cell in enumerate(result.notebook.cells):  # stable ids: regenerating gives the same bytes
        cell["id"] = f"learner-{path.stem[:2]}-{n}"
    return nbformat.writes(result.notebook) + "\n", result


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.instructor.learner_copies",
                                     description="Write learner/NN_name.ipynb, the chapters without their "
                                                 "solutions and in plain Markdown, for Colab and Jupyter.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a copy is out of date")
    parser.add_argument("--root", type=Path, help="the course's checkout (default: the one the package sits "
                        "in, else the current directory)")
    args = parser.parse_args(argv)
    root = args.root or (ROOT if (ROOT / BOOK).is_dir() else Path.cwd())
    if not chapters(root):
        parser.error(f"--root: expected a checkout with book/{CHAPTER_GLOB}, got {root}")
    book = load_book(root)
    folder = root / LEARNER
    stale = []
    for path in chapters(root):
        text, result = render(path, book, root)
        target = folder / path.name
        for label, statements in result.kept.items():
            print(f"  {path.name} ({label}): kept from the solution, later cells need it: "
                  + "; ".join(s.splitlines()[0] for s in statements))
        for note in result.notes:
            print(f"  note: {note}")
        if target.exists() and target.read_text(encoding="utf-8") == text:
            print(f"{target.relative_to(root)}: up to date")
            continue
        if args.check:
            stale.append(target.relative_to(root).as_posix())
            print(f"{target.relative_to(root)}: OUT OF DATE (run python -m bayesattn_lite.instructor.learner_copies)")
            continue
        folder.mkdir(exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"{target.relative_to(root)}: written")
    if stale:
        print(f"out of date: {', '.join(stale)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
