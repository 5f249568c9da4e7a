"""Tier 1 retrieval: hybrid search, the prompt's budget, the on-disk embedding cache."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from agents.skills.bm25 import BM25, name_words, tokenize, vocabulary
from agents.skills.embeddings import EmbeddingCache, MiniLMEmbedder
from agents.skills.index import SkillEntry, SkillIndex, query_parts, sentences
from agents.tokens import count_tokens
from tests.skillkit import HashingEmbedder

ENTRIES = [
    SkillEntry(
        "order-query",
        "Look up orders by number, product, date or status.",
        ("order", "订单", "tracking"),
        ("where is my order ORD1001",),
    ),
    SkillEntry(
        "device-alarms",
        "List active alarms of industrial devices.",
        ("alarm", "告警", "fault"),
        ("does CNC-001 have open alarms",),
    ),
    SkillEntry(
        "inventory",
        "Stock levels of products per warehouse.",
        ("stock", "库存"),
        ("how many units are left",),
    ),
    SkillEntry("escalate", "Hand the chat to a human agent.", ("human",), (), pinned=True),
]


def synthetic(n: int) -> list[SkillEntry]:
    return [
        SkillEntry(
            f"skill-{i:05d}",
            f"Handles task number {i} about topic {i % 97} "
            f"for department {i % 13}. Use it for requests of kind {i}.",
            (f"topic{i % 97}",),
            (),
        )
        for i in range(n)
    ]


def build(entries: list[SkillEntry], tmp_path: Path | None = None) -> SkillIndex:
    cache = EmbeddingCache(tmp_path / "emb.sqlite" if tmp_path else None, HashingEmbedder())
    index = SkillIndex(cache)
    index.build(entries)
    return index


def test_tokenizer_splits_cjk_into_unigrams_and_bigrams() -> None:
    assert tokenize("查询订单") == ["查", "询", "订", "单", "查询", "询订", "订单"]
    assert tokenize("Where are my orders?") == ["order"]


def test_a_word_and_its_inflections_become_one_token() -> None:
    for forms in (
        "rate rates rated",
        "price prices pricing",
        "currency currencies",
        "convert converted converting",
        "match matches",
        "hop hopping",
        "file filing files",
    ):
        assert len(set(tokenize(forms))) == 1, forms
    assert tokenize("status analysis bus news") == ["status", "analysis", "bus", "new"]


def test_function_words_and_pieces_of_contractions_are_dropped_but_not_negations() -> None:
    text = "I'm looking for some of these, just out of curiosity: it's not working"
    assert tokenize(text) == ["look", "curiosity", "not", "work"]


def test_a_long_description_is_hardly_a_weaker_match_for_its_subject() -> None:
    short = "Currency exchange rates."
    long = "Currency exchange rates. " + "Real-time and historical data, many markets. " * 6
    scores = BM25([short, long, "Public holidays of many countries."]).scores("exchange rate")
    assert scores[1] >= 0.7 * scores[0]  # 0.46 with the textbook length normalisation


def test_a_name_that_runs_two_catalogue_words_together_is_split_into_them() -> None:
    words = vocabulary(["Weather data for any city.", "Stack traces, in bulk."])
    assert name_words("apilayer-weatherstack", words) == "apilayer weatherstack weather stack"
    # A word of its own, a stop word as a piece, a short part: left as they are.
    assert name_words("city-weather", words) == "city weather"
    assert name_words("anyweather", words) == "anyweather"
    assert name_words("data-io", words) == "data io"


def test_a_skill_matches_a_word_its_name_runs_together_with_another() -> None:
    entries = [
        SkillEntry("apilayer-weatherstack", "Real-time and historical data API.", (), ()),
        SkillEntry("city-archive", "Historical data about a city.", (), ()),
        SkillEntry("forecasts", "Weather forecasts from a stack of models.", (), ()),
    ]
    index = SkillIndex(None)
    index.build(entries)
    hits = {h.name: h for h in index.search("historical weather data", k=3)}
    # Both match "historical data"; the name's "weather" is the difference.
    assert hits["apilayer-weatherstack"].keyword > 1.3 * hits["city-archive"].keyword
    assert index.search("historical weather data", k=1)[0].name == "apilayer-weatherstack"


def test_search_finds_the_skill_by_keyword_and_by_chinese_trigger() -> None:
    index = build(ENTRIES)
    assert index.search("where is order ORD1234", k=1)[0].name == "order-query"
    assert index.search("CNC-001 有告警吗", k=1)[0].name == "device-alarms"
    hits = index.search("stock left in warehouse", k=3)
    assert hits[0].name == "inventory"
    assert hits[0].score >= hits[-1].score


def test_empty_query_or_empty_index_finds_nothing() -> None:
    assert build(ENTRIES).search("   ") == []
    assert build([]).search("orders") == []


def test_compact_index_holds_pinned_and_relevant_skills_within_budget() -> None:
    index = build(ENTRIES)
    text, names = index.compact("where is my order", budget_tokens=300)
    assert names[0] == "escalate"
    assert "order-query" in names
    assert count_tokens(text) <= 300


def test_prompt_size_does_not_grow_with_installed_skills() -> None:
    sizes = []
    for n in (10, 100, 2000):
        text, _ = build(synthetic(n)).compact("topic5 request for department 3", budget_tokens=300)
        sizes.append(count_tokens(text))
    assert max(sizes) <= 300
    assert sizes[2] <= sizes[1] + 20


def test_one_sentence_of_a_long_description_matches_as_well_as_a_short_description() -> None:
    long = SkillEntry(
        "bible-digital",
        "Do not worry about managing the versions. The API gives every version of the "
        "Bible and searches verses by words. Read one chapter of a book.",
        (),
        (),
    )
    index = build([long, *ENTRIES])
    [hit] = [h for h in index.search("read one chapter of a book", k=5) if h.name == long.name]
    # The sentence's own vector answers (identical bag of words), not the blurred whole.
    assert hit.dense > 0.99
    assert index.search("read one chapter of a book", k=1)[0].name == long.name


def test_descriptions_and_messages_are_split_into_sentences() -> None:
    assert sentences("US addresses. The Lob.com API checks them: 1) verify 2) autocomplete") == [
        "US addresses.",
        "The Lob.com API checks them:",
        "1) verify",
        "2) autocomplete",
    ]
    assert query_parts("I am off to Paris next week. What is the weather there?") == [
        "I am off to Paris next week.",
        "What is the weather there?",
    ]
    assert query_parts("where is my order ORD1001?") == []


def test_restart_reembeds_only_what_changed(tmp_path: Path) -> None:
    entries = synthetic(50)
    first = build(entries, tmp_path)
    assert first.cache is not None
    # Each skill's summary and, its description having two sentences, each sentence.
    assert first.cache.computed == sum(len(e.dense_texts()) for e in entries) == 150
    changed = [*entries[:-1], SkillEntry("skill-new", "A brand new skill.", (), ())]
    second = build(changed, tmp_path)
    assert second.cache is not None
    assert second.cache.computed == 1


def test_the_embedding_model_runs_on_one_thread_whoever_calls(monkeypatch: Any) -> None:
    # Torch slows down twofold once several threads have run it (their OpenMP teams spin
    # against each other), so every caller's texts are encoded on the embedder's own thread.
    embedder = MiniLMEmbedder()
    ran_on: list[str] = []

    def fake_few(texts: list[str]) -> np.ndarray:
        ran_on.append(threading.current_thread().name)
        return np.ones((len(texts), embedder.dimension), dtype=np.float32)

    monkeypatch.setattr(embedder, "_forward", fake_few)
    embedder.encode(["from the main thread"])
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda t: embedder.encode([t]), ["a", "b", "c", "d"]))
    assert len(ran_on) == 5
    assert len(set(ran_on)) == 1
    assert ran_on[0].startswith("skilldesk-embed")


def test_a_message_and_its_clauses_are_embedded_in_one_pass() -> None:
    index = build(ENTRIES)
    assert index.cache is not None
    embedder = index.cache.embedder
    assert isinstance(embedder, HashingEmbedder)
    calls = embedder.calls
    queries = ["where is order ORD1 and any alarms on CNC-001", "where is order ORD1"]
    index.prefetch([*queries, "any alarms on CNC-001", queries[0]])
    assert embedder.calls == calls + 1
    assert index.search(queries[0], k=2)
    assert index.search(queries[1], k=1)[0].name == "order-query"
    assert index.search("any alarms on CNC-001", k=1)[0].name == "device-alarms"
    assert embedder.calls == calls + 1  # the searches used the prefetched vectors


def test_a_forked_child_can_still_embed(monkeypatch: Any) -> None:
    embedder = MiniLMEmbedder()
    monkeypatch.setattr(
        embedder,
        "_forward",
        lambda texts: np.ones((len(texts), embedder.dimension), dtype=np.float32),
    )
    assert embedder.encode(["before the fork"]).shape == (1, embedder.dimension)
    pid = os.fork()
    if pid == 0:  # the child: its copy of the pool has no thread unless it was reset
        signal.alarm(10)
        ok = embedder.encode(["in the child"]).shape == (1, embedder.dimension)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class ThreadedEmbedder(HashingEmbedder):
    """Runs on a thread of its own, as the MiniLM embedder does."""

    def __init__(self) -> None:
        super().__init__()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="test-embed")
        self.ran_on: list[str] = []

    def encode(self, texts: Any) -> Any:
        self.ran_on.append(threading.current_thread().name)
        return super().encode(texts)


def threaded_index() -> tuple[SkillIndex, ThreadedEmbedder]:
    embedder = ThreadedEmbedder()
    index = SkillIndex(EmbeddingCache(None, embedder))
    index.build(ENTRIES)
    return index, embedder


def test_an_anticipated_query_is_embedded_once_ahead_of_its_search() -> None:
    index, embedder = threaded_index()
    calls = embedder.calls
    entered, release = threading.Event(), threading.Event()
    slow_encode = embedder.encode

    def held(texts: Any) -> Any:
        entered.set()
        release.wait(5)
        return slow_encode(texts)

    embedder.encode = held  # type: ignore[method-assign]
    index.anticipate(["where is my order ORD1", "where is my order ORD1", " "])
    assert entered.wait(5)  # the job is running on the encoder's thread...
    assert embedder.calls == calls  # ...and anticipate did not wait for it
    with ThreadPoolExecutor(1) as other:
        searching = other.submit(index.search, "where is my order ORD1", 1)
        time.sleep(0.05)
        assert not searching.done()  # the search waits for the job under way
        release.set()
        assert searching.result(timeout=5)[0].name == "order-query"
    assert embedder.calls == calls + 1  # one pass for both
    assert embedder.ran_on[-1].startswith("test-embed")


def test_a_search_on_the_encoders_thread_never_waits_for_a_job_queued_behind_it() -> None:
    index, embedder = threaded_index()
    query = "any alarms on CNC-001"

    def anticipate_then_search() -> list[Any]:
        index.anticipate([query])  # queued behind this very job on the one thread
        return index.search(query, k=1)

    hits = embedder.executor.submit(anticipate_then_search).result(timeout=5)
    assert hits[0].name == "device-alarms"
    assert not index._pending  # the queued job was taken back, not left dangling


async def test_retrieval_work_runs_beside_the_query_encoder() -> None:
    index, _ = threaded_index()
    assert (await index.off_loop(lambda: threading.current_thread().name)).startswith("test-embed")
    plain = build(ENTRIES)  # no thread of its own: the loop's default pool, never the loop
    assert await plain.off_loop(threading.current_thread) is not threading.current_thread()
    plain.anticipate(["where is my order"])  # nothing to start early
    assert not plain._pending


def test_a_search_on_a_new_thread_uses_one_openmp_thread() -> None:
    # FAISS's OpenMP setting belongs to the thread that makes it: a search on the encoder's
    # thread with the default team of every core left a worker spinning after each search.
    import faiss

    index = build(ENTRIES)
    with ThreadPoolExecutor(1) as fresh:
        teams = fresh.submit(
            lambda: (index.search("where is order ORD1", k=1), faiss.omp_get_max_threads())
        ).result()
    assert teams[0][0].name == "order-query"
    assert teams[1] == 1
