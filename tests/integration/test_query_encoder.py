"""The real MiniLM query encoder: traced for speed, with the model's own vectors."""

from __future__ import annotations

import numpy as np

from agents.skills.embeddings import MiniLMEmbedder


def test_the_traced_query_encoder_gives_the_models_own_vectors() -> None:
    embedder = MiniLMEmbedder()
    texts = [
        "where is my order ORD1001",
        "a longer question about the maintenance records of the pumps in hall 7 and their alarms",
        "有告警吗",
    ]
    reference = embedder._load().encode(texts, normalize_embeddings=True)  # sentence-transformers
    together = embedder.encode(texts)  # one padded batch through the traced model
    one_by_one = np.vstack([embedder.encode([t]) for t in texts])
    assert embedder._compiled is not None
    assert type(embedder._compiled).__name__ != "LastHidden"  # traced, not the eager fallback
    assert np.allclose((together * reference).sum(1), 1.0, atol=1e-4)
    assert np.allclose((one_by_one * reference).sum(1), 1.0, atol=1e-4)
