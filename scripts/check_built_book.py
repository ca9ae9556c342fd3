"""After `jupyter-book build .`: check the HTML a reader gets, page by page.

Every page of the table of contents exists; no page shows a Python traceback or an error output;
the intro's notation table carries math for MathJax; every chapter has a Colab launch link to its
learner copy (``learner/``, book/_ext/learner_launch.py) or, for a page without one, its own notebook, and
no Colab link to the full chapter; every page carries the licence notice (CC BY 4.0 text, MIT code).
"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from learner_launch import learner_copy  # noqa: E402 - the book's own extension says where the buttons go


def pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    yield toc["root"]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            yield chapter["file"]


def problems():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    for page in pages():
        html_path = HTML / f"{page}.html"
        if not html_path.exists():
            yield f"{page}: no HTML page at {html_path}"
            continue
        html = html_path.read_text()
        if "Traceback (most recent call last)" in html or 'class="output error' in html:
            yield f"{page}: shows an error or traceback"
        if "CC BY 4.0" not in html or "MIT" not in html:
            yield f"{page}: no licence notice in the footer (html.extra_footer in _config.yml)"
        if (ROOT / f"{page}.ipynb").exists():
            colab = f"colab.research.google.com/github/{repo}/blob/{config['repository']['branch']}/"
            notebook = learner_copy(ROOT, page) or f"{page}.ipynb"
            if colab + notebook not in html:
                yield f"{page}: no Colab launch link to {colab + notebook}"
            if notebook != f"{page}.ipynb" and colab + f"{page}.ipynb" in html:
                yield f"{page}: a Colab link to the full chapter {page}.ipynb beside its learner copy's"
    intro = (HTML / "book" / "intro.html").read_text()
    if "<table" not in intro or r"\(" not in intro or "d_k" not in intro:
        yield "intro: the notation table with math is missing"


def main():
    found = list(problems())
    for problem in found:
        print("built book:", problem)
    print("built book: all pages checked" if not found else f"built book: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
