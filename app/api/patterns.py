"""What each pattern the API checks a value against allows, in words.

Pydantic says "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'": a client
should not have to read a regular expression to learn what a thread id may be. Keyed by the
pattern as its route or model declares it (the OpenAPI document states the same one); each
entry follows the field's name: "thread_id (path parameter) must be ...".
"""

from __future__ import annotations

from app.api.schemas.messages import BASE64, IMAGE_URL
from app.api.schemas.threads import THREAD_ID_PATTERN

IN_WORDS: dict[str, str] = {
    # As chat completions' X-Thread-Id says it (app/api/routes/chat.py).
    THREAD_ID_PATTERN: "must be 1–128 characters of letters, digits, '.', '_', ':' or '-', "
    "starting with a letter or digit",
    r"\S": "must not be blank",
    # A run's id (app/api/routes/runs.py): as `X-Run-Id` and `run_finished` give it.
    r"^[0-9a-f-]{36}$": "must be a run id: 36 characters, lowercase hex digits and '-' (a UUID)",
    # A run's id as feedback takes it (app/api/routes/feedback.py).
    r"^[A-Za-z0-9-]{1,64}$": "must be 1 to 64 characters: ASCII letters, digits and '-'",
    r"^att_[0-9a-f]{1,64}$": "must be an attachment id: 'att_' and 1 to 64 lowercase hex digits",
    r"^key_[0-9a-f]{12}$": "must be a key id: 'key_' and 12 lowercase hex digits",
    r"^[0-9a-f]{64}$": "must be 64 lowercase hex digits (a SHA-256)",
    IMAGE_URL: "must be an http://, https:// or gs:// URL, or a data:image/...;base64, URL "
    "with its base64 after the comma",
    f"^{BASE64}$": "must be base64: ASCII letters, digits, '+' and '/', padded with '=' to a "
    "multiple of 4 characters",
}


def in_words(pattern: object) -> str | None:
    """What a value matching ``pattern`` must be, after its name; None for a pattern not
    described here (pydantic's words are kept then)."""
    return IN_WORDS.get(pattern) if isinstance(pattern, str) else None
