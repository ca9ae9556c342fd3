"""A chapter run the way a Colab learner runs it: in a fresh environment that holds only what Colab
ships, at Colab's versions (``tests/colab_runtime.txt``: torch, numpy, matplotlib, ipywidgets 7,
ipykernel, tqdm), where the package is missing until the chapter's own install cell installs it.

The package is built as a wheel from this checkout and the install cell is pointed at it through
``BAYESATTN_LITE_SPEC`` (instead of the git tag, which does not exist before a release). The
chapter then runs top to bottom in a kernel of that environment, and the test checks that the
cell installed the package, this release, from the wheel, and installed or changed nothing else (in
particular, it did not upgrade Colab's ipywidgets inside the running kernel, nor reinstall torch).

It also runs the learner copy of chapter 1 (``learner/``, which the chapter's "Before you start" box
opens in Colab) from its own install cell, with every exercise unanswered: it must run to its end
without an error (a cell that calls an unwritten exercise runs on the reference and says so).

It takes a few minutes. torch is linked from this environment into the new one, not installed a
second time (it must then be Colab's pinned version, which requirements.txt's pin is). It runs chapter 1 and chapter 2, whose
widget exercises ipywidgets; ``BAYESATTN_COLAB_CHAPTER`` picks other notebooks instead (paths separated
by commas), "learner" for every learner copy, or "all" for both (what .ci/run sets: every learner copy
runs in CI).
"""

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
import pytest

import bayesattn_lite

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from steady_client import SteadyNotebookClient  # noqa: E402  (polls the kernel's replies: nbclient#312)


def chapters(choice):
    """The notebooks to run: by default chapters 1-2 and the learner copy of chapter 1 (what the box's
    Colab link opens); "learner" runs every learner copy; "all" both (what CI runs: about 10 minutes
    on 2 cores, learner copies of chapters 5 and 6 the longest); anything else is notebook paths,
    separated by commas."""
    copies = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "learner").glob("0[0-9]*_*.ipynb"))
    if choice in ("learner", "all"):
        assert len(copies) >= 10, f"learner/ holds {len(copies)} learner copies, expected one per chapter (10)"
        return copies if choice == "learner" else list(dict.fromkeys(QUICK + copies))
    return [c.strip() for c in choice.split(",") if c.strip()] if choice else QUICK


QUICK = ["book/01_attention_block.ipynb", "book/02_score_gradient.ipynb", "learner/01_attention_block.ipynb"]


CHAPTERS = chapters(os.environ.get("BAYESATTN_COLAB_CHAPTER"))

# The package's dependencies that Colab does not preinstall, which its install cell adds: jaxtyping
# (the shapes in the API's signatures; Colab has beartype, which checks them) and its one dependency.
NOT_ON_COLAB = {"jaxtyping", "wadler-lindig"}

# What a Colab runtime has preinstalled that the package could ask for, at Colab's versions.
COLAB = [line.strip() for line in (ROOT / "tests" / "colab_runtime.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#")]


def run(*cmd, **kwargs):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def frozen(python):
    lines = run(python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check")
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(lines)}


def link_torch(python):
    """Give the fresh environment this environment's torch by linking its files, not by installing it
    again (from PyPI that is a second download of several GB): torch's folders and its .dist-info, so
    pip sees torch installed. The version must be Colab's pin. Returns torch's own requirements, for
    pip to install (small: sympy, networkx, ...)."""
    import importlib.metadata
    from packaging.requirements import Requirement
    dist = importlib.metadata.distribution("torch")
    pin = next(p for p in COLAB if p.startswith("torch=="))
    assert dist.version.split("+")[0] == pin.split("==")[1], f"this environment has torch {dist.version}, Colab's pin is {pin}"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    here = Path(dist.locate_file(""))
    tops = {Path(str(f)).parts[0] for f in dist.files if not str(f).startswith("..")}
    for top in tops:
        if (here / top).exists() and not (site / top).exists() and top != "bin":
            (site / top).symlink_to(here / top)
    return [str(r) for r in map(Requirement, dist.requires or []) if r.marker is None or r.marker.evaluate({"extra": ""})]


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """(python of a fresh venv with Colab's packages, wheel of this checkout, folder)."""
    where = tmp_path_factory.mktemp("colab")
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    torch_requirements = link_torch(python)
    others = [pin for pin in COLAB if not pin.startswith("torch==")]
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *others, *torch_requirements)
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--quiet", "--disable-pip-version-check",
                 "-w", str(where / "dist")]
    # this environment's setuptools first (offline, fast); an isolated build if it has none
    if subprocess.run(wheel_cmd + ["--no-build-isolation"], cwd=ROOT, capture_output=True).returncode:
        run(*wheel_cmd, cwd=ROOT)
    wheel = next((where / "dist").glob("bayesattn_lite-*.whl"))
    # a kernelspec for that interpreter, found through JUPYTER_PATH
    spec = where / "share" / "jupyter" / "kernels" / "colab-like"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python"}))
    return python, wheel, where


def test_the_environment_has_colabs_versions(colab):
    python, _, _ = colab
    have = frozen(python)
    for pin in COLAB:
        name, version = pin.split("==")
        assert have[name.lower()].split("+")[0] == version, f"{name}: {have[name.lower()]}, Colab has {version}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_installs_the_package_and_runs_top_to_bottom(colab, monkeypatch, request, chapter):
    python, wheel, where = colab
    before = frozen(python)
    assert "bayesattn-lite" not in before, "the fresh environment should not have the package yet"
    # the next notebook installs it again, also after this one failed
    request.addfinalizer(lambda: run(python, "-m", "pip", "uninstall", "--yes", "--quiet", "bayesattn-lite", *NOT_ON_COLAB))
    assert before["torch"].split("+")[0] == "2.13.0"

    monkeypatch.setenv("JUPYTER_PATH", str(where / "share" / "jupyter"))
    monkeypatch.setenv("BAYESATTN_LITE_SPEC", str(wheel))
    monkeypatch.setenv("BAYESATTN_PROGRESS", "0")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # every core for the kernel's torch (an xdist worker keeps only its share for itself): once the
    # other workers are done, the learner copies, the longest part of CI, run alone
    from bayesattn_lite.train import usable_cpus
    monkeypatch.setenv("OMP_NUM_THREADS", str(usable_cpus()))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    nb = nbformat.read(ROOT / chapter, as_version=4)
    # run outside the repository, so `import bayesattn_lite` cannot find the source folder
    work = where / "run"
    work.mkdir(exist_ok=True)
    # 40 s per cell: chapters 1-2 run in seconds (chapter 1, install cell included, in about 10 s).
    # nbclient alone (0.11) now and then sat out a full per-cell timeout after a widget cell although
    # the kernel had replied; SteadyNotebookClient reads such a reply within a second.
    # (later chapters train for minutes in one cell: 600 s per cell for them)
    client = SteadyNotebookClient(nb, kernel_name="colab-like", timeout=40 if chapter in QUICK else 600,
                                  resources={"metadata": {"path": str(work)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    after = frozen(python)
    added = {name: after[name] for name in set(after) - set(before)}
    changed = {name: (before[name], after[name]) for name in set(before) & set(after) if before[name] != after[name]}
    assert added.pop("bayesattn-lite", None) == bayesattn_lite.__version__, "the install cell did not install this version"
    assert set(added) <= NOT_ON_COLAB, f"the install cell installed {added}, beyond the package and {sorted(NOT_ON_COLAB)}"
    assert not changed, f"the install cell changed preinstalled packages (torch must never be reinstalled): {changed}"
    location = run(python, "-c", "import bayesattn_lite, os; print(os.path.dirname(bayesattn_lite.__file__))", cwd=work)
    assert str(where / "venv") in location, f"bayesattn_lite imported from {location.strip()}, not the venv"
