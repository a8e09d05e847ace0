"""The sans-I/O side of authentication: grants, policies, and the hub's identity, expiry,
hello-timeout and rate-limit rules, driven with a simulated clock (no sockets)."""

from __future__ import annotations

import itertools

import pytest

from notify.core import CoreConfig, Hub, Limits, Timeouts
from notify.core.actions import Close, Error, Rejected, Send, Welcome
from notify.core.auth import (
    ALLOW_ALL,
    ClaimsError,
    Grants,
    Identity,
    Perm,
    Policy,
    identity_from_claims,
)
from notify.core.errors import CloseCode
from notify.core.events import Hello, Join, Order, Publish


def test_grants_union_of_matching_globs() -> None:
    g = Grants.parse({"doc-*": ["join", "publish"], "doc-42": ["*"], "lobby": "join"})
    assert g.allows("doc-1", Perm.JOIN) and g.allows("doc-1", Perm.PUBLISH)
    assert not g.allows("doc-1", Perm.PUBLISH_ATOMIC) and not g.allows("doc-1", Perm.STATE)
    assert g.allows("doc-42", Perm.STATE)
    assert g.allows("lobby", Perm.JOIN) and not g.allows("lobby", Perm.PUBLISH)
    assert not g.allows("docs", Perm.JOIN) and not g.allows("other", Perm.JOIN)
    assert not Grants().allows("anything", Perm.JOIN)
    assert ALLOW_ALL.allows("anything", Perm.STATE)


def test_grants_remember_answers_within_a_bound() -> None:
    """A session that publishes to ever new group names cannot grow the memo without bound,
    and a remembered answer is the same answer."""
    g = Grants.parse({"doc-*": ["publish"]})
    for i in range(5000):
        assert g.allows(f"doc-{i}", Perm.PUBLISH) and not g.allows(f"x-{i}", Perm.PUBLISH)
        assert len(g._memo) <= 1024
    assert g.allows("doc-4999", Perm.PUBLISH) and not g.allows("x-4999", Perm.PUBLISH)
    assert g == Grants.parse({"doc-*": ["publish"]})  # the memo is not part of what it is


@pytest.mark.parametrize("bad", [["join"], {"g": ["fly"]}, {"g": 3}, {"": ["join"]}])
def test_malformed_grants_are_refused(bad: object) -> None:
    with pytest.raises(ClaimsError):
        Grants.parse(bad)  # type: ignore[arg-type]


def test_identity_from_claims() -> None:
    i = identity_from_claims({"sub": "alice", "exp": 100, "groups": {"a*": ["join"]}})
    assert (i.member, i.expires) == ("alice", 100.0)
    assert i.grants.allows("ab", Perm.JOIN) and not i.grants.allows("b", Perm.JOIN)
    assert identity_from_claims({"sub": "bob"}).grants is ALLOW_ALL  # no claim, no policy
    policy = Policy.parse({"bot-*": {"metrics": ["join"]}, "*": {"lobby": ["join"]}})
    bot = identity_from_claims({"sub": "bot-1"}, policy=policy)
    assert bot.grants.allows("metrics", Perm.JOIN) and bot.grants.allows("lobby", Perm.JOIN)
    assert not bot.grants.allows("secret", Perm.JOIN)
    both = identity_from_claims({"sub": "bot-2", "perms": {"x": ["publish"]}}, claim="perms",
                                policy=policy)
    assert both.grants.allows("x", Perm.PUBLISH) and both.grants.allows("metrics", Perm.JOIN)
    for bad in ({}, {"sub": ""}, {"sub": 3}, {"sub": "a", "exp": "soon"}, {"sub": "a",
                                                                          "exp": True}):
        with pytest.raises(ClaimsError):
            identity_from_claims(bad)


def make_hub(**limits: float) -> Hub:
    ids = itertools.count(1)
    return Hub(CoreConfig(Timeouts(hello_timeout=10.0), Limits(**limits)),  # type: ignore[arg-type]
               new_token=lambda: f"s{next(ids)}", epoch=1)


def sends(actions: list[object]) -> list[object]:
    return [a.frame for a in actions if isinstance(a, Send)]


def test_hub_member_is_the_identity_and_a_disagreeing_member_is_refused() -> None:
    hub = make_hub()
    hub.opened(1, 0.0)
    out = hub.hello(1, Hello(1, "bob"), 0.0, Identity("alice", ALLOW_ALL, 100.0))
    assert [type(f) for f in sends(out)] == [Error]
    assert sends(out)[0].code == "member_mismatch"  # type: ignore[attr-defined]
    assert Close(1, CloseCode.UNAUTHORIZED, "member_mismatch") in out
    hub.opened(2, 0.0)
    out = hub.hello(2, Hello(1, None), 0.0, Identity("alice", ALLOW_ALL, 100.0))
    welcome = sends(out)[0]
    assert isinstance(welcome, Welcome) and welcome.member == "alice"


def test_hub_closes_at_token_expiry_unless_refreshed() -> None:
    hub = make_hub()
    for conn, member in ((1, "a"), (2, "b")):
        hub.opened(conn, 0.0)
        hub.hello(conn, Hello(1), 0.0, Identity(member, ALLOW_ALL, 50.0))
    assert hub.next_deadline() == 50.0
    assert hub.refresh(2, Identity("b", ALLOW_ALL, 500.0), 40.0) == []
    assert sends(hub.refresh(2, Identity("a", ALLOW_ALL, 900.0), 41.0))[0].code == \
        "member_mismatch"  # type: ignore[attr-defined]
    assert [a for a in hub.tick(49.9) if isinstance(a, Close)] == []
    assert [a for a in hub.tick(50.0) if isinstance(a, Close)] == \
        [Close(1, CloseCode.TOKEN_EXPIRED, "token expired; refresh it")]
    assert [a.conn for a in hub.tick(500.0) if isinstance(a, Close)] == [2]


def test_hub_hello_timeout_and_forbidden_join() -> None:
    hub = make_hub()
    hub.opened(1, 0.0)
    hub.opened(2, 0.0)
    hub.hello(2, Hello(1), 1.0, Identity("m", Grants.parse({"ok": ["join"]}), None))
    assert [a for a in hub.tick(9.0) if isinstance(a, Close)] == []
    assert [a for a in hub.tick(10.0) if isinstance(a, Close)] == \
        [Close(1, CloseCode.HELLO_TIMEOUT, "no hello in time")]
    err = sends(hub.handle(2, Join("r", "nope"), 11.0))[0]
    assert isinstance(err, Error) and (err.code, err.req) == ("forbidden", "r")
    assert "nope" not in hub.groups
    err = sends(hub.handle(2, Join("r2", "ok", want_state=True), 11.0))[0]
    assert isinstance(err, Error) and err.code == "forbidden"


def test_hub_hello_deadlines_close_only_the_due_and_leave_nothing_behind() -> None:
    """A connection waits for its hello in one table: a refused hello keeps it waiting, a
    successful one, a close or `trust` takes it out, and the deadline closes only those due."""
    hub = make_hub()
    for conn, t in ((1, 0.0), (2, 1.0), (3, 2.0), (4, 3.0), (5, 4.0)):
        hub.opened(conn, t)
    refused = sends(hub.handle(1, Hello(99, "a"), 0.5))  # a protocol it does not speak
    assert isinstance(refused[0], Error) and refused[0].code == "protocol_version"
    hub.handle(2, Hello(1, "b"), 1.5)  # a session: no deadline any more
    hub.closed(3, 2.5)  # gone before its deadline
    hub.trust(4, "api:backend")  # the host's own publisher never says hello
    assert hub.next_deadline() == 10.0
    assert [a.conn for a in hub.tick(12.0) if isinstance(a, Close)] == [1]
    assert hub.next_deadline() == 14.0
    assert [a.conn for a in hub.tick(14.0) if isinstance(a, Close)] == [5]
    assert hub.next_deadline() is None and hub.live_sessions() == 1
    with pytest.raises(ValueError):
        hub.trust(2, "api:other")  # a connection with a session cannot become trusted


def test_hub_token_bucket_refills_with_time() -> None:
    hub = make_hub(publish_rate=2.0, publish_burst=3)
    hub.opened(1, 0.0)
    hub.handle(1, Hello(1, "a"), 0.0)

    def codes(now: float, n: int) -> list[str]:
        out = []
        for i in range(n):
            f = sends(hub.handle(1, Publish(f"r{now}{i}", "g", f"{now}-{i}", 0, Order.FIFO, 1),
                                 now))[0]
            assert isinstance(f, Rejected)
            out.append(f.code)
        return out

    # the group does not exist: an allowed publish is `no_group`, a throttled one `rate_limited`
    assert codes(0.0, 4) == ["no_group"] * 3 + ["rate_limited"]
    assert codes(0.5, 2) == ["no_group", "rate_limited"]  # 0.5 s refilled one token
    assert codes(10.0, 4) == ["no_group"] * 3 + ["rate_limited"]  # never above the burst
