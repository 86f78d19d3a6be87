"""The human page of the OpenAPI document (``GET /docs``): one self-contained HTML page (no
scripts, fonts or stylesheets from the network) listing every operation with its access
rule, parameters, request body (schema and example) and answers, then every schema.
Pure: renders a string from the document."""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

REF_PREFIX = "#/components/schemas/"
_REF_RE = re.compile(r"&quot;#/components/schemas/([A-Za-z0-9_.-]+)&quot;")
_CODE_RE = re.compile(r"`([^`]+)`")
_CODE_SUB = r"<code>\1</code>"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
main{max-width:1000px;margin:0 auto;padding:24px}
h1{margin-top:0}h2{border-bottom:1px solid #dde;padding-bottom:4px;margin-top:40px}
section.op{background:#fff;border:1px solid #dde;border-radius:6px;padding:12px 16px;margin:16px 0}
.method{display:inline-block;min-width:64px;text-align:center;font-weight:700;color:#fff;border-radius:4px;padding:2px 6px;margin-right:8px}
.GET{background:#2b7bb9}.POST{background:#2f9e44}.PUT{background:#c77c02}.DELETE{background:#c92a2a}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
pre{background:#f3f4f7;padding:8px;border-radius:4px;overflow-x:auto}
table{border-collapse:collapse;width:100%;margin:8px 0}td,th{border:1px solid #e3e5ea;padding:4px 8px;text-align:left;vertical-align:top}
.access{color:#555;font-style:italic}nav a{margin-right:12px}
"""


def _text(value: str) -> str:
    """Escaped text with `code` spans and paragraphs."""
    paras = [p for p in value.split("\n\n") if p.strip()]
    return "".join("<p>" + _CODE_RE.sub(_CODE_SUB, escape(p)) + "</p>" for p in paras)


def _json_block(value: Any) -> str:
    html = escape(json.dumps(value, indent=2, ensure_ascii=False))
    return "<pre>" + _REF_RE.sub(r'&quot;<a href="#schema-\1">#/components/schemas/\1</a>&quot;', html) + "</pre>"


def _schema_link(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF_PREFIX):
        name = escape(ref[len(REF_PREFIX) :])
        return f'<a href="#schema-{name}">{name}</a>'
    return f"<code>{escape(json.dumps(schema))}</code>"


def _example_of(doc: dict[str, Any], schema: dict[str, Any]) -> Any:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF_PREFIX):
        target = doc.get("components", {}).get("schemas", {}).get(ref[len(REF_PREFIX) :], {})
        examples = target.get("examples")
        if isinstance(examples, list) and examples:
            return examples[0]
    return None


def _parameters(op: dict[str, Any]) -> str:
    params = op.get("parameters") or []
    if not params:
        return ""
    rows = "".join(
        f"<tr><td><code>{escape(p['name'])}</code></td><td>{escape(p['in'])}</td>"
        f"<td>{'yes' if p.get('required') else 'no'}</td>"
        f"<td><code>{escape(str(p.get('schema', {}).get('pattern', '')))}</code></td>"
        f"<td>{escape(p.get('description', ''))}</td></tr>"
        for p in params
    )
    return (
        "<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>required</th><th>pattern</th>"
        f"<th>description</th></tr>{rows}</table>"
    )


def _request_body(doc: dict[str, Any], op: dict[str, Any]) -> str:
    body = op.get("requestBody")
    if not body:
        return ""
    out = []
    for media, content in body.get("content", {}).items():
        schema = content.get("schema", {})
        need = "required" if body.get("required") else "optional; an empty body means {}"
        out.append(f"<h4>Request body</h4><p><code>{escape(media)}</code> ({need}): {_schema_link(schema)}</p>")
        example = _example_of(doc, schema)
        if example is not None:
            out.append("<p>Example:</p>" + _json_block(example))
    return "".join(out)


def _responses(op: dict[str, Any]) -> str:
    rows = []
    for status, resp in op.get("responses", {}).items():
        content = resp.get("content") or {}
        what = ", ".join(f"<code>{escape(m)}</code> {_schema_link(c.get('schema', {}))}" for m, c in content.items())
        headers = ", ".join(f"<code>{escape(h)}</code>" for h in (resp.get("headers") or {}))
        rows.append(
            f"<tr><td>{escape(status)}</td><td>{escape(resp.get('description', ''))}</td>"
            f"<td>{what}</td><td>{headers}</td></tr>"
        )
    return (
        "<h4>Answers</h4><table><tr><th>status</th><th>meaning</th><th>body</th><th>headers</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _operation(doc: dict[str, Any], path: str, method: str, op: dict[str, Any]) -> str:
    m = method.upper()
    return (
        f'<section class="op" id="{escape(op["operationId"])}">'
        f'<h3><span class="method {m}">{m}</span><code>{escape(path)}</code></h3>'
        f"<p><strong>{escape(op.get('summary', ''))}</strong> "
        f"<span class=\"access\">(access: {escape(op.get('x-vpq-access', ''))})</span></p>"
        f"{_text(op.get('description', ''))}{_parameters(op)}{_request_body(doc, op)}{_responses(op)}</section>"
    )


def render_docs(doc: dict[str, Any]) -> str:
    """The HTML page for an OpenAPI document built by ``gateway.openapi.build_openapi``."""
    info = doc.get("info", {})
    by_tag: dict[str, list[str]] = {}
    nav: dict[str, list[str]] = {}
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            tag = (op.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append(_operation(doc, path, method, op))
            nav.setdefault(tag, []).append(
                f'<li><a href="#{escape(op["operationId"])}">{escape(method.upper())} {escape(path)}</a></li>'
            )
    toc = "".join(f"<li>{escape(tag)}<ul>{''.join(items)}</ul></li>" for tag, items in nav.items())
    sections = "".join(f"<h2>{escape(tag)}</h2>{''.join(ops)}" for tag, ops in by_tag.items())
    schemas = "".join(
        f'<section class="op" id="schema-{escape(name)}"><h3>{escape(name)}</h3>{_json_block(schema)}</section>'
        for name, schema in doc.get("components", {}).get("schemas", {}).items()
    )
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
        f"<body><main><h1>{title}</h1>{_text(info.get('description', ''))}"
        '<p>Machine-readable document: <a href="/openapi.json">/openapi.json</a>. '
        "Authentication (when enabled): <code>Authorization: Bearer TOKEN</code>.</p>"
        f"<nav><ul>{toc}</ul></nav>{sections}<h2>Schemas</h2>{schemas}</main></body></html>"
    )
