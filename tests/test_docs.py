"""The documents stand on their own: no path outside the repository, no file named that does not exist, no
issue number (nor in the product's code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([REPO / "README.md", *REPO.glob("docs/*.md")])
# A path into the repository as the documents write it: docs/quotas.md, proxy/tools/demo.py, ...
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:docs|proxy|config|quota|protocol|tests)/[\w./-]*\w\.(?:py|md|ya?ml|png|json))"
)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_no_document_points_outside_the_repository(document: Path) -> None:
    text = document.read_text()
    assert "../" not in text, "a relative path out of the repository"
    assert "/work/" not in text


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_file_a_document_names_exists(document: Path) -> None:
    missing = sorted({path for path in REPO_PATH.findall(document.read_text()) if not (REPO / path).exists()})
    assert missing == []


# An issue cited by number: "issue 14", "Issue #14", "issues 3 and 4".
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
PRODUCT_MODULES = sorted(
    path
    for package in ("config", "pipeline", "protocol", "proxy", "quota")
    for path in (REPO / package).rglob("*.py")
)


def test_documents_cite_no_issue_numbers() -> None:
    # Issues live in a tracker a reader of the repository cannot see.
    for document in DOCUMENTS:
        assert not ISSUE_NUMBER.search(document.read_text()), document


def test_product_code_cites_no_issue_numbers() -> None:
    # A comment says why the code is as it is; an issue number sends the reader to a tracker they cannot see.
    citing = [
        f"{path.relative_to(REPO)}:{number}"
        for path in PRODUCT_MODULES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]
    assert citing == []
