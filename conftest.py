"""Record how long nbval took to run each notebook, so CI checks the time budget without running
the book twice: ``python scripts/time_notebooks.py --from-json _build/notebook_times.json``.

Each notebook's time is the sum of its cells' setup, call and teardown (the kernel's start and
shutdown included), as pytest measured them. Written when a session ran at least one notebook
cell; ``$BAYESATTN_TIMES_JSON`` changes the path.

Under pytest-xdist (``pytest tests -n 2``, as the README's test command runs the unit tests), each
worker gets an equal share of the cores for torch's threads: two workers that each start as many
threads as there are cores would fight over them (the wait of one thread stalls the other's work).
Only the controller writes the times. The longest test files are collected first, so that xdist
(one file per worker) starts them at once and the short files fill the other workers beside them,
instead of a long file starting last and running alone at the end.
"""

import json
import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_seconds = defaultdict(float)
_longest = {}   # notebook -> (seconds, cell id) of its longest cell


def pytest_configure(config):
    # nbval_sanitize.cfg: the output lines nbval does not compare (a chaotic run's); by its full path, so
    # that pytest started from another folder (book/) finds it too
    if hasattr(config.option, "nbval_sanitize_with") and config.option.nbval_sanitize_with is None:
        config.option.nbval_sanitize_with = str(ROOT / "nbval_sanitize.cfg")
    workers = getattr(config, "workerinput", {}).get("workercount")
    if workers:
        import torch

        from bayesattn_lite.train import usable_cpus
        threads = max(1, usable_cpus() // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)    # the kernels and processes this worker starts
        torch.set_num_threads(threads)


# the longest files of tests/ (the Colab-like run of every learner copy in CI, the two held-out tables,
# the browser's four widths on every page), in the order they should start
LONGEST_FIRST = ("tests/test_colab_like.py", "tests/test_bad_inputs.py", "tests/test_browser.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)   # stable: within a file, and among the other files, the order stays


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration
        if report.duration > _longest.get(path, (0.0, ""))[0]:   # the cell a slow run waited on longest
            _longest[path] = (report.duration, report.nodeid.split("::", 1)[-1])


def pytest_sessionfinish(session):
    if not _seconds or hasattr(session.config, "workerinput"):
        return
    target = Path(os.environ.get("BAYESATTN_TIMES_JSON", ROOT / "_build" / "notebook_times.json"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"source": "nbval (pytest)", "seconds": dict(_seconds),
                                  "longest_cell": {path: {"seconds": round(seconds, 2), "cell": cell}
                                                   for path, (seconds, cell) in _longest.items()}},
                                 indent=1) + "\n")
