"""Session-wide checks for every test folder.

Schema (DESIGN §3): every frame any in-process `NotifyServer` sends during the session is checked
against docs/schema/protocol.schema.json (tests/schema_check.py hooks the server's socket
writes). A test during which the server sent a frame the schema refuses fails, whichever client
read the frame. The hook cannot pass by seeing nothing: a test in which a client connected to a
server must have had frames checked, and so must the session as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.schema_check import CHECK


@pytest.fixture(scope="session", autouse=True)
def _schema_hook() -> Iterator[None]:
    CHECK.install()
    yield
    CHECK.uninstall()
    if CHECK.connections:
        assert CHECK.frames > 0, "clients connected to servers, but the schema hook saw no frame"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if CHECK.connections:
        kinds = ", ".join(f"{t} {n}" for t, n in CHECK.by_type.most_common())
        terminalreporter.write_line(
            f"schema: {CHECK.frames} server frames in {CHECK.messages} messages on "
            f"{CHECK.connections} connections checked against docs/schema ({kinds})")


@pytest.fixture(autouse=True)
def server_frames_match_schema() -> Iterator[None]:
    frames, received, failed = CHECK.frames, CHECK.received(), len(CHECK.failures)
    yield
    bad = CHECK.failures[failed:]
    if bad:
        pytest.fail(f"{len(bad)} server frame(s) do not match docs/schema/protocol.schema.json:"
                    "\n" + "\n".join(bad[:10]), pytrace=False)
    # Every frame a server receives is answered by at least one (a `welcome`, an `error`...)
    # on the connection, unless it closes: so a test that sent frames must have seen some.
    if CHECK.received() > received and CHECK.frames == frames:
        pytest.fail("clients sent the server frames during this test, but the schema hook saw "
                    "none go out: is it still hooked where the server writes?", pytrace=False)
