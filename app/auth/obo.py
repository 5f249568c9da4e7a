"""On-behalf-of tokens: a JWT a calling agent presents, naming the end user it acts for,
verified with a configured key (HS256 secret, or an RS256/ES256 public key or JWKS file),
its issuer and audience checked, its expiry enforced with a small clock skew."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from agents.errors import ConfigError

ASYMMETRIC = ["RS256", "ES256"]


class TokenRefused(Exception):
    """A token that does not verify; the message says why, without the token."""


@dataclass(frozen=True)
class OboClaims:
    """What a verified token says."""

    user: str
    agent: str | None
    scopes: frozenset[str] | None  # None: the token names none


class OboVerifier:
    """Verifies on-behalf-of tokens.

    Args:
        issuer: The ``iss`` every token must carry.
        audience: The ``aud`` every token must name (this service).
        secret: An HS256 shared secret; or
        public_key: a PEM public key (RS256 or ES256); or
        jwks: a JWKS document (keys chosen by ``kid``).
        leeway_s: Clock skew allowed on ``exp``, ``nbf`` and ``iat``.
    """

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        secret: str | None = None,
        public_key: str | None = None,
        jwks: dict[str, Any] | None = None,
        leeway_s: float = 30,
    ) -> None:
        self.issuer, self.audience, self.leeway = issuer, audience, leeway_s
        self._secret, self._public = secret, public_key
        self._jwks = jwt.PyJWKSet.from_dict(jwks) if jwks is not None else None

    def verify(self, token: str) -> OboClaims:
        """The token's claims once its signature, issuer, audience and times check.

        Raises:
            TokenRefused: saying what did not check.
        """
        try:
            key, algorithms = self._key(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRefused("the on-behalf-of token has expired") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused("the on-behalf-of token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise TokenRefused("the on-behalf-of token is from an issuer not trusted") from None
        except jwt.InvalidSignatureError:
            raise TokenRefused("the on-behalf-of token's signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"the on-behalf-of token is not valid ({exc})") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject.strip():  # "" would be a user of its own
            raise TokenRefused(
                "the on-behalf-of token's sub names no user: issue it with the user's id as sub"
            )
        act = claims.get("act")
        agent = (act.get("sub") if isinstance(act, dict) else None) or claims.get("azp")
        scope = claims.get("scope")
        scopes = frozenset(str(scope).split()) if scope is not None else None
        return OboClaims(subject, str(agent) if agent else None, scopes)

    def _key(self, token: str) -> tuple[Any, list[str]]:
        if self._secret is not None:
            return self._secret, ["HS256"]
        if self._public is not None:
            return self._public, ASYMMETRIC
        assert self._jwks is not None
        kid = jwt.get_unverified_header(token).get("kid")
        for key in self._jwks.keys:
            if kid is None or key.key_id == kid:
                return key.key, ASYMMETRIC
        raise TokenRefused("the on-behalf-of token names a key (kid) not in the JWKS")


def load_verifier(
    *,
    issuer: str | None,
    audience: str | None,
    secret: str | None,
    public_key_file: Path | None,
    jwks_file: Path | None,
    leeway_s: float,
) -> OboVerifier | None:
    """The verifier the settings describe, or None when on-behalf-of is not configured.

    Raises:
        ConfigError: a key without issuer and audience, several keys, or a file missing.
    """
    given = [n for n, v in (("SECRET", secret), ("PUBLIC_KEY_FILE", public_key_file),
                            ("JWKS_FILE", jwks_file)) if v]  # fmt: skip
    if not given:
        return None
    if len(given) > 1:
        raise ConfigError(
            "on-behalf-of: give one key, not " + " and ".join(f"SKILLDESK_OBO_{n}" for n in given)
        )
    if not issuer or not audience:
        raise ConfigError(
            "on-behalf-of tokens need an issuer and an audience to check",
            fix="set SKILLDESK_OBO_ISSUER and SKILLDESK_OBO_AUDIENCE",
        )
    public = jwks = None
    for path, name in ((public_key_file, "PUBLIC_KEY_FILE"), (jwks_file, "JWKS_FILE")):
        if path is not None and not path.is_file():
            raise ConfigError(f"SKILLDESK_OBO_{name}: {path} does not exist")
    if public_key_file is not None:
        public = public_key_file.read_text(encoding="utf-8")
    if jwks_file is not None:
        jwks = json.loads(jwks_file.read_text(encoding="utf-8"))
    return OboVerifier(
        issuer=issuer,
        audience=audience,
        secret=secret,
        public_key=public,
        jwks=jwks,
        leeway_s=leeway_s,
    )
