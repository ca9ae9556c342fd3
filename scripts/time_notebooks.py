"""Execute every notebook of the table of contents, in its order, and hold the book to its time budget.

    python scripts/time_notebooks.py                                   # execute each one (not saved)
    python scripts/time_notebooks.py --from-json _build/notebook_times.json   # nbval's times (CI)

Prints each notebook's time and the total, and exits with status 1 if a notebook took longer than
--per-notebook seconds (default 300) or the book longer than --total (default 900): the course
promises every chapter in minutes and the whole book in a quarter of an hour on a 2-core CPU.
The JSON is written by the repository's conftest.py whenever pytest runs notebooks with nbval, so
CI checks the budget on the run it has already done instead of executing the book twice.
``--machine _build/machine.json`` (written by ``scripts/machine.py --json``) scales both limits by
how much slower this machine is than the one the budget was set on (never below 1x): CI's machines
differ by up to 4x in speed on the same code, and the budget is about the code.
Notebooks that a conftest.py tells pytest never to collect (the problem sets' student versions,
which are stubs) are not executed and not counted.
"""

import argparse
import fnmatch
import json
import os
import runpy
import sys
import time
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))   # steady_client, beside this file
from steady_client import SteadyNotebookClient  # noqa: E402


def toc_files(entries):
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        yield from toc_files(entry.get("parts", []) + entry.get("chapters", []) + entry.get("sections", []))


def toc_notebooks(root=ROOT):
    """The notebooks of _toc.yml that the tests execute, in its order, relative to the repository root.
    A problem set's student version stands for its instructor version (``ps1_derivations_student`` for
    ``ps1_derivations``): the book lists only the student version, nbval executes the instructor's."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"], *toc_files(toc.get("parts", []) + toc.get("chapters", []))]
    files = [f.removesuffix("_student") if f.endswith("_student") and (root / f"{f.removesuffix('_student')}.ipynb")
             .exists() else f for f in files]
    notebooks = [f"{f}.ipynb" for f in dict.fromkeys(files) if (root / f"{f}.ipynb").exists()]
    return [name for name in notebooks if not never_executed(name, root)]


def never_executed(name, root=ROOT):
    """Whether a conftest.py beside the notebook tells pytest to skip it (``collect_ignore`` or
    ``collect_ignore_glob``), as for the problem sets' student versions, which are stubs."""
    path = root / name
    conftest = path.parent / "conftest.py"
    if not conftest.exists():
        return False
    names = runpy.run_path(str(conftest))
    return path.name in names.get("collect_ignore", []) or any(
        fnmatch.fnmatch(path.name, pattern) for pattern in names.get("collect_ignore_glob", []))


def execute(path, timeout=600):
    """Seconds to run the notebook top to bottom in a fresh kernel (the file is left unchanged)."""
    nb = nbformat.read(path, as_version=4)
    client = SteadyNotebookClient(nb, timeout=timeout, kernel_name="python3",
                                  resources={"metadata": {"path": str(Path(path).parent)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def report(times, order, per_notebook, total_limit):
    """Print the table; return the list of budget problems (empty when within budget)."""
    problems = []
    for name in order:
        if name not in times:
            problems.append(f"{name}: not measured")
            print(f"{'-':>7}    {name}  (not measured)")
            continue
        flag = "  OVER" if times[name] > per_notebook else ""
        print(f"{times[name]:7.1f} s  {name}{flag}", flush=True)
        if flag:
            problems.append(f"{name}: {times[name]:.0f} s > {per_notebook:.0f} s")
    total = sum(times.get(name, 0.0) for name in order)
    print(f"{total:7.1f} s  in all ({len(order)} notebooks of the table of contents; budget {total_limit:.0f} s)")
    if total > total_limit:
        problems.append(f"the book: {total:.0f} s > {total_limit:.0f} s")
    others = sorted(set(times) - set(order))
    for name in others:  # e.g. student versions of assignments, run by nbval but not in the book
        flag = "  OVER" if times[name] > per_notebook else ""
        print(f"{times[name]:7.1f} s  {name} (not in the table of contents){flag}")
        if flag:
            problems.append(f"{name}: {times[name]:.0f} s > {per_notebook:.0f} s")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, help="check the times nbval recorded instead of executing")
    parser.add_argument("--per-notebook", type=float, default=300.0, help="seconds allowed per notebook")
    parser.add_argument("--total", type=float, default=900.0, help="seconds allowed for the whole book")
    parser.add_argument("--machine", type=Path, help="scale the limits by the slowdown scripts/machine.py --json wrote")
    args = parser.parse_args(argv)
    if args.machine:
        slowdown = float(json.loads(args.machine.read_text())["slowdown"])
        print(f"this machine is {slowdown:.2f}x as slow as the budget's reference (scripts/machine.py): "
              f"{args.per_notebook:.0f} s a notebook -> {slowdown * args.per_notebook:.0f} s, "
              f"{args.total:.0f} s the book -> {slowdown * args.total:.0f} s")
        args.per_notebook, args.total = slowdown * args.per_notebook, slowdown * args.total
    order = toc_notebooks()
    if args.from_json:
        if not args.from_json.exists():
            print(f"{args.from_json} does not exist: run `python -m pytest` (nbval) first")
            return 1
        recorded = json.loads(args.from_json.read_text())
        times = recorded["seconds"]
        longest = max(recorded.get("longest_cell", {}).items(), key=lambda item: item[1]["seconds"], default=None)
        if longest:   # the one cell the run waited on longest: what a stall or a slow machine shows first
            print(f"longest cell: {longest[1]['seconds']:.1f} s, {longest[0]} {longest[1]['cell']}")
    else:
        os.environ.setdefault("BAYESATTN_PROGRESS", "0")
        os.environ.setdefault("MPLBACKEND", "Agg")
        times = {}
        for name in order:
            times[name] = execute(ROOT / name)
            print(f"  ran {name} in {times[name]:.1f} s", flush=True)
    problems = report(times, order, args.per_notebook, args.total)
    for problem in problems:
        print("over budget:" if "not measured" not in problem else "budget:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
