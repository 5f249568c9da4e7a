"""Which workflow a message asks for: keywords, exact examples, example embeddings; and the
calibration that keeps the bundled skills' own questions away from the bundled workflows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.skills.embeddings import EmbeddingCache
from agents.workflows.matcher import IntentMatcher, NoWorkflows
from agents.workflows.registry import WorkflowRegistry

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD = 0.6  # RouterOptions.workflow


class AngleEmbedder:
    """Puts each known text at a chosen cosine from the x axis; the rest on the z axis."""

    model_id = "angle-test"
    dimension = 3

    def __init__(self, cosines: dict[str, float]) -> None:
        self.cosines = cosines
        self.seen: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.seen += texts
        rows = []
        for text in texts:
            if text in self.cosines:
                c = self.cosines[text]
                rows.append([c, math.sqrt(max(0.0, 1 - c * c)), 0.0])
            else:
                rows.append([0.0, 0.0, 1.0])
        return np.array(rows, dtype=np.float32)


def registry(tmp_path: Path, **intents: dict[str, list[str]]) -> WorkflowRegistry:
    for name, intent in intents.items():
        text = yaml.safe_dump(
            {
                "name": name,
                "description": f"The {name} procedure.",
                "intent": intent,
                "nodes": [{"id": "only", "kind": "notify", "message": "hello"}],
            },
            allow_unicode=True,
        )
        (tmp_path / f"{name}.yaml").write_text(text, encoding="utf-8")
    found = WorkflowRegistry(tmp_path)
    found.reload()
    return found


@pytest.fixture
def maintenance(tmp_path: Path) -> WorkflowRegistry:
    return registry(
        tmp_path,
        **{
            "equipment-maintenance": {
                "keywords": ["maintenance procedure", "repair workflow", "维修流程"],
                "examples": ["Take CNC-001 through diagnosis and approval."],
            },
            "announcement": {"keywords": ["announce"], "examples": []},
        },
    )


def test_a_keyword_matches_on_word_boundaries_whatever_the_case(
    maintenance: WorkflowRegistry,
) -> None:
    matcher = IntentMatcher(maintenance)
    match = matcher.match("Please start the Maintenance   Procedure for PUMP-07")
    assert match is not None
    assert (match.name, match.score) == ("equipment-maintenance", 0.7)
    assert match.reason == "keyword 'maintenance procedure'"
    assert matcher.match("Read this announcement aloud") is None  # not the word "announce"
    assert matcher.match("Announce: lunch at noon") is not None


def test_more_keywords_score_higher(maintenance: WorkflowRegistry) -> None:
    match = IntentMatcher(maintenance).match("maintenance procedure, the repair workflow")
    assert match is not None
    assert match.score == pytest.approx(0.8)


def test_a_chinese_keyword_matches_inside_a_sentence(maintenance: WorkflowRegistry) -> None:
    match = IntentMatcher(maintenance).match("CNC-002停机了，走一下维修流程吧")
    assert match is not None
    assert match.name == "equipment-maintenance"


def test_an_example_given_as_it_is_matches_without_embeddings(
    maintenance: WorkflowRegistry,
) -> None:
    match = IntentMatcher(maintenance).match("take cnc-001 through diagnosis and approval")
    assert match is not None
    assert match.score == 1.0
    assert match.reason == "is the example 'Take CNC-001 through diagnosis and approval.'"
    assert IntentMatcher(maintenance).match("take it through diagnosis") is None


def test_the_hyphenated_name_is_a_keyword(maintenance: WorkflowRegistry) -> None:
    match = IntentMatcher(maintenance).match("run equipment-maintenance on ROBOT-A3")
    assert match is not None
    assert match.name == "equipment-maintenance"


def test_example_embeddings_with_ids_masked_map_cosines_to_scores(tmp_path: Path) -> None:
    source = registry(
        tmp_path, **{"refund-request": {"examples": ["I want a refund for order ORD1017."]}}
    )
    embedder = AngleEmbedder(
        {
            "I want a refund for order ID.": 1.0,
            "Refund order ID please": 0.85,
            "When will I get my refund for order ID?": 0.78,
        }
    )
    matcher = IntentMatcher(source, EmbeddingCache(None, embedder))
    close = matcher.match("Refund order ORD1044 please")
    assert close is not None
    assert close.score == pytest.approx(0.6, abs=1e-3)
    assert close.reason == "like the example 'I want a refund for order ORD1017.' (cosine 0.85)"
    far = matcher.match("When will I get my refund for order ORD1025?")
    assert far is not None
    assert far.score == pytest.approx(0.32, abs=1e-3)
    assert matcher.match("hello there") is None
    assert "Refund order ID please" in embedder.seen  # the id never reached the model


def test_messages_that_differ_only_by_their_ids_are_embedded_once(tmp_path: Path) -> None:
    source = registry(
        tmp_path, **{"refund-request": {"examples": ["I want a refund for order ORD1017."]}}
    )
    embedder = AngleEmbedder({"I want a refund for order ID.": 1.0, "Refund order ID please": 0.85})
    matcher = IntentMatcher(source, EmbeddingCache(None, embedder))
    scores = [matcher.match(f"Refund order ORD{n} please") for n in (1044, 1045, 2001)]
    assert [m.score if m else None for m in scores] == [pytest.approx(0.6, abs=1e-3)] * 3
    assert embedder.seen.count("Refund order ID please") == 1
    assert matcher.match("Refund order ORD1044 now") is None  # another text: embedded anew
    assert embedder.seen.count("Refund order ID now") == 1


def test_chinese_messages_are_not_compared_by_embedding(tmp_path: Path) -> None:
    source = registry(tmp_path, **{"refund-request": {"examples": ["I want a refund."]}})
    embedder = AngleEmbedder({"I want a refund.": 1.0})
    matcher = IntentMatcher(source, EmbeddingCache(None, embedder))
    assert matcher.match("我要申请退款") is None
    assert embedder.seen == ["I want a refund."]


def test_the_tables_follow_the_registry(maintenance: WorkflowRegistry, tmp_path: Path) -> None:
    matcher = IntentMatcher(maintenance)
    assert matcher.names() == ["announcement", "equipment-maintenance"]
    assert matcher.match("order overview for ORD1001") is None
    registry(tmp_path, **{"order-overview": {"keywords": ["order overview"]}})
    maintenance.reload()
    match = matcher.match("order overview for ORD1001")
    assert match is not None
    assert match.name == "order-overview"


def test_no_workflows_never_matches() -> None:
    assert NoWorkflows().match("run the maintenance procedure") is None
    assert NoWorkflows().names() == []


def bundled() -> WorkflowRegistry:
    found = WorkflowRegistry(ROOT / "workflows")
    found.reload()
    return found


def skill_messages() -> list[tuple[str, str]]:
    """Every example message and trigger of the bundled skills."""
    out = []
    for path in sorted((ROOT / "skills").glob("*/skill.yaml")):
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for text in [*config.get("examples", []), *config.get("triggers", [])]:
            out.append((path.parent.name, text))
    return out


def test_the_bundled_skills_own_messages_do_not_start_a_workflow() -> None:
    matcher = IntentMatcher(bundled())
    started = [
        (skill, text, match)
        for skill, text in skill_messages()
        if (match := matcher.match(text)) is not None and match.score >= THRESHOLD
    ]
    assert started == []


def test_each_bundled_workflows_examples_and_keywords_start_it() -> None:
    source = bundled()
    matcher = IntentMatcher(source)
    for workflow in source.all():
        intent = workflow.spec.intent
        assert intent.examples, workflow.name
        assert intent.keywords, workflow.name
        messages = [*intent.examples, *(f"could you {k} for me" for k in intent.keywords)]
        for text in messages:
            match = matcher.match(text)
            assert match is not None, text
            assert (match.name, match.score >= THRESHOLD) == (workflow.name, True), text
