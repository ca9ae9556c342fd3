"""Binder's environment files: CPU torch at the pinned version, the learner's requirements, Python
3.11, and a launch button in _config.yml."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_binder_builds_the_learners_environment_with_cpu_torch():
    lines = [l.strip() for l in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    pinned = next(l for l in (ROOT / "requirements.txt").read_text().splitlines() if l.startswith("torch=="))
    assert f"{pinned}+cpu" in lines, f"binder's torch should be the CPU build of {pinned}"
    assert "-r ../requirements.txt" in lines
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
