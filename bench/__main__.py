"""Run every benchmark: .venv/bin/python -m bench (make bench)."""

from __future__ import annotations

from bench import (
    cold_start,
    conversation,
    model_client,
    retained_runs,
    retrieval_latency,
    retrieval_quality,
    routing_learning,
    routing_policy,
    skill_context,
    threads,
    tool_isolation,
    tool_server,
    workflow_engine,
    workflow_load,
)

if __name__ == "__main__":
    modules = (
        skill_context,
        tool_server,
        retrieval_quality,
        routing_policy,
        routing_learning,
        retrieval_latency,
        cold_start,
        tool_isolation,
        workflow_engine,
        workflow_load,
        model_client,
        conversation,
        threads,
        retained_runs,
    )
    for module in modules:
        print(f"\n== {module.__name__} ==")
        module.main()
