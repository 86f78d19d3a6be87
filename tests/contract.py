"""Where the public contract lives, and what of it is known not to be served yet.

The contract (``docs/api.md``) and the design brief (``docs/design.md``) are the
repository's own copies; tests read them there, so a fresh clone runs every test.
Each ``NOT_BUILT_YET`` entry names the issue that builds it; the contract tests check
everything else both ways, and fail once an entry is served (so the list only shrinks)."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
API_MD = DOCS / "api.md"
DESIGN_MD = DOCS / "design.md"

NOT_BUILT_YET: dict[tuple[str, str], str] = {
}
