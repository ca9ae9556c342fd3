"""Binder's environment files: CPU torch at the pinned version, the notebooks' packages at the course's
versions and none of the Jupyter server's own, jupyterlab-myst to render MyST, Python 3.11, and a
launch button in _config.yml that opens JupyterLab. (Not resolved against Binder's own image here:
CI has no Docker and the CPU torch index is not reachable from the course's machines.)"""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


# The packages a Jupyter server's environment has for itself: Binder installs binder/requirements.txt
# into that environment, so the file must not pin them (it would move the server under itself).
SERVER = {"jupyterlab", "notebook", "jupyter-server", "jupyter-client", "jupyter-core", "ipykernel", "ipython",
          "tornado", "traitlets", "pyzmq", "nbformat", "nbconvert", "nbclient", "jupyterlab-server",
          "jupyter-server-terminals", "jupyter-events", "jupyterlab-widgets", "widgetsnbextension", "comm"}


def requirement_lines():
    return [l.split("#")[0].strip() for l in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
            if l.split("#")[0].strip()]


def test_binder_builds_the_learners_environment_with_cpu_torch():
    lines = requirement_lines()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    pinned = next(l for l in (ROOT / "requirements.txt").read_text().splitlines() if l.startswith("torch=="))
    assert f"{pinned}+cpu" in lines, f"binder's torch should be the CPU build of {pinned}"
    assert "-e ." in lines, "the course's package from the checkout Binder built"
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"


def test_binder_pins_the_notebooks_packages_at_the_courses_versions_and_none_of_the_servers():
    from packaging.requirements import Requirement
    pins = [l.split("#")[0].strip() for l in (ROOT / "requirements.txt").read_text().splitlines()]
    course = {Requirement(l).name.lower(): str(Requirement(l).specifier) for l in pins if "==" in l}
    names = []
    for line in requirement_lines():
        if line.startswith("-"):
            assert line.startswith(("--extra-index-url", "-e .")), f"binder/requirements.txt: {line!r}"
            continue
        req = Requirement(line)
        name = req.name.lower().replace("_", "-")
        names.append(name)
        assert name not in SERVER, f"binder/requirements.txt pins {name}, a package of the Jupyter server itself"
        if name in course and name != "torch":
            assert str(req.specifier) == course[name], f"{name}: {req.specifier}, the course pins {course[name]}"
    assert "jupyterlab-myst" in names, "JupyterLab needs jupyterlab-myst to render the chapters' MyST"
    # everything the package itself needs is there, so the editable install pulls nothing unpinned
    import tomllib
    needs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {Requirement(d).name.lower() for d in needs} <= set(names)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["notebook_interface"] == "jupyterlab", "MyST renders in JupyterLab"
