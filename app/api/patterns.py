"""What each pattern the API checks a value against allows, in words.

Pydantic says "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'": a client
should not have to read a regular expression to learn what a thread id may be. Keyed by the
pattern (the routes declare theirs from here) (the OpenAPI document states the same one); each
entry follows the field's name: "thread_id (path parameter) must be ...".
"""

from __future__ import annotations

from app.api.schemas.messages import BASE64, IMAGE_URL
from app.api.schemas.threads import THREAD_ID_PATTERN
from app.auth.keys import SHA256_HEX

# The patterns of the routes' path parameters, declared here beside their words.
RUN_ID = r"^[0-9a-f-]{36}$"  # a run's id, as `X-Run-Id` and `run_finished` give it
FEEDBACK_RUN_ID = r"^[A-Za-z0-9-]{1,64}$"  # a run's id as feedback takes it
ATTACHMENT_ID = r"^att_[0-9a-f]{1,64}$"
KEY_ID = r"^key_[0-9a-f]{12}$"

IN_WORDS: dict[str, str] = {
    # As chat completions' X-Thread-Id says it (app/api/routes/chat.py).
    THREAD_ID_PATTERN: "must be 1–128 characters of letters, digits, '.', '_', ':' or '-', "
    "starting with a letter or digit",
    r"\S": "must not be blank",
    RUN_ID: "must be a run id: 36 characters, lowercase hex digits and '-' (a UUID)",
    FEEDBACK_RUN_ID: "must be 1 to 64 characters: ASCII letters, digits and '-'",
    ATTACHMENT_ID: "must be an attachment id: 'att_' and 1 to 64 lowercase hex digits",
    KEY_ID: "must be a key id: 'key_' and 12 lowercase hex digits",
    SHA256_HEX: "must be 64 lowercase hex digits (a SHA-256)",
    IMAGE_URL: "must be an http://, https:// or gs:// URL, or a data:image/...;base64, URL "
    "with its base64 after the comma",
    f"^{BASE64}$": "must be base64: ASCII letters, digits, '+' and '/', padded with '=' to a "
    "multiple of 4 characters",
}


def in_words(pattern: object) -> str | None:
    """What a value matching ``pattern`` must be, after its name; None for a pattern not
    described here (pydantic's words are kept then)."""
    return IN_WORDS.get(pattern) if isinstance(pattern, str) else None
