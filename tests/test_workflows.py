"""The GitHub Actions workflows (.github/workflows): valid against the GitHub workflow schema that
check-jsonschema ships (offline), running the course's own CI script, and deploying from main."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
LINTER = shutil.which("check-jsonschema")
needs_linter = pytest.mark.skipif(not LINTER and os.environ.get("CI") != "true",
                                  reason="check-jsonschema is not installed (pip install -r requirements-dev.txt)")


def lint(*paths):
    assert LINTER, "check-jsonschema is missing: pip install -r requirements-dev.txt"
    return subprocess.run([LINTER, "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
                          capture_output=True, text=True)


@needs_linter
def test_workflows_are_valid():
    assert [p.name for p in WORKFLOWS] == ["book.yml", "release.yml"]
    done = lint(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_linter
def test_the_linter_catches_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  build:\n    run-on: ubuntu-24.04\n    steps:\n      - run: true\n")
    assert lint(broken).returncode != 0  # 'run-on' instead of 'runs-on'


def test_book_workflow_runs_the_ci_script_and_deploys_only_from_main():
    book = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = book["jobs"]["build"]["steps"]
    assert any(step.get("run") == "bash .ci/run" for step in steps)
    assert "refs/heads/main" in book["jobs"]["deploy"]["if"]
    assert any("deploy-pages" in step.get("uses", "") for step in book["jobs"]["deploy"]["steps"])


def test_release_workflow_checks_the_tag_tests_the_wheel_and_attaches_it():
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "__version__" in text and "python -m build" in text and "gh release upload" in text
    assert "twine check" in text and "python -m pytest" in text and "dist/*.whl" in text
    release = yaml.safe_load(text)
    pypi = release["jobs"]["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}, "PyPI's trusted publishing needs only an OIDC token"
    assert "vars.PUBLISH_TO_PYPI" in pypi["if"], "publishing stays off until a maintainer switches it on"


def test_every_action_is_on_a_current_major_version():
    """GitHub retired the Node 20 runtime in 2026: these versions run on Node 24 (dependabot keeps them)."""
    import re
    current = {"actions/checkout": 5, "actions/setup-python": 6, "actions/upload-pages-artifact": 4,
               "actions/deploy-pages": 5, "actions/upload-artifact": 5, "actions/download-artifact": 5}
    for path in WORKFLOWS:
        for action, major in re.findall(r"uses: (actions/[\w-]+)@v(\d+)", path.read_text()):
            assert int(major) >= current[action], f"{path.name}: {action}@v{major}"


def test_the_book_workflow_installs_cpu_torch_with_a_pip_cache():
    book = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    assert "whl/cpu" in book["env"]["TORCH_INDEX"] and "TORCH_INDEX" in (ROOT / ".ci" / "run").read_text()
    setup = next(s for s in book["jobs"]["build"]["steps"] if "setup-python" in s.get("uses", ""))
    assert setup["with"]["cache"] == "pip"
    assert book[True]["schedule"] and "linkcheck" in str(book["jobs"]["links"])  # yaml reads "on" as True


@needs_linter
def test_dependabot_config_is_valid():
    done = subprocess.run([LINTER, "--builtin-schema", "vendor.dependabot", str(ROOT / ".github" / "dependabot.yml")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
