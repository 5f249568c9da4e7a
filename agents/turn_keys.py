"""A thread's Idempotency-Keys kept with its record: a request retried with its key after
the process that answered it stopped (the runs it kept in memory gone, no Redis to ask) gets
the answer the thread holds instead of a second turn and its side effects."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

KEYS_KEPT = 16  # the last keys of a thread
KEYS_KEPT_S = 3600.0  # how long after its turn began a key answers for it


@dataclass(frozen=True)
class KeyedTurn:
    """The turn a key began: its user message, what it asked (``ask_digest``), its first run."""

    turn_id: str
    fingerprint: str
    run_id: str


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def ask_digest(fingerprint: str) -> str:
    """What a turn asked, as kept with its key: a digest of its fingerprint (the message)."""
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:32]


def keyed_turn(
    record: Mapping[str, Any] | None, key: str, now: float | None = None
) -> KeyedTurn | None:
    """The turn ``key`` began on the thread of ``record``, within ``KEYS_KEPT_S``."""
    now = time.time() if now is None else now
    wanted = _digest(key)
    for entry in (record or {}).get("keys") or ():
        digest, turn_id, asked, run_id, began = entry
        if digest == wanted and now - began < KEYS_KEPT_S:
            return KeyedTurn(turn_id, asked, run_id)
    return None


def with_key(
    record: Mapping[str, Any] | None, key: str, turn: KeyedTurn, now: float | None = None
) -> list[list[Any]]:
    """The record's keys with ``key`` for ``turn`` added (the oldest beyond ``KEYS_KEPT``
    dropped): a record's ``keys`` field."""
    now = time.time() if now is None else now
    kept = [e for e in (record or {}).get("keys") or () if now - e[4] < KEYS_KEPT_S]
    kept = [e for e in kept if e[0] != _digest(key)]
    kept.append([_digest(key), turn.turn_id, turn.fingerprint, turn.run_id, now])
    return kept[-KEYS_KEPT:]


def answer_to(history: Sequence[BaseMessage], turn_id: str) -> AIMessage | None:
    """The answer the thread holds to user message ``turn_id``: the last assistant message
    without tool calls before the next user message; None when it got none (yet)."""
    start = next((i for i, m in enumerate(history) if m.id == turn_id), None)
    if start is None or not isinstance(history[start], HumanMessage):
        return None
    answer = None
    for message in history[start + 1 :]:
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage) and not message.tool_calls:
            answer = message
    return answer
