"""The built book as a reader sees it: every page of the table of contents opened in headless Chromium.

On every page: MathJax has typeset the math (no raw ``$$`` or ``\\(`` left in the text, no MathJax
error), every figure has loaded (``naturalWidth > 0``; a chapter shows at least as many figures as
its notebook has image outputs), no output shows an error or a traceback, the Colab launch button
opens the chapter's learner copy (else the page's own notebook) in the repository of ``_config.yml``
and every Colab link of the page opens that same notebook, no widget control is on the page
(without a kernel a slider moves nothing) and every widget of the notebook is replaced by a line saying
where it runs (``widgets.KERNEL_ONLY``), with its static figure directly above it. No page scrolls
sideways at 1440, 1280, 1024 or 390 px (only a code block or a table may scroll, inside its own box),
no entry of the right-hand contents runs past its column, and one search box shows. On every numbered chapter
(01-09): at least three exercises (sphinx-exercise admonitions), every solution collapsed (a closed
dropdown whose text and code cells show only once the reader opens it) and no install cell. The
search page finds every chapter by a word of its title. A full-page screenshot of each page goes to
``_build/screenshots/`` (beside the ``html`` folder that was tested).

The book: ``$BAYESATTN_BOOK_HTML`` (a built ``html`` folder) if set, else ``_build/html``, which
is (re)built with ``jupyter-book build . --all -W -n --keep-going`` when it is missing or older
than a source file. ``$BAYESATTN_TOC`` names another table of contents to check (a draft one,
as passed to ``jupyter-book build --toc``). The browser is Debian's Chromium
(``/usr/bin/chromium``, or ``$BAYESATTN_CHROMIUM``) driven by Playwright's Python package; no
browser is downloaded. Without them the tests skip, unless ``BAYESATTN_REQUIRE_BROWSER=1`` (set
by ``.ci/run``), which turns that into a failure.

The network may be closed: requests that leave localhost are answered from local copies where one
exists (MathJax 3, from the pinned ``django-static-mathjax`` wheel) and refused otherwise (the
widget manager's CDN; the book has no widget view to render).
"""

import functools
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote, urlparse

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from learner_launch import learner_copy  # noqa: E402 - where the book's launch buttons point

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load(Path(os.environ.get("BAYESATTN_TOC", ROOT / "_toc.yml")).read_text())  # another toc: a draft
REQUIRED = os.environ.get("BAYESATTN_REQUIRE_BROWSER") == "1"
CHROMIUM = os.environ.get("BAYESATTN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# As root on a closed network: no sandbox, and no background connections Chromium would retry.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
SOURCES = ["_config.yml", "_toc.yml", "book"]  # a build older than any of these is stale
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
KERNEL_ONLY = "Interactive panel: its sliders run in Jupyter or Colab."  # the start of widgets.KERNEL_ONLY
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
# JavaScript errors that change nothing a reader sees: the widget manager's loader (require.js, from a
# CDN) is missing offline, and widgets are not rendered offline anyway. (sphinx-thebe's configuration,
# once included twice, is included once: book/_ext/single_scripts.py.)
HARMLESS_JS_ERRORS = ("require is not defined", "define is not defined")


def toc_pages(entries):
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        yield from toc_pages(entry.get("parts", []) + entry.get("chapters", []) + entry.get("sections", []))


PAGES = [TOC["root"], *[p for p in toc_pages(TOC.get("parts", []) + TOC.get("chapters", [])) if p != TOC["root"]]]
NOTEBOOK_PAGES = [p for p in PAGES if (ROOT / f"{p}.ipynb").exists()]


def unavailable(reason):
    if REQUIRED:
        pytest.fail(f"{reason} (BAYESATTN_REQUIRE_BROWSER=1: the browser test must run here)")
    pytest.skip(reason)


# ----------------------------------------------------------------------------- the built book

def _newest_source():
    files = [ROOT / s for s in SOURCES if (ROOT / s).is_file()]
    files += [f for s in SOURCES if (ROOT / s).is_dir() for f in (ROOT / s).rglob("*")
              if f.is_file() and ".ipynb_checkpoints" not in f.parts]
    return max(f.stat().st_mtime for f in files)


def stale_reason(html):
    """Why ``html`` needs a (re)build, or None."""
    built = [html / f"{page}.html" for page in PAGES]
    missing = [str(p.relative_to(html)) for p in built if not p.exists()]
    if missing:
        return f"no page {missing[0]}"
    if min(p.stat().st_mtime for p in built) < _newest_source():
        return "a source file is newer than the build"
    return None


@pytest.fixture(scope="module")
def book():
    given = os.environ.get("BAYESATTN_BOOK_HTML")
    if given:  # used as it is
        html = Path(given).resolve()
        reason = stale_reason(html)
        assert not reason or not reason.startswith("no page"), f"BAYESATTN_BOOK_HTML={given}: {reason}"
        return html
    html = ROOT / "_build" / "html"
    reason = stale_reason(html)
    if reason:
        print(f"building the book ({reason})")
        exe = Path(sys.executable).with_name("jupyter-book")
        exe = str(exe) if exe.exists() else (shutil.which("jupyter-book") or "jupyter-book")
        # --all: every page is rewritten, so the pages' times say how fresh the build is
        build = subprocess.run([exe, "build", ".", "--all", "-W", "-n", "--keep-going"],
                               cwd=ROOT, capture_output=True, text=True)
        assert build.returncode == 0, f"jupyter-book build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    return html


@pytest.fixture(scope="module")
def server(book):
    handler = functools.partial(_QuietHandler, directory=str(book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


# ----------------------------------------------------------------------------- the browser

def mathjax_copy():
    """The local MathJax 3 folder (es5/...), or None."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    return folder if (folder / "es5" / "tex-mml-chtml.js").exists() else None


def _route(local_mathjax, origin):
    def handle(route):
        url = route.request.url
        if url.startswith(origin):
            return route.continue_()
        match = re.search(r"/mathjax@3[^/]*/(.*?)(?:\?.*)?$", url)
        if match and local_mathjax is not None:
            path = local_mathjax / match.group(1)
            if path.is_file():
                return route.fulfill(path=str(path))
        if match and local_mathjax is None:
            return route.continue_()  # no local copy: try the CDN (works on an open network)
        return route.abort()
    return handle


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        unavailable(f"Chromium is not installed ({CHROMIUM} missing): apt-get install -y chromium chromium-driver")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright's Python package is not installed: pip install -r requirements-dev.txt")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(book):
    folder = book.parent / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def open_page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    context.route("**/*", _route(mathjax_copy(), server))

    def open_(path):
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        response = page.goto(f"{server}/{path}", wait_until="load")
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        return page, errors

    yield open_
    context.close()


# ----------------------------------------------------------------------------- the checks

MATH_STATE = """() => {
  const math = [...document.querySelectorAll('.math')];
  const raw = [];
  const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest('pre, code, script, style, mjx-container, .highlight')) continue;
    const m = n.textContent.match(/\\$\\$|\\\\\\(|\\\\\\)|\\\\\\[|\\\\\\]|\\\\begin\\{/);
    if (m) raw.push(n.textContent.trim().slice(0, 80));
  }
  return {math: math.length, rendered: document.querySelectorAll('mjx-container').length,
          // mjx-merror: a TeX syntax error; a red mtext: an undefined macro (MathJax's noundefined)
          errors: [...document.querySelectorAll('mjx-merror, mjx-assistive-mml mtext[mathcolor="red"]')]
                    .map(e => e.getAttribute('data-mjx-error') || e.textContent).slice(0, 5),
          raw: raw.slice(0, 5)};
}"""

IMAGES = """() => [...document.querySelectorAll('main img')].map(img => ({
  src: img.getAttribute('src'), ok: img.complete && img.naturalWidth > 0,
  output: !!img.closest('.cell_output'), alt: img.getAttribute('alt') || ''}))"""

OUTPUT_ERRORS = """() => [...document.querySelectorAll('.cell_output')].flatMap(out => {
  const text = out.innerText;
  const bad = out.querySelector('.traceback, .output.error, .output.traceback') ||
              /Traceback \\(most recent call last\\)|^-{20,}\\s*\\n\\s*\\w+(Error|Exception)/m.test(text);
  return bad ? [text.slice(0, 300)] : [];
})"""

# Controls that would move nothing without a kernel (a widget view, a slider), and, for each panel
# the book shows as its plain-text line instead, whether a loaded image sits directly above it (in
# its own cell before it, or in the nearest cell above).
PANELS = """(line) => {
  const controls = document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"], input[type="range"], .jupyter-widgets, .widget-slider').length;
  const loaded = el => !!el && [...el.querySelectorAll('img')].some(i => i.complete && i.naturalWidth > 0);
  const panels = [...document.querySelectorAll('.cell_output')].filter(o => o.innerText.includes(line)).map(out => {
    const cell = out.closest('.cell');
    let above = cell ? cell.previousElementSibling : null;
    while (above && !above.classList.contains('cell')) above = above.previousElementSibling;
    const inCell = cell && [...cell.querySelectorAll('img')].some(
      i => i.complete && i.naturalWidth > 0 && (i.compareDocumentPosition(out) & Node.DOCUMENT_POSITION_FOLLOWING));
    return inCell || loaded(above);
  });
  return {controls, panels};
}"""


# Code cells and printed outputs wider than their box: a reader would have to scroll sideways
# (the course's _static/course.css wraps them instead).
SIDEWAYS = """() => [...document.querySelectorAll('div.cell pre')]
  .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
  .map(pre => pre.innerText.split('\\n')[0].slice(0, 60))"""

# Whether the page scrolls sideways at the window's width, and if so the elements that run past the
# window outside any box that scrolls or clips on its own (a code block, a table, a drawer), read after
# two frames so that the layout has followed a resize.
WIDTHS = (1440, 1280, 1024, 390)  # wide and laptop screens, a small laptop (right-hand contents a drawer), a phone
FITS = """() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
  const W = window.innerWidth, wide = document.documentElement.scrollWidth;
  const boxed = el => { for (let a = el.parentElement; a && a !== document.body; a = a.parentElement)
    if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(a).overflowX)) return true; return false; };
  const past = wide <= W ? [] : [...document.querySelectorAll('main *')]
    .filter(el => el.getBoundingClientRect().right > W + 1 && !boxed(el))
    .map(el => `${el.tagName.toLowerCase()}.${[...el.classList].join('.')} to ${Math.round(el.getBoundingClientRect().right)} px`);
  // the right-hand contents (a column from 1200 px on) scroll inside it: an entry past its edge is cut
  const side = document.querySelector('.bd-sidebar-secondary');
  const edge = side ? side.getBoundingClientRect().right : W;
  const cut = !side || W < 1200 ? [] : [...side.querySelectorAll('a')]
    .filter(a => a.getBoundingClientRect().right > edge + 1).map(a => a.innerText.slice(0, 40));
  // one search box: the left sidebar's (from 992 px on) or the article header's icon (below)
  const searches = [...document.querySelectorAll('.search-button-field, .search-button__button')]
    .filter(e => e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})).length;
  done({wide, W, past: past.slice(0, 3), cut: cut.slice(0, 3), searches});
})))"""

# The Colab install guard is the first code cell of every notebook; the book hides it (remove-cell).
INSTALL_CELL_VISIBLE = """() => document.body.innerText.includes('find_spec("bayesattn_lite")')"""


# Exercises (sphinx-exercise admonitions) and their solutions. A solution is collapsed: a dropdown
# (sphinx-togglebutton) whose body, text and code cells alike, is hidden until the reader opens it.
EXERCISES = """() => {
  const visible = el => el.checkVisibility ? el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})
                                           : !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  return {
    exercises: document.querySelectorAll('main div.exercise.admonition').length,
    solutions: [...document.querySelectorAll('main div.solution.admonition')].map(s => ({
      id: s.id,
      dropdown: s.classList.contains('dropdown'),
      shown: [...s.children].filter(c => !c.classList.contains('admonition-title') && visible(c))
                            .map(c => c.innerText.trim().slice(0, 60)),
      code: [...s.querySelectorAll('div.cell, pre')].filter(visible).length,
      cells: s.querySelectorAll('div.cell').length}))
  };
}"""

# Open one solution (click its title, as a reader does) and say whether its code is visible then.
OPEN_SOLUTION = """(id) => {
  const s = document.getElementById(id);
  s.querySelector('.admonition-title').click();
  return new Promise(done => setTimeout(() => done([...s.querySelectorAll('div.cell')].some(
    c => c.checkVisibility ? c.checkVisibility() : c.getClientRects().length > 0)), 300));
}"""

MIN_EXERCISES = 3  # per numbered chapter (issue 14)
NUMBERED_CHAPTERS = [p for p in NOTEBOOK_PAGES if re.search(r"(^|/)0[1-9][a-z]?_", p)]


def wait_for_mathjax(page):
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
    page.evaluate("() => MathJax.startup.promise")


def notebook_images(page_name):
    nb = nbformat.read(ROOT / f"{page_name}.ipynb", as_version=4)
    return sum(1 for cell in nb.cells if cell.cell_type == "code"
               for out in cell.get("outputs", []) if any(m in out.get("data", {}) for m in IMAGE_MIMES))


def colab_url(page_name):
    """The notebook a page's Colab button opens: a chapter's learner copy (book/_ext/learner_launch.py),
    else the page's own notebook."""
    repo = CONFIG["repository"]["url"].rstrip("/").removeprefix("https://github.com/")
    book_path = str(CONFIG["repository"].get("path_to_book") or "").strip("/")
    path = learner_copy(ROOT, page_name) or (f"{book_path}/{page_name}.ipynb" if book_path else f"{page_name}.ipynb")
    return f"{CONFIG['launch_buttons']['colab_url'].rstrip('/')}/github/{repo}/blob/{CONFIG['repository']['branch']}/{path}", path


def git_tracks(path):
    """Whether git tracks ``path``; True where there is no git or no repository to ask."""
    try:
        inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True)
        if inside.returncode:
            return True
        return subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT, capture_output=True).returncode == 0
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("page_name", PAGES)
def test_page_reads_well(open_page, shots, page_name):
    page, js_errors = open_page(f"{page_name}.html")
    problems = []

    has_math = page.evaluate("() => document.querySelectorAll('.math').length") > 0
    if has_math:
        try:
            wait_for_mathjax(page)
        except Exception as exc:  # noqa: BLE001 - reported below in words
            problems.append(f"MathJax did not start ({type(exc).__name__}); is it reachable?")
    math = page.evaluate(MATH_STATE)
    if math["math"] and not math["rendered"]:
        problems.append(f"{math['math']} math elements but nothing typeset by MathJax (no mjx-container)")
    if math["raw"]:
        problems.append(f"raw TeX left in the text: {math['raw']}")
    if math["errors"]:
        problems.append(f"MathJax errors (undefined macro?): {math['errors']}")

    images = page.evaluate(IMAGES)
    broken = [img["src"] for img in images if not img["ok"]]
    if broken:
        problems.append(f"figures that did not load: {broken}")
    if page_name in NOTEBOOK_PAGES:
        expected = notebook_images(page_name)
        shown = sum(1 for img in images if img["output"] and img["ok"])
        if shown < expected:
            problems.append(f"the notebook has {expected} figure outputs, the page shows {shown}")

    no_alt = [img["src"] for img in images if img["output"] and (not img["alt"] or img["alt"] == img["src"])]
    if no_alt:
        problems.append(f"figures without alt text (set the cell metadata mystnb.image.alt): {no_alt}")

    errors = page.evaluate(OUTPUT_ERRORS)
    if errors:
        problems.append(f"outputs showing an error or traceback: {errors}")

    if page_name in NOTEBOOK_PAGES:
        expected_url, path = colab_url(page_name)
        links = page.evaluate("() => [...document.querySelectorAll('a')].map(a => a.href)"
                              ".filter(h => h.includes('colab.research.google.com'))")
        if expected_url not in links:
            problems.append(f"no Colab launch button to {expected_url} (found {links})")
        if len(set(links)) > 1:  # one route: the rocket and the page's box open the same notebook
            problems.append(f"Colab links to different notebooks: {sorted(set(links))}")
        if not (ROOT / path).exists():
            problems.append(f"the Colab button opens {path}, which is not in the repository")
        elif REQUIRED and not git_tracks(path):
            problems.append(f"the Colab button opens {path}, which git does not track (not committed?)")

    if page_name in NOTEBOOK_PAGES:
        sideways = page.evaluate(SIDEWAYS)
        if sideways:
            problems.append(f"{len(sideways)} code cells or outputs scroll sideways at 1280 px: {sideways[:3]}")
        if page.evaluate(INSTALL_CELL_VISIBLE):
            problems.append("the install cell is visible: tag the notebook's first code cell remove-cell")

    panels = page.evaluate(PANELS, KERNEL_ONLY)
    if panels["controls"]:
        problems.append(f"{panels['controls']} widget controls on the page: without a kernel they move nothing "
                        "(_config.yml should leave the widget view out)")
    if page_name in NOTEBOOK_PAGES:
        nb = nbformat.read(ROOT / f"{page_name}.ipynb", as_version=4)
        views = sum(WIDGET_VIEW in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        if len(panels["panels"]) != views:
            problems.append(f"{views} widgets in the notebook, {len(panels['panels'])} lines saying where they run")
    if not all(panels["panels"]):
        problems.append("a widget's line has no static figure directly above it")

    real_js_errors = [e for e in js_errors if not any(known in e for known in HARMLESS_JS_ERRORS)]
    if real_js_errors:
        problems.append(f"JavaScript errors: {real_js_errors[:3]}")

    page.screenshot(path=str(shots / f"{page_name.replace('/', '__')}.png"), full_page=True)
    for width in WIDTHS:  # the same page, math typeset, at each width: nothing may push it wider than the window
        page.set_viewport_size({"width": width, "height": 900})
        fit = page.evaluate(FITS)
        if fit["wide"] > fit["W"]:
            problems.append(f"the page scrolls sideways at {width} px: it is {fit['wide']} px wide "
                            f"(running past the window: {fit['past'] or 'no single element'})")
        if fit["searches"] != 1:
            problems.append(f"{fit['searches']} search boxes at {width} px, expected one")
        if fit["cut"]:
            problems.append(f"the right-hand contents run past their column at {width} px: {fit['cut']}")
    page.close()
    assert not problems, f"{page_name}:\n  " + "\n  ".join(problems)


def evaluate_at(browser, server, page_name, viewport, script):
    """``script``'s result on ``page_name`` in a fresh browser window of ``viewport`` (a phone's)."""
    context = browser.new_context(viewport=viewport, service_workers="block")
    context.route("**/*", _route(mathjax_copy(), server))
    try:
        page = context.new_page()
        page.goto(f"{server}/{page_name}.html", wait_until="load")
        return page.evaluate(script)
    finally:
        context.close()


@pytest.mark.parametrize("page_name", [p for p in PAGES if p in NOTEBOOK_PAGES])
def test_cells_fit_a_phone_screen(browser, server, page_name):
    """At a phone's width (400 px) too, no code cell or output scrolls sideways."""
    sideways = evaluate_at(browser, server, page_name, {"width": 400, "height": 800}, SIDEWAYS)
    assert not sideways, f"{page_name}: {len(sideways)} cells scroll sideways at 400 px: {sideways[:3]}"


def title_word(page_name):
    """The longest word of a chapter's title (its first Markdown heading)."""
    nb = nbformat.read(ROOT / f"{page_name}.ipynb", as_version=4)
    heading = next(line for cell in nb.cells if cell.cell_type == "markdown"
                   for line in cell.source.splitlines() if line.startswith("# "))
    return max(re.findall(r"[A-Za-z]{4,}", heading), key=len).lower()


@pytest.mark.parametrize("page_name", NOTEBOOK_PAGES)
def test_search_finds_the_chapter(open_page, page_name):
    word = title_word(page_name)
    page, _ = open_page(f"search.html?q={quote(word)}")
    # wait for the search to finish, not for its first hit: Sphinx lists the results one by one and
    # only then writes its summary line (the line is there, empty, from the start)
    page.wait_for_function(
        "() => { const s = document.querySelector('#search-results .search-summary'); return s && "
        "/Search finished|did not match/i.test(s.textContent); }", timeout=30_000)
    hrefs = page.evaluate("() => [...document.querySelectorAll('#search-results a')].map(a => a.getAttribute('href'))")
    page.close()
    assert any(urlparse(h).path.rstrip("/").endswith(f"{page_name}.html") or page_name in h for h in hrefs), \
        f"searching {word!r} does not list {page_name}.html; results: {hrefs[:10]}"


@pytest.mark.parametrize("page_name", NUMBERED_CHAPTERS)
def test_chapter_has_exercises_with_collapsed_solutions(open_page, page_name):
    """At least MIN_EXERCISES exercises; every solution a closed dropdown whose text and code only
    show once it is opened (and do show then); no install cell on the page."""
    page, _ = open_page(f"{page_name}.html")
    found = page.evaluate(EXERCISES)
    problems = []
    if found["exercises"] < MIN_EXERCISES:
        problems.append(f"{found['exercises']} exercises (sphinx-exercise admonitions), expected at least {MIN_EXERCISES}")
    for solution in found["solutions"]:
        if not solution["dropdown"]:
            problems.append(f"solution {solution['id']} is not collapsed: give it `:class: dropdown`")
        elif solution["shown"] or solution["code"]:
            problems.append(f"solution {solution['id']} shows its content before it is opened: "
                            f"{solution['shown'][:2]} ({solution['code']} code blocks visible)")
    with_code = [s for s in found["solutions"] if s["cells"] and s["dropdown"]]
    if with_code and not page.evaluate(OPEN_SOLUTION, with_code[0]["id"]):
        problems.append(f"solution {with_code[0]['id']}: its code cells stay hidden after opening it")
    if page.evaluate(INSTALL_CELL_VISIBLE):
        problems.append("the install cell is visible: tag the notebook's first code cell remove-cell")
    page.close()
    assert not problems, f"{page_name}:\n  " + "\n  ".join(problems)


WIDE_TABLES = """() => [...document.querySelectorAll('.bd-article table')]
  .filter(t => t.querySelectorAll('thead th').length >= 5)
  .map(t => ({cells: getComputedStyle(t.querySelector('td')).display, width: t.getBoundingClientRect().width,
              height: t.getBoundingClientRect().height}))"""


def test_the_scorecards_tables_read_as_cards_on_a_phone(browser, server):
    """At 390 px a table of five columns (the scorecard's) shows each row as a card, its cells one under
    the other at the screen's width, instead of five columns a few words wide (22,000 px tall before)."""
    tables = evaluate_at(browser, server, "book/scorecard", {"width": 390, "height": 844}, WIDE_TABLES)
    assert len(tables) >= 2, tables
    for t in tables:
        assert t["cells"] == "block" and t["width"] <= 390, t
    assert max(t["height"] for t in tables) < 16000, tables


PHONE_FIGURES = """() => [...document.querySelectorAll('div.cell.tag_full-width div.cell_output img')].map(img => ({
  width: Math.round(img.getBoundingClientRect().width), laptop: parseFloat(img.style.width) || img.naturalWidth,
  box: getComputedStyle(img.closest('div.cell_output')).overflowX,
  page: document.documentElement.scrollWidth, window: window.innerWidth}))"""


@pytest.mark.parametrize("page_name", NUMBERED_CHAPTERS)
def test_multi_panel_figures_stay_readable_on_a_phone(browser, server, page_name):
    """At 390 px a wide figure (tagged full-width: a row of panels) keeps the size it has on a laptop
    (at least 600 px, about 200 px a panel), in an output box that scrolls sideways on its own; the page
    does not scroll sideways."""
    figures = evaluate_at(browser, server, page_name, {"width": 390, "height": 844}, PHONE_FIGURES)
    for f in figures:
        assert f["width"] >= min(600, f["laptop"]) and f["width"] >= f["laptop"] - 1, f"{page_name}: shrunk on a phone: {f}"
        assert f["box"] in ("auto", "scroll"), f"{page_name}: the figure's box does not scroll: {f}"
        assert f["page"] <= f["window"], f"{page_name}: the page scrolls sideways at 390 px: {f}"
