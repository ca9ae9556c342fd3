"""Execute the book's notebooks in place, top to bottom, in a fresh kernel each, and print the time.

    python scripts/execute_notebooks.py                 # every notebook under book/ (not student versions)
    python scripts/execute_notebooks.py book/02_*.ipynb # some of them

Notebooks are committed executed: run this after changing a chapter or the package, then
commit the notebooks. Widget state is stored, so the static book can show the widgets.
Progress bars are switched off (BAYESATTN_PROGRESS=0) to keep the committed outputs clean.

A notebook that fails is left as it was and the others still run; the failures are listed at the end
(exit status 1). A cell that runs past a minute is named while it runs, so a slow or stalled cell is
seen as it happens. The client polls the kernel's replies every second (``steady_client``): a reply
nbclient alone can miss (jupyter/nbclient#312) is read within a second instead of after the cell
timeout; a notebook whose cell timed out all the same is tried once more in a fresh kernel. The
cell timeout (default 1800 s) is far above the longest real cell (chapter 6's paper run, 131-464 s
on 2 cores) so that a loaded machine does not fail it.
"""

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError

sys.path.insert(0, str(Path(__file__).resolve().parent))   # steady_client, beside this file
from steady_client import SteadyNotebookClient  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def book_notebooks():
    """Every notebook under book/ except the student versions of the problem sets: their solutions
    are stubs that raise, and they are committed unexecuted (python -m bayesattn_lite.instructor.assignments)."""
    return sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.stem.endswith("_student"))


SLOW = 60  # seconds: a cell still running after this is named on the screen


class _Watch:
    """nbclient hooks that name the running cell once it passes SLOW seconds."""

    def __init__(self, path):
        self.path, self.timer = path, None

    def start(self, cell, cell_index, **_):
        first = (cell.source.strip().splitlines() or [""])[0][:80]
        self.timer = threading.Timer(SLOW, print, [f"   ... {self.path.name} cell {cell_index} still running "
                                                   f"after {SLOW} s: {first}"], {"flush": True})
        self.timer.daemon = True
        self.timer.start()

    def stop(self, **_):
        if self.timer is not None:
            self.timer.cancel()


def execute(path, timeout=1800):
    """Execute ``path`` in place; its seconds. Raises nbclient's error if a cell fails or times out,
    and then leaves the file as it was."""
    nb = nbformat.read(path, as_version=4)
    watch = _Watch(path)
    client = SteadyNotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                                  resources={"metadata": {"path": str(path.parent)}},
                                  on_cell_execute=watch.start, on_cell_executed=watch.stop)
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        watch.stop()
    seconds = time.perf_counter() - start
    for cell in nb.cells:  # wall-clock stamps would make every run a diff
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(nb, path)
    return seconds


def execute_with_retry(path, timeout):
    """``execute``, once more in a fresh kernel if a cell timed out (a lost reply looks like that)."""
    try:
        return execute(path, timeout)
    except CellTimeoutError as exc:
        print(f"   ... {path.name}: a cell timed out ({str(exc).splitlines()[0][:120]}); once more", flush=True)
        return execute(path, timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in book/")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    os.environ.setdefault("BAYESATTN_PROGRESS", "0")
    # The kernels inherit this environment: with MPLBACKEND=Agg (as CI sets for nbval) matplotlib
    # would not use the inline backend and the committed notebooks would lose every figure.
    os.environ.pop("MPLBACKEND", None)
    paths = [p.resolve() for p in args.notebooks] or book_notebooks()
    total, failed = 0.0, []
    for path in paths:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        try:
            seconds = execute_with_retry(path, args.timeout)
        except Exception as exc:  # noqa: BLE001 - one failing notebook must not stop the others
            failed.append(f"{name}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ''}")
            print(f"  FAILED  {name} (left as it was)", flush=True)
            continue
        total += seconds
        print(f"{seconds:7.1f} s  {name}", flush=True)
    print(f"{total:7.1f} s  in all ({len(paths) - len(failed)} of {len(paths)} notebooks)")
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
