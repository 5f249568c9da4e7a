"""The workflow matcher with the real MiniLM encoder, calibrated on the bundled content: the
bundled skills' own questions never start a workflow, the workflows' examples, keywords and
close paraphrases do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.skills.embeddings import EmbeddingCache, MiniLMEmbedder
from agents.workflows.matcher import IntentMatcher
from agents.workflows.registry import WorkflowRegistry

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD = 0.6  # RouterOptions.workflow
MARGIN = 0.1  # how far below the threshold the skills' own messages stay


@pytest.fixture(scope="module")
def matcher() -> IntentMatcher:
    source = WorkflowRegistry(ROOT / "workflows")
    source.reload()
    return IntentMatcher(source, EmbeddingCache(None, MiniLMEmbedder()))


def test_the_bundled_skills_messages_stay_well_below_the_threshold(
    matcher: IntentMatcher,
) -> None:
    scored = []
    for path in sorted((ROOT / "skills").glob("*/skill.yaml")):
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for text in [*config.get("examples", []), *config.get("triggers", [])]:
            match = matcher.match(text)
            scored.append((match.score if match else 0.0, text, match))
    worst = max(scored, key=lambda row: row[0])
    assert worst[0] < THRESHOLD - MARGIN, worst


def test_examples_and_keywords_start_their_workflow(matcher: IntentMatcher) -> None:
    source = matcher.source
    assert isinstance(source, WorkflowRegistry)
    for workflow in source.all():
        intent = workflow.spec.intent
        for text in [*intent.examples, *(f"please {k} now" for k in intent.keywords)]:
            match = matcher.match(text)
            assert match is not None, text
            assert match.name == workflow.name, (text, match)
            assert match.score >= THRESHOLD, (text, match)


@pytest.mark.parametrize(
    ("text", "workflow"),
    [
        ("I'd like a refund for my order ORD1003", "refund-request"),
        ("Take PUMP-08 through diagnosis, work order and approval", "equipment-maintenance"),
    ],
)
def test_a_close_paraphrase_starts_it_by_embedding(
    matcher: IntentMatcher, text: str, workflow: str
) -> None:
    match = matcher.match(text)
    assert match is not None
    assert (match.name, match.score >= THRESHOLD) == (workflow, True), match
    assert match.reason.startswith("like the example")


@pytest.mark.parametrize(
    "text",
    ["What's the weather?", "Is order ORD1001 refundable?", "refund status for ORD1020"],
)
def test_a_related_question_does_not(matcher: IntentMatcher, text: str) -> None:
    match = matcher.match(text)
    assert match is None or match.score < THRESHOLD, match
