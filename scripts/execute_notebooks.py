"""Execute the book's notebooks in place, top to bottom, in a fresh kernel each, and print the time.

    python scripts/execute_notebooks.py                 # every notebook under book/ (not student versions)
    python scripts/execute_notebooks.py book/02_*.ipynb # some of them

Notebooks are committed executed: run this after changing a chapter or the package, then
commit the notebooks. Widget state is stored, so the static book can show the widgets.
Progress bars are switched off (BAYESATTN_PROGRESS=0) to keep the committed outputs clean.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def book_notebooks():
    """Every notebook under book/ except the student versions of the problem sets: their solutions
    are stubs that raise, and they are committed unexecuted (python -m bayesattn_lite.instructor.assignments)."""
    return sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.stem.endswith("_student"))


def execute(path, timeout=600):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    for cell in nb.cells:  # wall-clock stamps would make every run a diff
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(nb, path)
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in book/")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    os.environ.setdefault("BAYESATTN_PROGRESS", "0")
    # The kernels inherit this environment: with MPLBACKEND=Agg (as CI sets for nbval) matplotlib
    # would not use the inline backend and the committed notebooks would lose every figure.
    os.environ.pop("MPLBACKEND", None)
    paths = [p.resolve() for p in args.notebooks] or book_notebooks()
    total = 0.0
    for path in paths:
        seconds = execute(path, args.timeout)
        total += seconds
        print(f"{seconds:7.1f} s  {path.relative_to(ROOT)}", flush=True)
    print(f"{total:7.1f} s  in all ({len(paths)} notebooks)")


if __name__ == "__main__":
    sys.exit(main())
