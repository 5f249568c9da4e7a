"""Tier 1: a hybrid retrieval index (BM25 + MiniLM embeddings in FAISS) over skill summaries."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Executor, Future
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import faiss
import numpy as np
import structlog

from agents.skills.bm25 import BM25, name_words, vocabulary
from agents.skills.embeddings import EmbeddingCache
from agents.skills.loader import Skill
from agents.tokens import count_tokens

log = structlog.get_logger(__name__)
T = TypeVar("T")


def _search(index: faiss.Index, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` on one OpenMP thread. The setting is the calling thread's own (a
    search on the encoder's thread would otherwise start a team of every core, whose idle
    worker spins for milliseconds after each search: 8 ms of CPU for a 0.2 ms search)."""
    faiss.omp_set_num_threads(1)
    return index.search(vectors, k)


@dataclass(frozen=True)
class SkillEntry:
    """What the index knows of a skill: enough for retrieval and one prompt line."""

    name: str
    description: str
    triggers: tuple[str, ...]
    examples: tuple[str, ...]
    pinned: bool = False

    @classmethod
    def of(cls, skill: Skill, written: tuple[str, ...] = ()) -> SkillEntry:
        """The entry for a loaded skill; ``written``: examples the model wrote for a skill
        that has none of its own (agents/skills/written.py)."""
        return cls(
            skill.name,
            skill.description,
            skill.config.triggers,
            skill.config.examples or written,
            skill.config.pinned,
        )

    def keyword_text(self, words: frozenset[str] = frozenset()) -> str:
        """Text BM25 sees; ``words``: the catalogue's words, for names that run two of them
        together (see ``name_words``)."""
        return " ".join([name_words(self.name, words), self.description, *self.triggers])

    def words(self) -> list[str]:
        """The texts whose words the catalogue's vocabulary is made of."""
        return [self.description, *self.triggers, *self.examples]

    def dense_texts(self) -> list[str]:
        """Texts embedded for this skill: its summary, each sentence of a description that
        has several (a long description's vector blurs what each sentence says; its skill
        scores by its best vector), then each example utterance."""
        parts = sentences(self.description)
        return [
            f"{self.name.replace('-', ' ')}: {self.description}",
            *(parts if len(parts) > 1 else []),
            *self.examples,
        ]

    def line(self, width: int = 90) -> str:
        """One compact prompt line: name, first sentence of the description, a few triggers."""
        first = self.description.split(". ")[0].strip().rstrip(".")
        if len(first) > width:
            first = first[: width - 1].rstrip() + "…"
        return f"- {self.name}: {first}"


# Characters of a description a prompt offering several skills shows (the Agent Skills spec
# allows 1,024; a catalogue's long ones repeat what the first sentences say).
BRIEF_CHARS = 300
# A sentence ends at . ! ? ; or : before a space, or where a numbered item starts ("1) ...").
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；：])\s*(?=\S)|\s+(?=\d{1,2}\)\s)")
_QUERY_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*(?=\S)")


def sentences(text: str, most: int = 12) -> list[str]:
    """The sentences (and numbered items) of a description, at most ``most`` of them."""
    found = [p.strip() for p in _SENTENCE_END.split(text) if len(p.strip()) > 3]
    return found[:most]


def brief(description: str, limit: int = BRIEF_CHARS) -> str:
    """The description's first sentences within ``limit`` characters (at least the first
    sentence, cut): what a prompt offering several skills shows of each beside its
    instructions. A description within the limit is returned whole."""
    if len(description) <= limit:
        return description
    kept: list[str] = []
    for part in sentences(description, most=64):
        if kept and len(" ".join([*kept, part])) > limit:
            break
        kept.append(part)
    text = " ".join(kept)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def query_parts(query: str, most: int = 4) -> list[str]:
    """The sentences of a message of several, each searched too (a message that sets a scene
    before it asks matches the scene's skills as much as the one it asks for); none for a
    message of one sentence."""
    parts = [p.strip() for p in _QUERY_END.split(query) if len(p.split()) >= 3]
    return parts[:most] if len(parts) > 1 else []


@dataclass(frozen=True)
class SearchHit:
    """One retrieved skill with its scores (fused, dense cosine, BM25 normalised), and the
    cosine of its closest example learned from use (0 when it has none)."""

    name: str
    score: float
    dense: float
    keyword: float
    learned: float = 0.0


class SkillIndex:
    """Hybrid index; rebuilt as a whole on reload (embeddings come from the cache).

    Args:
        cache: Embeddings (``None``: keyword retrieval only).
        dense_weight: Weight of the cosine similarity in the fused score; the rest is BM25
            as the share of the query's idf mass a skill matches. Both lie in [0, 1] and keep
            an absolute meaning (a confidence, not just an order) whatever the number of
            skills. Calibrated on bench/data (bench/retrieval_quality.py --sweep).
    """

    def __init__(self, cache: EmbeddingCache | None, dense_weight: float = 0.5) -> None:
        self.cache = cache
        self.dense_weight = dense_weight if cache is not None else 0.0
        self._lock = threading.Lock()
        self._entries: list[SkillEntry] = []
        self._by_name: dict[str, SkillEntry] = {}
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        # Query embeddings started ahead of their search (see anticipate), by query.
        self._pending: dict[str, Future[dict[str, np.ndarray]]] = {}
        self._bm25 = BM25([])
        self._position: dict[str, int] = {}
        self._faiss: faiss.IndexFlatIP | None = None
        self._owner: np.ndarray = np.zeros(0, dtype=np.int64)
        # Examples learned from use (agents/skills/learned.py), by skill, in an index of
        # their own: they change while the service runs, the skills' vectors do not.
        self._learned_texts: dict[str, tuple[str, ...]] = {}
        self._learned_vectors: dict[str, np.ndarray] = {}
        self._learned: faiss.IndexFlatIP | None = None
        self._learned_owner: list[str] = []

    def build(self, entries: Sequence[SkillEntry]) -> None:
        """Replace the index with ``entries``."""
        started = time.perf_counter()
        entries = list(entries)
        words = vocabulary(text for e in entries for text in e.words())
        bm25 = BM25([e.keyword_text(words) for e in entries])
        index, owner = None, np.zeros(0, dtype=np.int64)
        if self.cache is not None and entries:
            texts: list[str] = []
            owners: list[int] = []
            for i, entry in enumerate(entries):
                for text in entry.dense_texts():
                    texts.append(text)
                    owners.append(i)
            vectors = self.cache.encode(texts)
            self.cache.embedder.encode(["warm up"])  # load the model now, not on a user's query
            index = faiss.IndexFlatIP(vectors.shape[1])
            index.add(vectors)
            owner = np.array(owners, dtype=np.int64)
        with self._lock:
            self._entries, self._bm25, self._faiss, self._owner = entries, bm25, index, owner
            self._by_name = {e.name: e for e in entries}
            self._position = {e.name: i for i, e in enumerate(entries)}
        log.info(
            "skills.index_built",
            skills=len(entries),
            ms=round((time.perf_counter() - started) * 1000, 1),
        )

    def __len__(self) -> int:
        return len(self._entries)

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        """The ``k`` best skills for ``query``, best first."""
        with self._lock:
            entries, bm25, index, owner = self._entries, self._bm25, self._faiss, self._owner
            learned_index, learned_owner = self._learned, self._learned_owner
        if not entries or not query.strip():
            return []
        keyword = bm25.normalized_scores(query)
        dense = np.zeros(len(entries), dtype=np.float32)
        learned = np.zeros(len(entries), dtype=np.float32)
        if index is not None and self.cache is not None:
            parts = query_parts(query)
            vectors = np.vstack([self._query_vector(q) for q in (query, *parts)])
            if learned_index is not None:
                learned = self._learned_scores(vectors[:1], learned_index, learned_owner)
            depth = min(index.ntotal, max(64, k * 8))
            sims, ids = _search(index, vectors, depth)
            per_query = [
                _best_per_skill(row, found, owner, len(entries))
                for row, found in zip(sims, ids, strict=True)
            ]
            dense = per_query[0]
            if parts:  # the whole message and its sentences weigh alike
                dense = 0.5 * dense + 0.5 * np.mean(per_query[1:], axis=0)
            # A message the model routed before is as good a description of its skill as any.
            dense = np.maximum(dense, learned)
        fused = self.dense_weight * dense + (1 - self.dense_weight) * keyword
        if len(fused) > k:
            top_k = np.argpartition(-fused, k)[:k]
            order = top_k[np.argsort(-fused[top_k], kind="stable")]
        else:
            order = np.argsort(-fused, kind="stable")
        return [
            SearchHit(
                entries[i].name,
                round(float(fused[i]), 4),
                round(float(dense[i]), 4),
                round(float(keyword[i]), 4),
                round(float(learned[i]), 4),
            )
            for i in order
            if fused[i] > 0
        ]

    def learn(self, name: str, texts: Sequence[str]) -> None:
        """Set the examples learned from use of skill ``name`` (none: forget them)."""
        self.learn_all({name: texts})

    def learn_all(self, examples: dict[str, Sequence[str]]) -> None:
        """Set the learned examples of each skill named (an empty list forgets them) and
        re-index them: only the named skills' texts are embedded (from the cache after the
        first time). Learned examples outlive a rebuild; those of a skill not installed are
        kept and ignored until it is."""
        if self.cache is None:
            return
        with self._lock:
            learned = dict(self._learned_texts)
            vectors = dict(self._learned_vectors)
        for name, texts in examples.items():
            found = tuple(dict.fromkeys(texts))
            if found:
                learned[name], vectors[name] = found, self.cache.encode(list(found))
            else:
                learned.pop(name, None)
                vectors.pop(name, None)
        owners = [n for n, found in learned.items() for _ in found]
        index = None
        if owners:
            index = faiss.IndexFlatIP(self.cache.embedder.dimension)
            index.add(np.vstack([vectors[n] for n in learned]))
        with self._lock:
            self._learned_texts, self._learned_vectors = learned, vectors
            self._learned, self._learned_owner = index, owners

    def learned_all(self) -> dict[str, tuple[str, ...]]:
        """Every skill's learned examples that the index holds."""
        with self._lock:
            return dict(self._learned_texts)

    def learned(self, name: str) -> tuple[str, ...]:
        """The examples learned from use of skill ``name`` that the index holds."""
        return self._learned_texts.get(name, ())

    def _learned_scores(
        self, vectors: np.ndarray, index: faiss.IndexFlatIP, owners: list[str]
    ) -> np.ndarray:
        """Each installed skill's best cosine to its learned examples (0 without any)."""
        with self._lock:
            position = self._position
        scores = np.zeros(len(position), dtype=np.float32)
        sims, ids = _search(index, vectors, min(index.ntotal, 32))
        for sim, vid in zip(sims[0], ids[0], strict=True):
            j = position.get(owners[vid]) if vid >= 0 else None
            if j is not None:
                scores[j] = max(scores[j], float(sim))
        return scores

    async def off_loop(self, function: Callable[..., T], /, *args: object) -> T:
        """Run retrieval work off the event loop: on the query encoder's own thread when it
        has one, so the searches in ``function`` embed without another thread hop."""
        executor: Executor | None = getattr(self._embedder(), "executor", None)
        call = partial(contextvars.copy_context().run, function, *args)
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    def anticipate(self, queries: Sequence[str]) -> None:
        """Start embedding queries that are about to be searched, and return at once.

        The query encoder then works while the caller does other things (reads the thread,
        writes the first checkpoint); a search of one of these queries waits for that job
        instead of starting another. Only for an encoder with a thread of its own.
        """
        executor: Executor | None = getattr(self._embedder(), "executor", None)
        if executor is None:
            return
        with self._lock:
            todo = [
                q
                for q in dict.fromkeys(_with_parts(queries))
                if q.strip() and q not in self._recent and q not in self._pending
            ]
            if not todo:
                return
            future = executor.submit(self._embed_pending, todo)
            self._pending.update(dict.fromkeys(todo, future))

    def prefetch(self, queries: Sequence[str]) -> None:
        """Embed queries about to be searched in one job on the embedding thread (a message's
        clauses wait for the thread once; searching the whole message later is a second job)."""
        if self.cache is None:
            return
        with self._lock:
            todo = [
                q
                for q in dict.fromkeys(_with_parts(queries))
                if q.strip() and q not in self._recent and q not in self._pending
            ]
        if todo:
            self._remember(todo, self.cache.embedder.encode(todo))

    def _embedder(self) -> object:
        return self.cache.embedder if self.cache is not None else None

    def _embed_pending(self, queries: list[str]) -> dict[str, np.ndarray]:
        assert self.cache is not None
        try:
            vectors = self.cache.embedder.encode(queries)
            self._remember(queries, vectors)
            return {q: v.reshape(1, -1) for q, v in zip(queries, vectors, strict=True)}
        finally:
            with self._lock:
                for query in queries:
                    self._pending.pop(query, None)

    def _query_vector(self, query: str) -> np.ndarray:
        # A turn searches the same text more than once (index for the prompt, routing);
        # the model runs once.
        with self._lock:
            cached = self._recent.get(query)
            if cached is not None:
                self._recent.move_to_end(query)
                return cached
            pending = self._pending.get(query)
        # A job not started yet may sit behind this very call on the encoder's one thread:
        # take it back and embed here rather than wait for it.
        if pending is not None and not pending.cancel():
            try:
                return pending.result()[query]
            except CancelledError:
                pass
        with self._lock:
            if pending is not None and self._pending.get(query) is pending:
                for q in [q for q, f in self._pending.items() if f is pending]:
                    del self._pending[q]
        assert self.cache is not None
        vector = self.cache.embedder.encode([query])
        self._remember([query], vector)
        return vector

    def _remember(self, queries: list[str], vectors: np.ndarray) -> None:
        with self._lock:
            for query, vector in zip(queries, vectors, strict=True):
                self._recent[query] = vector.reshape(1, -1)
            while len(self._recent) > 256:
                self._recent.popitem(last=False)

    def pinned(self) -> list[SkillEntry]:
        """Entries always shown in the prompt."""
        return [e for e in self._by_name.values() if e.pinned]

    def entry(self, name: str) -> SkillEntry | None:
        """The entry of a skill by name."""
        return self._by_name.get(name)

    def compact(
        self,
        query: str,
        budget_tokens: int = 300,
        k: int = 8,
        exclude: set[str] | frozenset[str] = frozenset(),
    ) -> tuple[str, list[str]]:
        """The prompt's skill index for ``query``: pinned skills then the best hits, within
        ``budget_tokens``, leaving out ``exclude`` (skills the prompt holds in full). Returns
        the text and the names it lists."""
        chosen: list[SkillEntry] = [e for e in self.pinned() if e.name not in exclude]
        for hit in self.search(query, k=k + len(exclude)):
            entry = self.entry(hit.name)
            if entry is not None and entry not in chosen and entry.name not in exclude:
                chosen.append(entry)
        lines: list[str] = []
        used = 0
        for entry in chosen:
            line = entry.line()
            cost = count_tokens(line) + 1
            if used + cost > budget_tokens and lines:
                break
            lines.append(line)
            used += cost
        return "\n".join(lines), [line.split(":", 1)[0][2:] for line in lines]


def _best_per_skill(sims: np.ndarray, ids: np.ndarray, owner: np.ndarray, size: int) -> np.ndarray:
    """Each skill's best cosine among the searched vectors; a skill with none of them
    scores the depth's floor (it can be at most that)."""
    floor = float(sims[-1]) if len(sims) else 0.0
    dense = np.full(size, max(floor, 0.0), dtype=np.float32)
    for sim, vid in zip(sims, ids, strict=True):
        if vid >= 0:
            j = owner[vid]
            dense[j] = max(dense[j], float(sim))
    return dense


def _with_parts(queries: Sequence[str]) -> list[str]:
    """The queries, each followed by its sentences (see ``query_parts``)."""
    return [text for q in queries for text in (q, *query_parts(q))]
