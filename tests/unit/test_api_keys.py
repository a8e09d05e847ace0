"""The server API's keys (notify/api/keys.py): found by their secret whichever their place,
given as a secret or its SHA-256; scopes and group globs; the flag's form; the rate bucket."""

from __future__ import annotations

import hashlib

import pytest

from notify.api.keys import ApiKey, Bucket, Keyring, Scope, parse_flag


def test_a_key_is_found_by_its_secret_or_its_sha256_and_only_by_it() -> None:
    a = ApiKey.of("a", secret="alpha-secret")
    b = ApiKey.of("b", sha256=hashlib.sha256(b"beta-secret").hexdigest(), scopes=["read"],
                  groups=["doc-*"])
    ring = Keyring([a, b])
    assert ring.find("alpha-secret") is a and ring.find("beta-secret") is b
    for wrong in ("", "alpha", "alpha-secret ", "ALPHA-SECRET", hashlib.sha256(
            b"beta-secret").hexdigest()):
        assert ring.find(wrong) is None
    assert "alpha-secret" not in repr(a) and a.digest.hex() not in repr(a)


def test_scopes_and_globs() -> None:
    k = ApiKey.of("k", secret="s", scopes=["read"], groups=["doc-*", "team/?"])
    assert k.allows(Scope.READ) and not k.allows(Scope.PUBLISH) and not k.allows(Scope.ADMIN)
    assert k.reaches("doc-1") and k.reaches("team/a")
    assert not k.reaches("team/ab") and not k.reaches("Doc-1") and not k.reaches("chat")
    everything = ApiKey.of("e", secret="t")
    assert all(everything.allows(s) for s in Scope) and everything.reaches("any/thing")


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="one of secret, sha256"):
        ApiKey.of("k")
    with pytest.raises(ValueError, match="one of secret, sha256"):
        ApiKey.of("k", secret="s", sha256="00" * 32)
    with pytest.raises(ValueError):
        ApiKey.of("k", secret="s", scopes=["write"])
    with pytest.raises(ValueError, match="unique"):
        Keyring([ApiKey.of("k", secret="s"), ApiKey.of("k", secret="t")])
    with pytest.raises(ValueError, match="same secret"):
        Keyring([ApiKey.of("k", secret="s"), ApiKey.of("l", secret="s")])


def test_the_flag_is_name_equals_secret() -> None:
    assert parse_flag("app=s3=cret") == ("app", "s3=cret")
    for bad in ("app", "=secret", "app="):
        with pytest.raises(ValueError, match="NAME=SECRET"):
            parse_flag(bad)


def test_bucket_spends_a_burst_then_refills_at_its_rate() -> None:
    b = Bucket(rate=2.0, burst=3.0, tokens=3.0, at=0.0)
    assert [b.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(0.0) == pytest.approx(0.5)
    assert b.take(0.5) == 0.0  # one token back after 1/rate
    assert b.take(10.0) == 0.0 and b.tokens == pytest.approx(2.0)  # capped at the burst
