"""The OpenAPI document the real platform serves agrees with API.md (the public contract).

Read from the text of API.md, not transcribed: every ``METHOD /path`` it names is an
operation of ``GET /openapi.json`` with the same path parameters, and every public
operation of the document is in API.md (``GET /docs`` is its "human page"); the name and
isolation patterns of its Conventions are the patterns of the parameters and fields; the
poll limits it states are the schema's; every key of the JSON examples written next to an
endpoint is a property of that operation's request or answer schema; JSON everywhere.
(``tests/gateway/test_openapi.py`` checks the route table against a transcription.)
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.contract import API_MD, NOT_BUILT_YET

pytestmark = pytest.mark.integration

ELLIPSIS_PREFIX = "/v1/queues/{queue}/groups/{group}"  # API.md writes ".../consumers/..." for it
EXTRA_OPERATIONS = {("GET", "/docs")}  # "GET /openapi.json and a human page for it"
ENDPOINT_RE = re.compile(r"`(GET|PUT|POST|DELETE) ([^`\s]+)")
SNIPPET_RE = re.compile(r"```json\n(.*?)```|`(\{\".*?\})`", re.S)
ANNOTATIONS = {"title", "description", "default", "examples"}


@pytest.fixture(scope="module")
def api_md() -> str:
    return API_MD.read_text()


@pytest.fixture(scope="module")
def served(platform: Any) -> dict[str, Any]:
    r = requests.get(platform.url + "/openapi.json", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    return r.json()


def _path(raw: str) -> str:
    raw = raw.split("?")[0]  # a query in the text (``?limit=N``) is not part of the path
    if raw.startswith(".../groups/"):
        return "/v1/queues/{queue}" + raw[3:]
    return ELLIPSIS_PREFIX + raw[3:] if raw.startswith("...") else raw


def md_endpoints(text: str, built_only: bool = True) -> set[tuple[str, str]]:
    """The endpoints API.md names (without those ``tests.contract.NOT_BUILT_YET`` lists)."""
    found = {(m, _path(p)) for m, p in ENDPOINT_RE.findall(text)}
    return found - set(NOT_BUILT_YET) if built_only else found


def md_snippets(text: str) -> list[tuple[tuple[str, str], str]]:
    """Each JSON example of API.md with the endpoint last named before it."""
    events = [(m.start(), "endpoint", (m.group(1), _path(m.group(2)))) for m in ENDPOINT_RE.finditer(text)]
    events += [(m.start(), "snippet", m.group(1) or m.group(2)) for m in SNIPPET_RE.finditer(text)]
    out, current = [], None
    for _, kind, value in sorted(events, key=lambda e: e[0]):
        if kind == "endpoint":
            current = None if value in NOT_BUILT_YET else value
        elif current is not None:
            out.append((current, value))
    return out


def key_paths(snippet: str) -> set[tuple[str, ...]]:
    """The object keys of a JSON-ish example (``n``, ``...``, ``{"a", "b" | "c"}`` allowed), each
    as the path of keys leading to it (arrays are transparent)."""
    paths: set[tuple[str, ...]] = set()
    stack: list[dict[str, Any]] = []  # frames: kind "{" or "[", prefix, current key
    expect_key = False
    i = 0
    while i < len(snippet):
        c = snippet[i]
        if c == '"':
            end = snippet.index('"', i + 1)
            word = snippet[i + 1 : end]
            if stack and stack[-1]["kind"] == "{" and expect_key:
                frame = stack[-1]
                frame["key"] = word
                paths.add((*frame["prefix"], word))
                expect_key = False
            i = end + 1
            continue
        if c in "{[":
            parent = stack[-1] if stack else None
            prefix: tuple[str, ...] = ()
            if parent is not None:
                prefix = parent["prefix"] + ((parent["key"],) if parent["kind"] == "{" and parent["key"] else ())
            stack.append({"kind": c, "prefix": prefix, "key": None})
            expect_key = c == "{"
        elif c in "}]":
            stack.pop()
            expect_key = False
        elif c in ",|":
            expect_key = bool(stack) and stack[-1]["kind"] == "{"
        elif c == ":":
            expect_key = False
        i += 1
    return paths


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = doc
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    return schema


def accepts(doc: dict[str, Any], schema: dict[str, Any], path: tuple[str, ...]) -> bool:
    """True when ``path`` names declared properties down ``schema`` (free-form maps and
    ``Any`` values accept whatever is below them; models that merely allow extra keys do not)."""
    schema = resolve(doc, schema)
    if not path or set(schema) <= ANNOTATIONS:
        return True
    for sub in (*schema.get("anyOf", ()), *schema.get("oneOf", ()), *schema.get("allOf", ())):
        if accepts(doc, sub, path):
            return True
    if "properties" in schema:
        props = schema["properties"]
        return path[0] in props and accepts(doc, props[path[0]], path[1:])
    if "items" in schema:
        return accepts(doc, schema["items"], path)
    if isinstance(schema.get("additionalProperties"), dict):
        return accepts(doc, schema["additionalProperties"], path[1:])
    return False


def operation_schemas(op: dict[str, Any]) -> list[dict[str, Any]]:
    out = [c["schema"] for c in op.get("requestBody", {}).get("content", {}).values()]
    for response in op["responses"].values():
        out += [c["schema"] for media, c in response.get("content", {}).items() if media == "application/json"]
    return out


def test_every_endpoint_of_api_md_is_served_and_nothing_public_is_missing(api_md: str, served: dict[str, Any]) -> None:
    documented = md_endpoints(api_md)
    assert len(documented) >= 15, documented  # the parse found API.md's endpoints
    operations = {(m.upper(), p) for p, item in served["paths"].items() for m in item}
    assert documented - operations == set(), "in API.md, not served"
    assert set(NOT_BUILT_YET) <= md_endpoints(api_md, built_only=False), "no longer in API.md"
    assert not set(NOT_BUILT_YET) & operations, "served now: drop it from tests.contract.NOT_BUILT_YET"
    assert operations - documented == EXTRA_OPERATIONS, "served, not in API.md"


def test_path_parameters_are_api_md_s(api_md: str, served: dict[str, Any]) -> None:
    for method, path in md_endpoints(api_md):
        op = served["paths"][path][method.lower()]
        declared = [(p["name"], p["required"]) for p in op.get("parameters", []) if p["in"] == "path"]
        assert declared == [(name, True) for name in re.findall(r"\{(\w+)\}", path)], (method, path)


def _convention(text: str, lead: str) -> str:
    m = re.search(re.escape(lead) + r"[^`]*`([^`]+)`", text)
    assert m, f"API.md no longer says {lead!r}"
    return m.group(1)


def _patterns(served: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(patterns of path parameters, patterns of lane/env/set headers and fields)."""
    names, isolation = set(), set()
    for item in served["paths"].values():
        for op in item.values():
            for p in op.get("parameters", []):
                if p["in"] == "path":
                    names.add(p["schema"]["pattern"])
                elif p["name"] in ("X-Lane", "X-Env", "X-Set"):
                    isolation.add(p["schema"]["pattern"])
    for schema in served["components"]["schemas"].values():
        for field in ("lane", "env", "set"):
            if field in schema.get("properties", {}):
                isolation |= _all_patterns(schema["properties"][field])
    return names, isolation


def _all_patterns(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
        return found.union(*(_all_patterns(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_all_patterns(v) for v in node))
    return set()


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_name_and_isolation_patterns_are_the_conventions(api_md: str, served: dict[str, Any], data: st.DataObject) -> None:
    names_rule = _convention(api_md, "Names of queues and groups:")
    isolation_rule = _convention(api_md, "Lanes, envs and sets:")
    names, isolation = _patterns(served)
    assert len(names) == 1 and isolation == {f"^{isolation_rule}$"}
    (served_names,) = names
    # the served pattern is API.md's minus the dot segments "." and "..", which no URL can
    # carry (every client and router resolves them away)
    name = data.draw(st.from_regex(names_rule, fullmatch=True) | st.sampled_from([".", "..", "..."]))
    assert (re.fullmatch(served_names, name) is not None) == (name not in (".", ".."))
    other = data.draw(st.text(alphabet="aZ09._-/ %:é", max_size=130))
    assert (re.fullmatch(served_names, other) is not None) == (re.fullmatch(names_rule, other) is not None and other not in (".", ".."))


def test_poll_limits_are_api_md_s(api_md: str, served: dict[str, Any]) -> None:
    poll = served["components"]["schemas"]["PollRequest"]["properties"]
    stated = re.findall(r"`(\w+)` \([^)]*?default\s+(\d+),\s+at\s+most\s+(\d+)\)", api_md)
    assert {name for name, _, _ in stated} == {"max_messages", "wait_ms"}
    for name, default, maximum in stated:
        assert (poll[name]["default"], poll[name]["maximum"]) == (int(default), int(maximum)), name


def test_json_examples_of_api_md_name_schema_properties(api_md: str, served: dict[str, Any]) -> None:
    snippets = md_snippets(api_md)
    assert len(snippets) >= 8, snippets  # the parse found API.md's examples
    for (method, path), snippet in snippets:
        op = served["paths"][path][method.lower()]
        schemas = operation_schemas(op)
        for key_path in sorted(key_paths(snippet)):
            assert any(accepts(served, s, key_path) for s in schemas), (
                f"API.md shows {'.'.join(key_path)!r} for {method} {path}, which its schemas do not declare"
            )


def test_key_paths_reader() -> None:
    assert key_paths('{"a": 1, "b": {"c": [{"d": "x"}]}}') == {("a",), ("b",), ("b", "c"), ("b", "c", "d")}
    assert key_paths('{"m": [{"id", "value" | "value_b64", "h"}]}') == {("m",), ("m", "id"), ("m", "value"), ("m", "value_b64"), ("m", "h")}
    assert key_paths('{"ids": [...], "n": n, "s": "..."}') == {("ids",), ("n",), ("s",)}


def test_bodies_and_answers_are_json(served: dict[str, Any]) -> None:
    for path, item in served["paths"].items():
        for method, op in item.items():
            for media in op.get("requestBody", {}).get("content", {}):
                assert media == "application/json", (method, path)
            for status, response in op["responses"].items():
                media_types = set(response.get("content", {}))
                if not status.startswith("2"):
                    assert media_types == {"application/json"}, (method, path, status)
                    schema = response["content"]["application/json"]["schema"]
                    error = resolve(served, schema)
                    assert error["required"] == ["error"]
                    assert set(resolve(served, error["properties"]["error"])["required"]) == {"code", "message"}
                elif path not in ("/metrics", "/docs", "/ui") and status != "204":  # pages for people
                    assert media_types == {"application/json"}, (method, path, status)
