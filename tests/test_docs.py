"""The documents stand on their own: no path outside the repository, no file named that does not exist."""

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


def test_documents_cite_no_issue_numbers() -> None:
    # Issues live in a tracker a reader of the repository cannot see.
    for document in DOCUMENTS:
        assert not re.search(r"\bissue #?\d+", document.read_text(), re.IGNORECASE), document
