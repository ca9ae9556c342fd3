"""book/scorecard.md, the claim-by-claim verdicts: every figure it quotes is printed by the chapter
it links to, and every link points at a heading that exists (the book build with -W checks the
anchors too)."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "scorecard.md"
VERDICTS = {"holds", "partly", "does not hold", "not tested at this size"}


def slug(heading):
    """MyST's heading anchor (GitHub's rule): lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def rows():
    """(claim, verdict, figures, links) for every row of the table (header and rule skipped)."""
    out = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("Claim", "") or set(cells[0]) <= {"-", ":"}:
            continue
        out.append((cells[0], cells[1].strip("*"), re.findall(r"`([^`]+)`", cells[2]),
                    re.findall(r"\]\(([\w.]+\.ipynb)#([\w-]+)\)", cells[3])))
    return out


def outputs_text(path):
    nb = nbformat.read(path, as_version=4)
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def headings(path):
    nb = nbformat.read(path, as_version=4)
    return {slug(line.lstrip("#")) for cell in nb.cells if cell.cell_type == "markdown"
            for line in cell.source.splitlines() if re.match(r"#{1,3} ", line)}


def test_the_page_has_a_row_per_claim():
    claims = [r[0].lower() for r in rows()]
    assert len(claims) >= 11, claims
    for word in ("advantage", "value", "specialisation", "em", "two timescales", "frame", "2.3",
                 "bayes", "orthogonal", "architecture", "content-based routing"):
        assert any(word in c for c in claims), f"no row about {word!r}"


@pytest.mark.parametrize("claim, verdict, figures, links", rows(), ids=lambda r: r if isinstance(r, str) else None)
def test_every_figure_is_printed_by_the_chapter_it_links_to(claim, verdict, figures, links):
    assert verdict in VERDICTS, f"{claim}: verdict {verdict!r}"
    assert links, f"{claim}: no link to the chapter section that measured it"
    assert figures or verdict == "not tested at this size", f"{claim}: no measured figure"
    texts = {}
    for notebook, anchor in links:
        path = ROOT / "book" / notebook
        assert path.exists(), f"{claim}: {notebook} does not exist"
        assert anchor in headings(path), f"{claim}: {notebook} has no heading #{anchor}"
        texts[notebook] = outputs_text(path)
    for figure in figures:
        assert any(figure in text for text in texts.values()), \
            f"{claim}: {figure!r} is not in the outputs of {', '.join(texts)}"
