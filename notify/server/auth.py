"""Token verification at the edge: a JWT in `hello` (or `refresh`) → a core `Identity`.

The adapter owns keys and the clock; the core only sees the `Identity` (notify/core/auth.py).
Signatures are checked by PyJWT against exactly one configured kind of key: an HS256 shared
secret, or an RS256/ES256 public key (PEM), or a JWKS file (keys picked by `kid`). The
algorithms accepted are fixed by that key, never by the token's header, so `alg: none` and the
HS256-with-a-public-key confusion are refused. `exp` and `nbf` are checked against the `now` the
server is fed (with `leeway` seconds of clock skew), which is what lets tests control time.
A user's tokens issued (`iat`) no later than its revocation (`revoked`, the server API's
disconnect) are refused `token_revoked`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from jwt.algorithms import get_default_algorithms

from notify.core.auth import ClaimsError, Identity, Policy, identity_from_claims
from notify.core.errors import ErrorCode


class AuthFailure(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class _Key:
    key: Any
    algorithms: tuple[str, ...]


class TokenVerifier:
    """Verifies tokens; build it with `from_files` or directly with one kind of key."""

    def __init__(self, *, secret: str | None = None, public_key: str | None = None,
                 jwks: Mapping[str, Any] | None = None, algorithms: tuple[str, ...] = (),
                 audience: str | None = None, issuer: str | None = None, leeway: float = 0.0,
                 claim: str = "groups", policy: Policy | None = None) -> None:
        if sum(x is not None for x in (secret, public_key, jwks)) != 1:
            raise ValueError("configure exactly one of: an HS256 secret, a public key, a JWKS")
        self.audience, self.issuer, self.leeway = audience, issuer, leeway
        self.claim, self.policy = claim, policy
        #: user -> when its tokens were revoked (the server API's disconnect): a token of the
        #: user issued (`iat`) at or before it is refused `token_revoked`, and so is one of
        #: the user without `iat` (nothing says it is newer). The server fills it from the log.
        self.revoked: dict[str, float] = {}
        self._keys: dict[str | None, _Key] = {}
        if secret is not None:
            if len(secret.encode()) < 32:
                raise ValueError("an HS256 secret must be at least 32 bytes (RFC 7518 §3.2)")
            self._keys[None] = _Key(secret, algorithms or ("HS256",))
            self.kind = "hs256"
        elif public_key is not None:
            algs = algorithms or ("RS256", "ES256")
            if any(a.startswith("HS") for a in algs):
                raise ValueError("a public key verifies asymmetric algorithms only")
            self._keys[None] = _load_public(public_key, algs)
            self.kind = "public_key"
        else:
            assert jwks is not None
            for jwk in jwks.get("keys", []):
                k = jwt.PyJWK.from_dict(jwk)
                alg = jwk.get("alg") or k.algorithm_name
                if alg.startswith("HS") or alg == "none":
                    raise ValueError("a JWKS for notify holds public keys only")
                self._keys[jwk.get("kid")] = _Key(k.key, (alg,))
            if not self._keys:
                raise ValueError("the JWKS has no keys")
            self.kind = "jwks"

    @classmethod
    def from_files(cls, *, secret: str | None = None, public_key_file: str | None = None,
                   jwks_file: str | None = None, policy_file: str | None = None,
                   **kw: Any) -> TokenVerifier:
        public = Path(public_key_file).read_text() if public_key_file else None
        jwks = json.loads(Path(jwks_file).read_text()) if jwks_file else None
        policy = load_policy(policy_file) if policy_file else None
        return cls(secret=secret, public_key=public, jwks=jwks, policy=policy, **kw)

    def verify(self, token: str | None, now: float) -> Identity:
        """The identity `token` proves at `now`; raises AuthFailure with a stable code."""
        if not token:
            raise AuthFailure(ErrorCode.TOKEN_REQUIRED, "this server requires a token in hello")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthFailure(ErrorCode.TOKEN_INVALID, "not a JWT") from None
        key = self._keys.get(header.get("kid")) if self.kind == "jwks" else self._keys[None]
        if key is None and self.kind == "jwks" and len(self._keys) == 1:
            key = next(iter(self._keys.values()))
        if key is None:
            raise AuthFailure(ErrorCode.TOKEN_INVALID, "unknown key id")
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=list(key.algorithms), audience=self.audience,
                issuer=self.issuer,
                # exp/nbf are checked below against the server's clock, not PyJWT's
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                         "verify_aud": self.audience is not None,
                         "require": ["sub"]})
        except jwt.PyJWTError as e:
            raise AuthFailure(ErrorCode.TOKEN_INVALID, f"token refused: {e}") from None
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if isinstance(exp, int | float) and not isinstance(exp, bool) and \
                now >= exp + self.leeway:
            raise AuthFailure(ErrorCode.TOKEN_EXPIRED, "the token has expired")
        if isinstance(nbf, int | float) and not isinstance(nbf, bool) and \
                now < nbf - self.leeway:
            raise AuthFailure(ErrorCode.TOKEN_INVALID, "the token is not valid yet (nbf)")
        try:
            identity = identity_from_claims(claims, claim=self.claim, policy=self.policy)
        except ClaimsError as e:
            raise AuthFailure(ErrorCode.TOKEN_INVALID, str(e)) from None
        revoked = self.revoked.get(identity.member) if self.revoked else None
        if revoked is not None:
            iat = claims.get("iat")
            if not isinstance(iat, int | float) or isinstance(iat, bool) or iat <= revoked:
                raise AuthFailure(ErrorCode.TOKEN_REVOKED, (
                    f"the tokens of {identity.member!r} issued until {revoked:.3f} (Unix time) "
                    f"were revoked, and this one's iat is {iat!r}: get a new token"))
        if identity.expires is not None and self.leeway:
            identity = Identity(identity.member, identity.grants, identity.expires + self.leeway)
        return identity


def _load_public(pem: str, algs: tuple[str, ...]) -> _Key:
    """The key, with the algorithms of `algs` that fit it (an RSA key never verifies ES256)."""
    algorithms = get_default_algorithms()
    key: Any = None
    fits: list[str] = []
    errors = []
    for alg in algs:
        try:
            key = algorithms[alg].prepare_key(pem)
            fits.append(alg)
        except Exception as e:  # the wrong family for this key
            errors.append(f"{alg}: {e}")
    if not fits:
        raise ValueError(f"cannot use the public key with {algs}: {'; '.join(errors)}")
    return _Key(key, tuple(fits))


def load_policy(path: str) -> Policy:
    """A policy file: TOML (`[members."bot-*"]` tables of `"group glob" = [perms]`) or JSON."""
    text = Path(path).read_text()
    if path.endswith(".json"):
        data = json.loads(text)
    else:
        import tomllib

        data = tomllib.loads(text)
    return Policy.parse(data.get("members", data))


__all__ = ["AuthFailure", "TokenVerifier", "load_policy"]
