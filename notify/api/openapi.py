"""The server API's OpenAPI 3.1 document, generated: the schemas come from the response models
(notify/api/models.py, `model_json_schema`), the paths and parameters from the tables below,
which the handlers (notify/api/app.py) read too (the bounds they check are these).

Served at `GET /api/v1/openapi.json`; rendered into docs/api.md between the markers below by

    python -m notify.api.openapi --write-docs docs/api.md

(tests/api/test_openapi.py fails when docs/api.md is out of date). `python -m notify.api.openapi`
prints the JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
from pydantic.json_schema import models_json_schema

from notify.api.models import I64_MAX, JSON_VALUE, MODELS
from notify.core.config import Limits
from notify.core.hub import GROUP_NAME
from notify.core.users import INSTANCE, SEPARATOR

PREFIX = "/api/v1"
#: the most messages or groups one page holds (history: and about `history_page_bytes`)
MAX_LIMIT = Limits().history_page
DEFAULT_LIMIT = 100
#: a group name (the rule `join` applies: notify/core/hub.py `valid_group_name`)
GROUP_PATTERN = f"^{GROUP_NAME}$"
MAX_GROUP = Limits().max_group_name
#: a member id (`user#instance`) or a user id: what `DELETE .../members/{member}` takes
MEMBER_PATTERN = f"^{GROUP_NAME}({SEPARATOR}{INSTANCE.pattern})?$"
MAX_MEMBER = MAX_GROUP + 65
#: a user id (hello's rule for a member name)
USER_PATTERN = GROUP_PATTERN
#: the longest `prefix` and `cursor` of the listing
MAX_TEXT = 256

BEGIN = "<!-- BEGIN GENERATED: python -m notify.api.openapi --write-docs docs/api.md -->"
END = "<!-- END GENERATED -->"

DESCRIPTION = (
    "HTTP/JSON API of a notify server for application backends (issue 31): publishing to a "
    "group without joining it, a group's view and presence, its durable history, the groups. "
    "Authenticate with `Authorization: Bearer "
    "SECRET` (an API key: docs/api.md); each operation names the scope it needs, and a key "
    "reaches only the groups its globs match. Errors are `{\"error\": {\"code\", "
    "\"message\"}}` with a stable `code`. Group names in paths are percent-encoded (`/` as "
    "`%2F`). In cluster mode every node serves all of it: a publish and a removal go to the "
    "group's owner, a disconnect reaches every node.")


def _param(name: str, where: str, schema: dict[str, Any], description: str,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "description": description,
            "schema": schema}


GROUP_PARAM = {**_param("group", "path", {"type": "string", "minLength": 1,
                                          "maxLength": MAX_GROUP, "pattern": GROUP_PATTERN},
                        "the group's name, percent-encoded", required=True),
               "example": "doc-1"}
LIMIT_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
AFTER_SCHEMA = {"type": "integer", "minimum": 0, "maximum": I64_MAX, "default": 0}
TEXT_SCHEMA = {"type": "string", "maxLength": MAX_TEXT}

#: query parameters of each operation (the handlers refuse others: a misspelt one must not
#: silently become its default)
QUERY: dict[str, dict[str, dict[str, Any]]] = {
    "listGroups": {"prefix": {**TEXT_SCHEMA, "default": ""}, "limit": LIMIT_SCHEMA,
                   "cursor": TEXT_SCHEMA},
    "getGroup": {},
    "getMessages": {"after": AFTER_SCHEMA, "limit": LIMIT_SCHEMA},
    "publishMessage": {},
    "removeMember": {},
    "disconnectUser": {},
}
#: an Idempotency-Key: a publish id (the core's rule: 1-256 characters), printable ASCII
MAX_IDEMPOTENCY_KEY = 256
IDEMPOTENCY_PATTERN = f"^[\\x21-\\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}$"
IDEMPOTENCY_PARAM = _param(
    "Idempotency-Key", "header",
    {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY,
     "pattern": IDEMPOTENCY_PATTERN},
    "the publish id: a retry with the same key and body answers the first offset and is "
    "delivered once; the same key with another body is refused 409. Remembered for the key's "
    "last 10,000 publishes to the group (`idempotency_window`), across restarts")
MEMBER_PARAM = {**_param("member", "path", {"type": "string", "minLength": 1,
                                            "maxLength": MAX_MEMBER, "pattern": MEMBER_PATTERN},
                         "a member id (`user#instance`, `#` as `%23`; or a member that names "
                         "no instance) or a user id (every instance of that user)",
                         required=True),
                "example": "nobody#tab-1"}
USER_PARAM = {**_param("user", "path", {"type": "string", "minLength": 1,
                                        "maxLength": MAX_GROUP, "pattern": USER_PATTERN},
                       "the user id (a token's `sub`)", required=True),
              "example": "nobody"}

_ERRORS = {
    "400": "bad_request: a parameter is malformed or out of range (the message names it)",
    "401": "unauthorized: no key, or an unknown one",
    "403": "forbidden: the key lacks the scope, or does not reach the group",
    "404": "unknown_group: the log has no view of the group",
    "409": "conflict: the Idempotency-Key was used with another request (nothing published)",
    "413": "too_large: the body is over `max_frame_bytes`",
    "429": "rate_limited: the key's requests per second are spent (see Retry-After)",
    "503": "unavailable: shutting down, the log cannot be read or written now, or a publish "
           "not answered in time (retry it with the same Idempotency-Key)",
}


def _error(status: str) -> dict[str, Any]:
    return {"description": _ERRORS[status], "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ErrorBody"}}}}


def _admin_errors(op: dict[str, Any], not_found: str | None, unavailable: str) -> dict[str, Any]:
    """`op` with the 404 and 503 of a removal or a disconnect said as they are."""
    responses = op["responses"]
    if not_found is not None:
        responses["404"] = {**responses["404"], "description": not_found}
    responses["503"] = {**responses["503"], "description": unavailable}
    return op


def _ok(model: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model}"}}}}


def _operation(op: str, summary: str, description: str, ok: dict[str, Any],
               path_params: list[dict[str, Any]], errors: tuple[str, ...]) -> dict[str, Any]:
    params = [*path_params, *(_param(name, "query", schema, _QUERY_DOC[name])
                              for name, schema in QUERY[op].items())]
    return {"operationId": op, "summary": summary, "description": description,
            "parameters": params,
            "responses": {"200": ok, **{s: _error(s) for s in errors}}}


_QUERY_DOC = {
    "prefix": "only the groups whose names start with it",
    "limit": f"at most this many (1-{MAX_LIMIT})",
    "cursor": "the `next` of the previous page (the last name it listed)",
    "after": "the messages after this offset (0: from the start of what the log retains)",
}


#: a listed group's name is a `group` of the other operations (OpenAPI links)
_LINKS = {op: {"operationId": op, "parameters": {"group": "$response.body#/groups/0/group"},
               "description": "the first group listed"}
          for op in ("getGroup", "getMessages")}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the server API."""
    _, schemas = models_json_schema([(m, "serialization") for m in MODELS],
                                    ref_template="#/components/schemas/{model}")
    group_errors = ("400", "401", "403", "404", "429", "503")
    return {
        "openapi": "3.1.0",
        "info": {"title": "notify server API", "version": "1", "description": DESCRIPTION},
        "security": [{"bearer": []}],
        "paths": {
            f"{PREFIX}/groups": {"get": _operation(
                "listGroups", "The groups, in name order, paged (scope: read)",
                "The groups the key reaches whose names start with `prefix`, after `cursor`, "
                "with their member and user counts and their head offset: the groups in "
                "memory and those the log holds. A page may hold fewer than `limit` groups "
                "when more follow (the key's globs filter what was read): go on while `next` "
                "is not null.",
                {**_ok("GroupList", "a page of groups"), "links": _LINKS}, [],
                ("400", "401", "403", "429", "503"))},
            f"{PREFIX}/groups/{{group}}": {"get": _operation(
                "getGroup", "A group's view and presence by user (scope: read)",
                "The current view (version and member ids) and the users present, each with "
                "its instances. A group that is not in memory is answered from the log.",
                _ok("GroupView", "the view"), [GROUP_PARAM], group_errors)},
            f"{PREFIX}/groups/{{group}}/messages": {"post": {
                **_operation(
                    "publishMessage", "Publish a message to a group (scope: publish)",
                    "The message reaches every member of the group's current view, whatever "
                    "its `accept_from`, from the trusted sender `api:NAME` (NAME: the key's "
                    "name), in that key's FIFO stream or in the total order. Answered once the "
                    "message is in the durable log; an atomic one once committed or aborted. "
                    "A 503 leaves it unknown whether the message was stored: retry with the "
                    "same Idempotency-Key, and it is delivered once. A retry answered from "
                    "the first attempt carries `Idempotent-Replayed: true`.",
                    _ok("PublishAnswer", "stored (and, when atomic, decided)"),
                    [GROUP_PARAM, IDEMPOTENCY_PARAM],
                    ("400", "401", "403", "404", "409", "413", "429", "503")),
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/PublishRequest"}}}}},
                "get": _operation(
                "getMessages", "A page of a group's durable history (scope: read)",
                "The messages the log holds after `after`, in offset order, from the durable "
                "log within retention (older than the in-memory window too): at most `limit`, "
                "and about 1 MiB of payload (a page holds at least one message). Aborted "
                "atomic messages are left out, and a page stops before an atomic message "
                "whose outcome is not decided yet.",
                _ok("MessagePage", "a page of messages"), [GROUP_PARAM], group_errors)},
            f"{PREFIX}/groups/{{group}}/members/{{member}}": {"delete": _admin_errors(_operation(
                "removeMember", "Remove a member, or every instance of a user (scope: admin)",
                "Removes the instance `member` names from the group's view, or every instance "
                "of the user a user id names, by a view change (reason `removed`): its SDK "
                "gets `Removed` with reason `removed` and does not join again by itself. It "
                "stays connected, and in its other groups. Answered once the view without "
                "them is installed and stored. A group not in memory has no member connected "
                "(a group leaves memory only when its view is empty): 404 `unknown_member` "
                "if the log knows the group.",
                _ok("Removal", "removed: the view without them is installed"),
                [GROUP_PARAM, MEMBER_PARAM], group_errors),
                "unknown_group: the log has no view of the group; unknown_member: nobody in "
                "its view is that member, or an instance of that user",
                "unavailable: shutting down, no node owns the group now (a cluster's "
                "failover), or the view change was not installed in time (it goes on: read "
                "the group's view)")},
            f"{PREFIX}/users/{{user}}/disconnect": {"post": _admin_errors(_operation(
                "disconnectUser", "Disconnect a user and revoke its tokens (scope: admin, "
                "every group)",
                "Closes every connection of the user with close code 4007 (`disconnected`): "
                "its sessions end (no resume), its instances leave their groups by a view "
                "change at once (reason `disconnected`). With token authentication, the "
                "user's tokens issued (`iat`) at or before the call are refused from then on "
                "(`token_revoked`, at hello and refresh), also after a restart; a token issued "
                "after it is accepted. The SDKs do not reconnect with the old token. The key "
                "must reach every group (`*`). A user with no connection is answered too (its "
                "tokens are revoked all the same).",
                _ok("Disconnection", "its connections are closed, its tokens revoked"),
                [USER_PARAM], ("400", "401", "403", "429", "503")),
                None, "unavailable: shutting down, or the revocation could not be stored "
                      "(nothing was closed; try again)")},
            f"{PREFIX}/openapi.json": {"get": {
                "operationId": "getOpenAPI", "summary": "This document (no key needed)",
                "security": [],
                "responses": {"200": {"description": "the OpenAPI 3.1 document",
                                      "content": {"application/json": {
                                          "schema": {"type": "object"}}}}}}},
        },
        "components": {
            "schemas": {**_with_json_values(schemas["$defs"]), "JsonValue": JSON_VALUE},
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "an API key's secret (`--api-key NAME=SECRET`, `[[api.keys]]`)"}},
        },
    }


def _with_json_values(defs: dict[str, Any]) -> dict[str, Any]:
    """The models' schemas, with a publish's `payload` as a `JsonValue` (pydantic says `{}`:
    any value, which would promise integers the edge refuses, G12)."""
    payload = defs["PublishRequest"]["properties"]["payload"]
    defs["PublishRequest"]["properties"]["payload"] = {
        "$ref": "#/components/schemas/JsonValue", "description": payload["description"]}
    return defs


def render_json(doc: dict[str, Any] | None = None) -> str:
    return orjson.dumps(doc if doc is not None else document(),
                        option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


def render_markdown(doc: dict[str, Any] | None = None) -> str:
    """The generated part of docs/api.md: the operations, then the document itself."""
    doc = doc if doc is not None else document()
    lines = [BEGIN, "", "| method, path | operation | parameters | answers |",
             "|---|---|---|---|"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            params = ", ".join(f"`{p['name']}`" for p in op.get("parameters", ())) or "-"
            answers = ", ".join(sorted(op["responses"]))
            lines.append(f"| `{method.upper()} {path}` | {op['summary']} | {params} | "
                         f"{answers} |")
    lines += ["", "The OpenAPI 3.1 document, as `GET /api/v1/openapi.json` serves it:", "",
              "```json", render_json(doc).rstrip("\n"), "```", "", END]
    return "\n".join(lines) + "\n"


def write_docs(path: Path) -> bool:
    """Put the generated part into `path` between the markers; True if it changed."""
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END) + 1
    new = text[:start] + render_markdown() + text[end:]
    if new == text:
        return False
    path.write_text(new)
    return True


def generated_part(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END) + 1
    return text[start:end]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m notify.api.openapi", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write-docs", metavar="MD", type=Path,
                   help="update the generated part of this Markdown file (docs/api.md)")
    a = p.parse_args(argv)
    if a.write_docs is not None:
        print("updated" if write_docs(a.write_docs) else "up to date", a.write_docs)
    else:
        sys.stdout.write(render_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["MAX_LIMIT", "MAX_MEMBER", "MEMBER_PATTERN", "PREFIX", "QUERY", "USER_PATTERN",
           "document", "render_json", "render_markdown"]
