"""Authentication and authorisation over real sockets (docs/security.md, G12).

Each refusal has its stable code, and the bystanders — bob, an authenticated member of `g` —
notice nothing: no view change, no stray frame, and the next message still reaches them.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from dataclasses import dataclass

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from notify.core.errors import CloseCode
from notify.server.app import NotifyServer
from notify.server.auth import TokenVerifier
from tests.integration.conftest import Raw
from tests.security.conftest import (
    OTHER_SECRET,
    Clock,
    MakeAuthServer,
    OpenAuthed,
    token,
)

_markers = itertools.count(1)
ALL = {"*": ["*"]}


@dataclass
class Scene:
    server: NotifyServer
    alice: Raw  # a member of g that publishes markers
    bob: Raw  # a member of g that must notice nothing
    view: int


@pytest.fixture
async def scene(make_auth_server: MakeAuthServer, open_authed: OpenAuthed) -> Scene:
    srv = await make_auth_server()
    alice = await open_authed(srv, token("alice", ALL))
    await alice.join("g")
    alice.auto_flush = True
    bob = await open_authed(srv, token("bob", ALL))
    install, _ = await asyncio.gather(bob.join("g"), alice.expect("view_install"))
    bob.auto_flush = True
    return Scene(srv, alice, bob, install["view"])


async def assert_unaffected(s: Scene) -> None:
    """A marker from alice is bob's next frame: nothing else reached him, the view is the same."""
    n = next(_markers)
    await s.alice.send({"type": "publish", "req": f"m{n}", "group": "g", "id": f"m{n}",
                        "view": s.view, "payload": f"marker {n}"})
    got = await s.bob.recv()
    assert (got["type"], got["payload"], got["sender"]) == ("deliver", f"marker {n}", "alice")
    assert not s.bob.buffer
    assert s.server.hub.groups["g"].view.version == s.view
    assert s.server.hub.groups["g"].view.members == ("alice", "bob")


async def refused(raw: Raw) -> tuple[str, int | None]:
    err = await raw.expect("error")
    return err["code"], await raw.close_code()


# -- authentication ---------------------------------------------------------------------------


async def test_no_token_is_refused_token_required(scene: Scene, open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, None, member="mallory", expect_welcome=False)
    assert await refused(r) == ("token_required", CloseCode.UNAUTHORIZED)
    await assert_unaffected(scene)


async def test_expired_token_is_refused_token_expired(scene: Scene,
                                                      open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("mallory", ALL, ttl=-60), expect_welcome=False)
    assert await refused(r) == ("token_expired", CloseCode.UNAUTHORIZED)
    await assert_unaffected(scene)


async def test_token_signed_with_another_key_is_refused_token_invalid(
        scene: Scene, open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("bob", ALL, key=OTHER_SECRET),
                          expect_welcome=False)
    assert await refused(r) == ("token_invalid", CloseCode.UNAUTHORIZED)
    await assert_unaffected(scene)


@pytest.mark.parametrize("bad", ["not-a-jwt", "a.b.c", ""])
async def test_garbage_and_unsigned_tokens_are_refused(scene: Scene, open_authed: OpenAuthed,
                                                       bad: str) -> None:
    r = await open_authed(scene.server, bad or None, expect_welcome=False)
    code, close = await refused(r)
    assert (code, close) == ("token_required" if not bad else "token_invalid",
                             CloseCode.UNAUTHORIZED)
    await assert_unaffected(scene)


async def test_alg_none_token_is_refused(scene: Scene, open_authed: OpenAuthed) -> None:
    def b64(d: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    forged = f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64({'sub': 'bob', 'exp': 2**40})}."
    r = await open_authed(scene.server, forged, expect_welcome=False)
    assert await refused(r) == ("token_invalid", CloseCode.UNAUTHORIZED)
    await assert_unaffected(scene)


async def test_member_field_that_disagrees_with_the_token_is_refused(
        scene: Scene, open_authed: OpenAuthed) -> None:
    # mallory's valid token, claiming to be bob: refused, and bob is not replaced
    r = await open_authed(scene.server, token("mallory", ALL), member="bob",
                          expect_welcome=False)
    assert await refused(r) == ("member_mismatch", CloseCode.UNAUTHORIZED)
    await assert_unaffected(scene)
    # the same token with the right (or no) member field is welcome, as mallory
    ok = await open_authed(scene.server, token("mallory", ALL), member="mallory")
    assert ok.member == "mallory"


async def test_token_for_another_member_cannot_take_over_its_session(
        scene: Scene, open_authed: OpenAuthed) -> None:
    """mallory learned bob's session id: with her own token she gets her own session, bob's
    connection and membership stay as they were (no 4002, no view change)."""
    r = await open_authed(scene.server, token("mallory", ALL), resume_session=scene.bob.session)
    assert r.member == "mallory" and r.session != scene.bob.session
    await assert_unaffected(scene)
    assert scene.bob.ws.close_code is None


async def test_the_member_id_is_the_tokens_subject(scene: Scene,
                                                   open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("carol", ALL))
    assert r.member == "carol"


# -- expiry and refresh -----------------------------------------------------------------------


async def test_expired_session_is_closed_4005_and_a_refresh_keeps_it_open(
        scene: Scene, open_authed: OpenAuthed, clock: Clock) -> None:
    now = clock()
    short = await open_authed(scene.server, token("carol", ALL, ttl=60, now=now))
    refreshed = await open_authed(scene.server, token("dave", ALL, ttl=60, now=now))
    await refreshed.send({"type": "refresh", "token": token("dave", ALL, ttl=600, now=now)})
    ok = await refreshed.expect("refreshed")
    assert ok["expires"] == pytest.approx(now + 600, abs=2)
    clock.advance(120)  # past the first tokens' exp
    assert await short.close_code() == CloseCode.TOKEN_EXPIRED
    # dave's connection still works
    await refreshed.send({"type": "join", "req": "j", "group": "solo"})
    assert (await refreshed.expect("view_install"))["members"] == ["dave"]
    await assert_unaffected(scene)


async def test_refresh_with_another_members_token_is_refused_and_changes_nothing(
        scene: Scene, open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("carol", {"c-*": ["join"]}))
    await r.send({"type": "refresh", "token": token("bob", ALL)})
    err = await r.expect("error")
    assert err["code"] == "member_mismatch"
    await r.send({"type": "refresh", "token": token("carol", ALL, key=OTHER_SECRET)})
    assert (await r.expect("error"))["code"] == "token_invalid"
    await r.send({"type": "refresh", "token": token("carol", ALL, ttl=-5)})
    assert (await r.expect("error"))["code"] == "token_expired"
    # still carol with her old grants: g is not hers to join
    await r.send({"type": "join", "req": "j", "group": "g"})
    err = await r.expect("error")
    assert (err["code"], err["req"]) == ("forbidden", "j")
    await assert_unaffected(scene)


# -- authorisation ----------------------------------------------------------------------------


async def test_join_outside_granted_groups_is_forbidden(scene: Scene,
                                                        open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("carol", {"doc-*": ["join", "publish"]}))
    await r.send({"type": "join", "req": "j1", "group": "g"})
    err = await r.expect("error")
    assert (err["code"], err["req"]) == ("forbidden", "j1")
    await assert_unaffected(scene)
    await r.send({"type": "join", "req": "j2", "group": "doc-1"})  # granted by the glob
    assert (await r.expect("view_install"))["members"] == ["carol"]


async def test_publish_outside_granted_groups_is_rejected_forbidden(
        scene: Scene, open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("carol", {"g": ["join"]}))
    await r.send({"type": "publish", "req": "p1", "group": "g", "id": "x1", "view": scene.view,
                  "payload": "sneaky"})
    rej = await r.expect("rejected")
    assert (rej["code"], rej["id"]) == ("forbidden", "x1")
    assert scene.server.hub.groups["g"].topic.head == 0
    await assert_unaffected(scene)


async def test_atomic_publish_needs_publish_atomic_and_state_needs_state(
        scene: Scene, open_authed: OpenAuthed) -> None:
    r = await open_authed(scene.server, token("carol", {"g*": ["join", "publish"]}))
    await r.send({"type": "join", "req": "j1", "group": "g2", "want_state": True})
    assert (await r.expect("error"))["code"] == "forbidden"
    await r.send({"type": "join", "req": "j2", "group": "g2"})
    install = await r.expect("view_install")
    await r.send({"type": "publish", "req": "p", "group": "g2", "id": "a1",
                  "view": install["view"], "atomic": True, "payload": 1})
    assert (await r.expect("rejected"))["code"] == "forbidden"
    await r.send({"type": "publish", "req": "p", "group": "g2", "id": "f1",
                  "view": install["view"], "payload": 1})
    assert (await r.expect("published"))["id"] == "f1"
    await assert_unaffected(scene)


async def test_policy_file_grants_by_member(make_auth_server: MakeAuthServer,
                                            open_authed: OpenAuthed, tmp_path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[members."bot-*"]\n"metrics" = ["join"]\n'
                      '[members."*"]\n"lobby" = ["join", "publish"]\n')
    srv = await make_auth_server(verifier=TokenVerifier.from_files(
        secret="x" * 40, policy_file=str(policy)))
    bot = await open_authed(srv, token("bot-1", key="x" * 40))  # no groups claim
    for group, code in (("metrics", None), ("lobby", None), ("secret", "forbidden")):
        await bot.send({"type": "join", "req": group, "group": group})
        f = await bot.expect(lambda f: f["type"] in ("error", "view_install"))
        assert (f.get("code") if f["type"] == "error" else None) == code, f


# -- asymmetric keys --------------------------------------------------------------------------


def _pem_public(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


async def test_rs256_public_key_and_algorithm_confusion(make_auth_server: MakeAuthServer,
                                                        open_authed: OpenAuthed) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = _pem_public(key)
    srv = await make_auth_server(verifier=TokenVerifier(public_key=pem))
    ok = await open_authed(srv, jwt.encode({"sub": "alice", "exp": 2**40}, key, "RS256"))
    assert ok.member == "alice"
    # HS256 "signed" with the public key as the secret: the classic confusion attack
    import hmac

    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(b'{"sub":"bob","exp":1099511627776}').rstrip(b"=")
    sig = base64.urlsafe_b64encode(hmac.digest(pem.encode(), header + b"." + body,
                                               "sha256")).rstrip(b"=")
    r = await open_authed(srv, (header + b"." + body + b"." + sig).decode(),
                          expect_welcome=False)
    assert await refused(r) == ("token_invalid", CloseCode.UNAUTHORIZED)


async def test_es256_jwks_picks_the_key_by_kid(make_auth_server: MakeAuthServer,
                                               open_authed: OpenAuthed) -> None:
    k1, k2 = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    jwks = {"keys": []}
    for kid, k in (("k1", k1), ("k2", k2)):
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(k.public_key()))
        jwks["keys"].append({**jwk, "kid": kid, "alg": "ES256", "use": "sig"})
    srv = await make_auth_server(verifier=TokenVerifier(jwks=jwks))
    for kid, k in (("k1", k1), ("k2", k2)):
        r = await open_authed(srv, jwt.encode({"sub": f"m-{kid}", "exp": 2**40}, k, "ES256",
                                              headers={"kid": kid}))
        assert r.member == f"m-{kid}"
    # signed by k2 but labelled k1: the signature does not verify
    r = await open_authed(srv, jwt.encode({"sub": "x", "exp": 2**40}, k2, "ES256",
                                          headers={"kid": "k1"}), expect_welcome=False)
    assert await refused(r) == ("token_invalid", CloseCode.UNAUTHORIZED)
    r = await open_authed(srv, jwt.encode({"sub": "x", "exp": 2**40}, k2, "ES256",
                                          headers={"kid": "nope"}), expect_welcome=False)
    assert await refused(r) == ("token_invalid", CloseCode.UNAUTHORIZED)


async def test_audience_and_issuer_are_enforced_when_configured(
        make_auth_server: MakeAuthServer, open_authed: OpenAuthed) -> None:
    srv = await make_auth_server(verifier=TokenVerifier(secret="y" * 40, audience="notify",
                                                        issuer="https://idp"))
    good = token("a", key="y" * 40, aud="notify", iss="https://idp")
    assert (await open_authed(srv, good)).member == "a"
    for bad in (token("a", key="y" * 40, aud="other", iss="https://idp"),
                token("a", key="y" * 40, aud="notify", iss="https://evil"),
                token("a", key="y" * 40)):
        r = await open_authed(srv, bad, expect_welcome=False)
        assert await refused(r) == ("token_invalid", CloseCode.UNAUTHORIZED)


def test_verifier_refuses_weak_or_ambiguous_keys() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TokenVerifier(secret="short")
    with pytest.raises(ValueError, match="exactly one"):
        TokenVerifier(secret="z" * 40, jwks={"keys": []})
    with pytest.raises(ValueError, match="exactly one"):
        TokenVerifier()
