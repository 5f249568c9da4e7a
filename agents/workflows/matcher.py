"""Which workflow a chat message asks for: the interface the router uses, and the matcher.

A workflow's ``intent`` gives keywords and example messages. Scores lie in [0, 1]; the router
starts a workflow at 0.6 (``RouterOptions.workflow``), so only these pass:

- a message that *is* one of the examples (case, spacing and end punctuation aside): 1.0;
- a keyword or phrase in the message (case-insensitive, on word boundaries; Chinese by
  substring): 0.7, plus 0.1 for each further one, at most 0.9;
- with embeddings, an English message close to an example: the cosine (ids such as ORD1017
  or CNC-001 replaced by "ID" on both sides, so a shared id does not make two messages
  alike) mapped linearly from 0.70 → 0 to 0.95 → 1, so 0.85 → 0.6. Measured with
  all-MiniLM-L6-v2 (int8) against the bundled workflows: the bundled skills' example
  messages and triggers reach at most 0.80, paraphrases of a workflow's examples 0.73-0.94
  (tests/integration/test_workflow_intents.py). Chinese messages are not compared by
  embedding: the English model puts unrelated Chinese sentences at 0.7-0.87.

Keywords should therefore name the procedure ("maintenance procedure", "申请退款"), not a
word every related question uses ("refund", "订单"): a skill answers those.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from agents.skills.embeddings import EmbeddingCache
    from agents.workflows.loader import Workflow


@dataclass(frozen=True)
class WorkflowMatch:
    """A workflow whose intent matches a message (keywords, example embeddings)."""

    name: str
    score: float
    reason: str = ""


class WorkflowMatcher(Protocol):
    """Finds the workflow a message asks for, if any; names the installed ones."""

    def match(self, text: str, *, words_only: bool = False) -> WorkflowMatch | None:
        """``words_only``: by keywords and examples alone, no embedding (a match then stands
        whatever the embeddings would add: they can only raise a score)."""
        ...

    def names(self) -> list[str]: ...


class NoWorkflows:
    """The matcher while no workflow engine is installed."""

    def match(self, text: str, *, words_only: bool = False) -> WorkflowMatch | None:
        """Never matches."""
        return None

    def names(self) -> list[str]:
        """No workflows."""
        return []


class WorkflowSource(Protocol):
    """Where the workflows come from (a WorkflowRegistry): ``version`` changes with them."""

    version: int

    def all(self) -> list[Workflow]: ...


KEYWORD_SCORE = 0.7
KEYWORD_STEP = 0.1
KEYWORD_MAX = 0.9
COSINE_FLOOR = 0.70  # → score 0
COSINE_FULL = 0.95  # → score 1
_RECENT = 256  # query vectors kept

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uac00-\ud7af]")
# Ids: a run of letters, digits and hyphens holding a digit (ORD1017, CNC-001, WO-2026-0003).
_ID = re.compile(r"(?<![\w-])(?=[\w-]*\d)[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*(?![\w-])")
_END = re.compile(r"[\s.!?。！？…]+$")


def _normal(text: str) -> str:
    """For comparing a message with an example: case, spacing, end punctuation aside."""
    return _END.sub("", " ".join(text.casefold().split()))


def _masked(text: str) -> str:
    return _ID.sub("ID", text)


def _keyword_pattern(keyword: str) -> re.Pattern[str] | None:
    words = keyword.split()
    if not words:
        return None
    if _CJK.search(keyword):  # no spaces between Chinese words: a substring
        return re.compile(re.escape(keyword.strip()), re.IGNORECASE)
    body = r"\s+".join(re.escape(w) for w in words)
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


@dataclass(frozen=True)
class _Intent:
    name: str
    keywords: tuple[tuple[str, re.Pattern[str]], ...]
    examples: dict[str, str]  # normal form → as written


class IntentMatcher:
    """Matches messages to the workflows of ``source`` by their ``intent``.

    Args:
        source: The workflows; the tables are rebuilt when its ``version`` changes.
        cache: Embeddings for example messages (``None``: keywords and exact examples only).
    """

    def __init__(self, source: WorkflowSource, cache: EmbeddingCache | None = None) -> None:
        self.source = source
        self.cache = cache
        self._lock = threading.Lock()
        self._version: int | None = None
        self._intents: list[_Intent] = []
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._owners = np.zeros(0, dtype=np.int64)
        self._texts: list[str] = []
        # Query vectors by masked text: messages that differ only by their ids (every
        # "where is my order ORD...?") mask alike, and a vector depends on its text alone.
        self._query_vector = lru_cache(maxsize=_RECENT)(self._embed)

    def names(self) -> list[str]:
        """The workflows that can be matched."""
        return [i.name for i in self._tables()[0]]

    def match(self, text: str, *, words_only: bool = False) -> WorkflowMatch | None:
        """The best workflow for ``text`` with its score and why; ``None`` when none scores.
        ``words_only``: keywords and examples alone, without embedding the message, from the
        tables as the last full match left them (building them embeds the examples)."""
        if words_only:
            with self._lock:
                tables = self._intents, self._vectors, self._owners, self._texts
        else:
            tables = self._tables()
        intents, vectors, owners, texts = tables
        if not intents or not text.strip():
            return None
        best: dict[int, tuple[float, str]] = {}

        def offer(i: int, score: float, reason: str) -> None:
            if score > best.get(i, (0.0, ""))[0]:
                best[i] = (score, reason)

        normal = _normal(text)
        for i, intent in enumerate(intents):
            if normal in intent.examples:
                offer(i, 1.0, f"is the example {intent.examples[normal]!r}")
            hits = [k for k, pattern in intent.keywords if pattern.search(text)]
            if hits:
                score = min(KEYWORD_MAX, KEYWORD_SCORE + KEYWORD_STEP * (len(hits) - 1))
                offer(i, score, "keyword " + ", ".join(repr(h) for h in hits))
        if not words_only and self.cache is not None and len(owners) and not _CJK.search(text):
            query = self._query_vector(_masked(text))
            sims = vectors @ query
            for i in range(len(intents)):
                mine = np.flatnonzero(owners == i)
                if not len(mine):
                    continue
                j = int(mine[np.argmax(sims[mine])])
                cosine = float(sims[j])
                score = (cosine - COSINE_FLOOR) / (COSINE_FULL - COSINE_FLOOR)
                score = max(0.0, min(1.0, score))
                offer(i, score, f"like the example {texts[j]!r} (cosine {cosine:.2f})")
        if not best:
            return None
        i, (score, reason) = max(best.items(), key=lambda item: (item[1][0], -item[0]))
        if score <= 0:
            return None
        return WorkflowMatch(intents[i].name, round(score, 4), reason)

    def _embed(self, masked: str) -> np.ndarray:
        assert self.cache is not None
        vector: np.ndarray = self.cache.embedder.encode([masked])[0]
        return vector

    def _tables(self) -> tuple[list[_Intent], np.ndarray, np.ndarray, list[str]]:
        with self._lock:
            if self._version != self.source.version:
                self._build(self.source.all())
                self._version = self.source.version
            return self._intents, self._vectors, self._owners, self._texts

    def _build(self, workflows: Sequence[Workflow]) -> None:
        intents: list[_Intent] = []
        texts: list[str] = []
        owners: list[int] = []
        for i, workflow in enumerate(workflows):
            intent = workflow.spec.intent
            keywords = [*intent.keywords]
            if "-" in workflow.name:
                keywords.append(workflow.name)  # the name as typed: equipment-maintenance
            compiled = tuple(
                (k, p) for k in dict.fromkeys(keywords) if (p := _keyword_pattern(k)) is not None
            )
            examples = {_normal(e): e for e in intent.examples if e.strip()}
            intents.append(_Intent(workflow.name, compiled, examples))
            for example in examples.values():
                if not _CJK.search(example):
                    texts.append(example)
                    owners.append(i)
        vectors = np.zeros((0, 0), dtype=np.float32)
        if self.cache is not None and texts:
            vectors = self.cache.encode([_masked(t) for t in texts])
        self._intents, self._texts = intents, texts
        self._vectors, self._owners = vectors, np.array(owners, dtype=np.int64)
