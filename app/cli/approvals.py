"""``skilldesk approvals list|show|approve|reject``: the approvals workflow runs wait for, in
the store the service uses (the same settings), decided from the command line.

A decision is taken in this process, as a service process takes one: the run goes on here
to its end (or its next approval), and the thread it was started from is told, once no
process is answering that thread. Beside a service on the same PostgreSQL store that is as
safe as a decision through another service process: the run's lease is shared, so a second
decision, here or there, is refused, and a run this command leaves cut off (Ctrl-C) is
resumed by the service. On SQLite too one decision is taken: it is stored only if the run,
as the file holds it at that instant, still waits at the approval (one transaction across
processes), so of two at the same instant the second is refused as a late one is. But the
processes share no leases there: a service that starts while this command runs the run
resumes it too, and a run cut off here waits for the service's next start.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from agents.errors import AlreadyDecided, ApprovalNotFound, RunNotFound, SkilldeskError
from agents.workflows.conversation import Post
from agents.workflows.records import graph_config
from app.cli.approval_views import (
    decided_already,
    nodes_ran,
    past_view,
    pending_view,
    run_view,
    status_words,
    when,
)
from app.cli.common import (
    DataDir,
    JsonFlag,
    StoreUrl,
    Typer,
    load_cli_settings,
    on_the_store,
)
from app.cli.workflows import SkillsDir, WorkflowsDir, ending, store_flags
from app.logging import configure_logging
from app.settings import Settings

cli = Typer(
    help="List, inspect and decide the approvals that workflow runs wait for.\n\n"
    "A decision runs the rest of its run in this process, on the service's store, as "
    "`workflows run` does.",
    no_args_is_help=True,
)
_IDLE_WAIT_S = 600.0  # the most a decided run's outcome waits for its thread's answer

ApprovalArg = Annotated[
    str, typer.Argument(help="The approval's id (`skilldesk approvals list` shows them).")
]
Comment = Annotated[
    str,
    typer.Option(
        "--comment", help="Why: kept with the decision; the run's next nodes may quote it."
    ),
]
By = Annotated[
    str | None,
    typer.Option("--by", help="Who decides, as the decision records it (default: your login)."),
]


@cli.callback()
def _quiet_logs() -> None:
    configure_logging("error", "console")


@cli.command("list")
def list_approvals(
    limit: Annotated[int, typer.Option(min=1, max=500, help="How many.")] = 50,
    thread: Annotated[
        str | None, typer.Option("--thread", help="Only those of runs started on this thread.")
    ] = None,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """The approvals waiting for a decision, newest first: each one's id, when it was asked,
    its workflow run and thread, and what is to be approved."""

    async def job(services: Any) -> tuple[list[dict[str, Any]], int]:
        engine = services.engine
        pending, _ = await engine.approvals_page(limit, None, thread)
        found = []
        for approval in pending:
            try:
                run = await engine.get_run(approval["run_id"])
            except RunNotFound:  # deleted (with its thread) since the page was read
                continue
            found.append(pending_view(run, approval, await _asked(services, run)))
        return found, await engine.waiting()

    found, total = on_the_store(_settings(checkpoint_url, data_dir), job)
    if as_json:
        typer.echo(json.dumps(found, ensure_ascii=False, default=str))
        return
    for a in found:
        where = f"  thread {a['thread_id']}" if a["thread_id"] else ""
        typer.echo(f"{a['approval_id']}  {when(a['asked'])}  {a['workflow']}{where}")
        typer.echo(f"    {' '.join(str(a['summary']).split())[:100]}")
    if not found:
        typer.echo("no approvals waiting")
    elif total > len(found) and thread is None:
        typer.echo(f"({total - len(found)} more waiting: --limit)", err=True)


@cli.command()
def show(
    approval_id: ApprovalArg,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """An approval: pending (what is to be approved, when it was asked), or how it was
    decided (by whom, when, with what comment), or that its run ended without a decision;
    and its workflow run, with the run's status now."""

    async def job(services: Any) -> dict[str, Any]:
        run = await _asked_by(services, approval_id)
        try:
            await services.engine.pending(run, approval_id)
        except AlreadyDecided:
            return past_view(run, approval_id)
        except ApprovalNotFound as exc:  # its run exists, and never asked for it
            raise _unknown(exc) from None
        return pending_view(run, run["waiting"], await _asked(services, run))

    found = on_the_store(_settings(checkpoint_url, data_dir), job)
    if as_json:
        typer.echo(json.dumps(found, ensure_ascii=False, default=str))
        return
    rows = [
        ("approval", found["approval_id"]),
        ("status", status_words(found)),
        ("workflow", f"{found['workflow']} (run {found['run_id']}, now {found['run_status']})"),
        ("thread", found["thread_id"] or "-"),
        ("node", found["node"] or "-"),
    ]
    if found["asked"] is not None:  # known while it waits
        rows.append(("asked", when(found["asked"])))
    rows.append(("summary", " ".join(str(found["summary"] or "-").split())))
    if found["data"] is not None:
        rows.append(("data", json.dumps(found["data"], ensure_ascii=False, default=str)))
    for label, value in rows:
        typer.echo(f"{label:<9} {value}")


@cli.command()
def approve(
    approval_id: ApprovalArg,
    comment: Comment = "",
    by: By = None,
    workflows_dir: WorkflowsDir = None,
    skills_dir: SkillsDir = None,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Approve: the run goes on here, with no new input, to its end or its next approval,
    and the thread it was started from is told. Exit 0 when it ended or waits again, 1 when
    it failed or the approval cannot be decided (unknown, or decided already)."""
    settings = load_cli_settings(
        store=True,
        checkpoint_url=checkpoint_url,
        data_dir=data_dir,
        workflows_dir=workflows_dir,
        skills_dir=skills_dir,
    )
    _decide(
        settings,
        approval_id,
        approved=True,
        comment=comment,
        by=by,
        as_json=as_json,
        flags=store_flags(data_dir, checkpoint_url),
    )


@cli.command()
def reject(
    approval_id: ApprovalArg,
    comment: Comment = "",
    by: By = None,
    workflows_dir: WorkflowsDir = None,
    skills_dir: SkillsDir = None,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Reject: the run follows its approval's reject branch (or ends, CANCELLED) here, and
    the thread it was started from is told. Exit codes as for `approve`."""
    settings = load_cli_settings(
        store=True,
        checkpoint_url=checkpoint_url,
        data_dir=data_dir,
        workflows_dir=workflows_dir,
        skills_dir=skills_dir,
    )
    _decide(
        settings,
        approval_id,
        approved=False,
        comment=comment,
        by=by,
        as_json=as_json,
        flags=store_flags(data_dir, checkpoint_url),
    )


def _decide(
    settings: Settings,
    approval_id: str,
    *,
    approved: bool,
    comment: str,
    by: str | None,
    as_json: bool,
    flags: str = "",
) -> None:
    """Decide ``approval_id``, the run going on here; print how it ended (or waits again:
    the commands to decide it, with ``flags``)."""
    started: list[str] = []
    decider = _login() if by is None else by

    async def job(services: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        before = await _asked_by(services, approval_id)
        try:
            record = await services.workflow_turns.decide(
                approval_id,
                approved=approved,
                by=decider,
                comment=comment,
                post=_between_turns(services),
                on_start=started.append,
            )
        except AlreadyDecided as exc:
            run = await services.engine.asked_by(approval_id)
            raise SkilldeskError(decided_already(run, approval_id, exc.message)) from None
        except ApprovalNotFound as exc:
            raise _unknown(exc) from None
        return before, record

    try:  # the run's nodes as the service runs them: with its skills' retrieval
        before, record = on_the_store(settings, job, light=False)
    except KeyboardInterrupt:
        typer.echo(f"skilldesk: {_interrupted(approval_id, started, settings)}", err=True)
        raise typer.Exit(130) from None
    if as_json:  # as the HTTP API answers a decision
        typer.echo(json.dumps(run_view(record), ensure_ascii=False))
    else:
        typer.echo(f"{'approved' if approved else 'rejected'} {approval_id}")
        for node, mark in nodes_ran(before, record):
            typer.echo(f"  {node}: {mark}")
        typer.echo(ending(record, flags))
    if record.get("status") == "FAILED":
        raise typer.Exit(1)


def _between_turns(services: Any) -> Post:
    """``Conversations.post_between_turns``, saying so if the thread is answering."""

    def waiting(thread_id: str) -> Callable[[], None]:
        return lambda: typer.echo(
            f"skilldesk: thread {thread_id} is answering a message in another process; "
            "its run's outcome is written there once the answer is done",
            err=True,
        )

    async def post(thread_id: str, *told: Any) -> None:
        await services.conversations.post_between_turns(
            thread_id, *told, wait_s=_IDLE_WAIT_S, waiting=waiting(thread_id)
        )

    return post


async def _asked_by(services: Any, approval_id: str) -> dict[str, Any]:
    """The record of the run that asked for ``approval_id`` (see ``asked_by``)."""
    try:
        record: dict[str, Any] = await services.engine.asked_by(approval_id)
    except ApprovalNotFound as exc:
        raise _unknown(exc) from None
    return record


def _unknown(exc: ApprovalNotFound) -> SkilldeskError:
    return SkilldeskError(f"{exc.message}; `skilldesk approvals list` lists those waiting")


def _settings(checkpoint_url: str | None, data_dir: Path | None) -> Settings:
    return load_cli_settings(store=True, checkpoint_url=checkpoint_url, data_dir=data_dir)


async def _asked(services: Any, run: dict[str, Any]) -> float | None:
    """When a waiting run asked for its approval: as its record says, or (asked before
    records said) the time of its last checkpoint (the step before its gate), None when the
    store no longer has it."""
    asked = (run.get("waiting") or {}).get("asked")
    if isinstance(asked, int | float):
        return float(asked)
    saved = await services.checkpointer.aget_tuple(graph_config(run))
    stamp = saved.checkpoint.get("ts") if saved is not None else None
    return datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None


def _interrupted(approval_id: str, started: list[str], settings: Settings) -> str:
    """What an interrupted decision left: nothing, or a run cut off after it."""
    if not started:
        return f"interrupted before approval {approval_id} was decided: nothing was changed"
    shared = settings.resolved_checkpoint_url.startswith(("postgresql:", "postgres:"))
    who = (
        "a running service resumes it at its next look for runs cut off"
        if shared
        else "the service resumes it at its next start"
    )
    return (
        f"interrupted: approval {approval_id} is decided, and its run {started[0]} was cut off; "
        f"it goes on from its last step where it is resumed ({who})"
    )


def _login() -> str:
    """Who runs this command, for a decision's ``by``; empty when the system cannot say."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name, nor a user of that id
        return ""
