"""The server API's OpenAPI document: a valid OpenAPI 3.1 document, rendered in docs/api.md as
the code generates it, served as generated, and made of the models the handlers answer with."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from openapi_spec_validator import validate

from notify.api.errors import ApiErrorCode
from notify.api.openapi import document, generated_part, render_markdown
from tests.api.conftest import KEY, Serve

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_document_is_valid_openapi_3_1() -> None:
    doc = document()
    validate(doc)  # (raises on an invalid document)
    assert doc["openapi"] == "3.1.0"
    schemas = doc["components"]["schemas"]
    assert set(schemas["ApiErrorCode"]["enum"]) == {c.value for c in ApiErrorCode}
    for name in ("GroupView", "MessagePage", "StoredMessage", "GroupList", "GroupSummary"):
        assert schemas[name]["additionalProperties"] is False, name
    message = schemas["StoredMessage"]["properties"]
    assert set(message) == {"offset", "sender", "stream", "seq", "order", "payload", "time"}
    assert set(schemas["GroupView"]["properties"]) == {"group", "version", "members", "users"}


def test_docs_api_md_is_up_to_date() -> None:
    assert generated_part(DOCS.read_text()) == render_markdown(), (
        "docs/api.md is stale: run `python -m notify.api.openapi --write-docs docs/api.md`")


async def test_the_server_serves_the_document_without_a_key(serve: Serve) -> None:
    s = await serve(*KEY)
    async with aiohttp.ClientSession() as http, \
            http.get(f"{s.api}/api/v1/openapi.json") as r:
        assert r.status == 200 and r.content_type == "application/json"
        assert await r.json() == document()
