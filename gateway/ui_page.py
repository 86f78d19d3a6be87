"""The dashboard page (``GET /ui``): one self-contained HTML document built once at start.

The page's parts ship in the package (``gateway/ui/index.html``, ``style.css``, ``app.js``;
pyproject package-data) and are inlined into one document, so the page needs nothing
from the network but the gateway's own API (no CDN; the Content-Security-Policy
``UI_CSP`` forbids anything else). ``render_ui(auth_enabled)`` marks on the ``<html>``
element whether the API wants a token, so the page asks for one up front instead of
after its first 401. Pure apart from reading the three files.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

UI_DIR = Path(__file__).resolve().parent / "ui"
UI_PARTS = ("index.html", "style.css", "app.js")


def _hash_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_ui(auth_enabled: bool, ui_dir: Path = UI_DIR) -> tuple[bytes, str]:
    """``(the page's HTML, its Content-Security-Policy)``: ``index.html`` with the
    ``/*STYLE*/`` and ``/*SCRIPT*/`` markers replaced by ``style.css`` and ``app.js`` and
    ``{{AUTH}}`` by ``on``/``off``. The policy allows exactly that script and style (by
    hash), same-origin API calls and ``data:`` images, nothing else."""
    html, css, js = ((ui_dir / name).read_text(encoding="utf-8") for name in UI_PARTS)
    page = html.replace("/*STYLE*/", css).replace("/*SCRIPT*/", js).replace("{{AUTH}}", "on" if auth_enabled else "off")
    csp = (
        f"default-src 'none'; script-src {_hash_source(js)}; style-src {_hash_source(css)}; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return page.encode(), csp
