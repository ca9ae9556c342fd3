"""Record how long nbval took to run each notebook, so CI checks the time budget without running
the book twice: ``python scripts/time_notebooks.py --from-json _build/notebook_times.json``.

Each notebook's time is the sum of its cells' setup, call and teardown (the kernel's start and
shutdown included), as pytest measured them. Written when a session ran at least one notebook
cell; ``$BAYESATTN_TIMES_JSON`` changes the path.
"""

import json
import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_seconds = defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration


def pytest_sessionfinish(session):
    if not _seconds:
        return
    target = Path(os.environ.get("BAYESATTN_TIMES_JSON", ROOT / "_build" / "notebook_times.json"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"source": "nbval (pytest)", "seconds": dict(_seconds)}, indent=1) + "\n")
