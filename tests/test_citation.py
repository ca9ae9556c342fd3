"""CITATION.cff is valid Citation File Format 1.2.0 (the official JSON schema, vendored beside this
file), names this release and repository, and the licences are where the README says."""

import json
from pathlib import Path

import jsonschema
import yaml

import bayesattn_lite

ROOT = Path(__file__).resolve().parent.parent


def test_citation_file_is_valid_cff_and_names_this_release():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    schema = json.loads((ROOT / "tests" / "citation-cff-1.2.0.schema.json").read_text())
    jsonschema.validate(cff, schema)
    assert cff["version"] == bayesattn_lite.__version__
    assert cff["repository-code"] == bayesattn_lite.REPOSITORY_URL
    assert any("Gradient Dynamics of Attention" in ref["title"] for ref in cff["references"])


def test_a_broken_citation_file_is_caught():
    schema = json.loads((ROOT / "tests" / "citation-cff-1.2.0.schema.json").read_text())
    broken = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    del broken["authors"]
    try:
        jsonschema.validate(broken, schema)
    except jsonschema.ValidationError as error:
        assert "authors" in error.message
    else:
        raise AssertionError("the schema accepted a citation without authors")


def test_licences_exist():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "CC BY 4.0" in (ROOT / "LICENSE-CONTENT.md").read_text()
