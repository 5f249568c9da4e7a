"""A 401's challenge names the resource metadata at a URL a client can follow (RFC 9728)."""

from __future__ import annotations

from app.api.errors import ApiError
from app.auth.guard import Gate, metadata_url

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def test_the_metadata_url_is_the_public_one_or_the_requests_own() -> None:
    assert metadata_url("https://chat.example/", "http", "10.0.0.5:8000") == (
        "https://chat.example" + WELL_KNOWN
    )
    assert metadata_url(None, "http", "127.0.0.1:8000") == "http://127.0.0.1:8000" + WELL_KNOWN


def test_only_a_401s_challenge_is_located() -> None:
    refused = Gate.located(
        ApiError(
            401,
            "missing_credentials",
            "no key",
            headers={"WWW-Authenticate": (f'Bearer resource_metadata="{WELL_KNOWN}"')},
        ),
        "https://chat.example" + WELL_KNOWN,
    )
    assert refused.headers == {
        "WWW-Authenticate": f'Bearer resource_metadata="https://chat.example{WELL_KNOWN}"'
    }
    limited = Gate.located(ApiError(429, "rate_limited", "slow down"), "https://x" + WELL_KNOWN)
    assert not limited.headers
