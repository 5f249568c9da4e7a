"""``skilldesk threads list|show|history|fork|delete|prune``: the conversations in the
store the service uses (the same settings), from the command line."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from langchain_core.messages import BaseMessage
from pydantic import ValidationError

from agents.errors import ThreadBusy
from agents.memory.summaries import summarised_count
from app.api.schemas.threads import ThreadPatch
from app.cli.common import (
    DataDir,
    JsonFlag,
    StoreUrl,
    Typer,
    load_cli_settings,
    on_the_store,
)
from app.logging import configure_logging

cli = Typer(help="List, inspect, branch, delete and prune threads.", no_args_is_help=True)
T = TypeVar("T")

ThreadArg = Annotated[str, typer.Argument(help="The thread's id.")]


@cli.callback()
def _quiet_logs() -> None:
    configure_logging("error", "console")


def _run(url: str | None, data_dir: Path | None, job: Callable[[Any], Awaitable[T]]) -> T:
    """Open the store, run ``job`` on the services; a Skilldesk error exits with status 1, a
    configuration error (a store that does not answer or is not there, say) with 2, as every
    command's. Thread commands need no retrieval: keyword-only skills load at once."""
    settings = load_cli_settings(store=True, checkpoint_url=url, data_dir=data_dir)
    return on_the_store(settings, job)


def _when(stamp: float | str | None) -> str:
    if isinstance(stamp, str):
        return stamp[:19].replace("T", " ")
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "-"


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, default=str))


@cli.command("list")
def list_threads(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many.")] = 20,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """The threads, most recently updated first."""
    records = _run(checkpoint_url, data_dir, lambda s: s.threads.find(limit=limit))
    if as_json:
        _echo_json(records)
        return
    for r in records:
        line = f"{r['thread_id']:<36} {_when(r['updated'])}  {r['status']:<7} {r['messages']:>4}"
        typer.echo(f"{line}  {r['title']}")
    if not records:
        typer.echo("no threads")


@cli.command()
def show(
    thread_id: ThreadArg,
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also the messages a summary took out of the active history (the model "
            "reads the summary instead), with their indexes: fork before one with `threads "
            "fork --before-message N`.",
        ),
    ] = False,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """A thread's record and its active messages (index, speaker, text); with --all, the
    summarised ones before them."""

    async def job(services: Any) -> dict[str, Any]:
        record = await services.threads.get(thread_id)
        values = await services.conversations.state(thread_id)
        first = summarised_count(values.get("summary"))  # as GET /v1/threads/{id} numbers
        summary = values.get("summary") or {}
        messages = [_message(first + i, m) for i, m in enumerate(values.get("messages", []))]
        attachments = values.get("attachments", [])
        found = {
            **record,
            # What the thread holds now: the record counts them when a run ends (one under
            # way or cut off has stored its messages already).
            "messages": first + len(messages),
            "summary": summary,
            "summarised_messages": first,
            "active": messages,
            "attachments": attachments,
        }
        if every:  # the originals kept (retention may have let the oldest go)
            kept = await services.threads.summarised(thread_id, first)
            found["summarised"] = [_message(i, m) for i, m in kept]
        return found

    found = _run(checkpoint_url, data_dir, job)
    if as_json:
        _echo_json(found)
        return
    typer.echo(f"{found['title']}  ({found['thread_id']}, {found['messages']} messages)")
    if found["summary"] and not every:
        typer.echo(
            f"  [summary of {found['summarised_messages']} earlier messages] (--all shows them)"
        )
    elif found["summary"]:
        typer.echo(
            f"  [summary of {found['summarised_messages']} earlier messages] the model reads "
            "it instead of these:"
        )
        _echo_summarised(found["summarised"], found["summarised_messages"])
        typer.echo("  [active messages]")
    for m in found["active"]:
        _echo_message(m)
    for a in found["attachments"]:
        typer.echo(f"  file {a['id']} {a['name']} ({a['media_type']}, {a['size']} bytes)")


def _message(index: int, message: BaseMessage) -> dict[str, Any]:
    return {"index": index, "role": message.type, "content": message.text, "name": message.name}


def _echo_message(m: dict[str, Any]) -> None:
    who = m["role"] + (f":{m['name']}" if m["name"] else "")
    typer.echo(f"  {m['index']:>4} {who:<16} {' '.join(str(m['content']).split())[:100]}")


def _echo_summarised(kept: list[dict[str, Any]], count: int) -> None:
    """The summarised messages whose originals are kept, and where those not kept would be
    (retention let them go, or they were summarised before originals were kept)."""
    expected = 0
    for m in kept:
        if m["index"] > expected:
            _echo_not_kept(expected, m["index"] - 1)
        _echo_message(m)
        expected = m["index"] + 1
    if count > expected:
        _echo_not_kept(expected, count - 1)


def _echo_not_kept(first: int, last: int) -> None:
    which = f"{first}" if first == last else f"{first}-{last}"
    typer.echo(f"  {which:>4} (not kept: only the summary stands for them)")


@cli.command()
def history(
    thread_id: ThreadArg,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many checkpoints.")] = 50,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """A thread's checkpoints, newest first (fork from one with ``threads fork --checkpoint``)."""
    entries = _run(checkpoint_url, data_dir, lambda s: s.threads.history(thread_id, limit=limit))
    if as_json:
        _echo_json(entries)
        return
    for e in entries:
        node = e["node"] or "-"
        typer.echo(
            f"{e['checkpoint_id']}  step {e['step']:>3}  {_when(e['created'])}  {node:<14} "
            f"{e['change']}"
        )


@cli.command()
def fork(
    thread_id: ThreadArg,
    checkpoint: Annotated[
        str | None,
        typer.Option("--checkpoint", help="The checkpoint to start from (see history)."),
    ] = None,
    before_message: Annotated[
        int | None,
        typer.Option(
            "--before-message",
            min=0,
            help="Start from where message N was sent (to send an edited one instead).",
        ),
    ] = None,
    to: Annotated[str | None, typer.Option("--to", help="The new thread's id.")] = None,
    title: Annotated[
        str | None,
        typer.Option(
            "--title",
            help="The new thread's title (default: THREAD_ID's with '(fork)' after it, or "
            "'(edited)' with --edit, numbered when taken: '(edited 2)').",
        ),
    ] = None,
    edit: Annotated[
        bool,
        typer.Option(
            "--edit", help="For an edited message: name it '<title> (edited)', not '(fork)'."
        ),
    ] = False,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """A new thread from one checkpoint of THREAD_ID (which stays as it is): give
    --checkpoint or --before-message."""
    if (checkpoint is None) == (before_message is None):
        raise typer.BadParameter("give exactly one of --checkpoint and --before-message")
    if title is not None:
        try:  # as the API takes a title
            ThreadPatch(title=title)
        except ValidationError:
            raise typer.BadParameter(
                "a title is one line of 1 to 200 characters, not only spaces",
                param_hint="--title",
            ) from None

    async def forked(services: Any) -> Any:
        at = checkpoint
        if at is None:
            assert before_message is not None
            at = await services.threads.checkpoint_before(thread_id, before_message)
        return await services.threads.fork(thread_id, at, new_thread_id=to, title=title, edit=edit)

    record = _run(checkpoint_url, data_dir, forked)
    if as_json:
        _echo_json(record)
        return
    source = record.get("forked_from") or {}
    typer.echo(
        f"forked {thread_id}@{source.get('checkpoint_id')} -> {record['thread_id']}  "
        f"{record.get('title')}"
    )


@cli.command()
def delete(
    thread_id: ThreadArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Delete a thread whose run was cut off (its record says running, no process "
            "runs it) rather than leave it for the service's next start to resume.",
        ),
    ] = False,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Delete a thread: checkpoints, record, attachments. A thread a process is answering is
    refused (exit 1), as is one whose run was cut off unless --force."""
    if not yes:
        typer.confirm(f"Delete thread {thread_id} and everything it holds?", abort=True)

    async def job(services: Any) -> None:
        record = await services.threads.get(thread_id)
        # Its record says running and no process is seen running it: the service stopped or
        # died mid-answer and resumes it at its next start (or, on PostgreSQL, another
        # process will), unless the run is where this process cannot see it (another
        # machine's on a shared file). Threads.delete takes such a thread for idle.
        running = record.get("status") == "running"
        if running and not force and not await services.conversations.busy_anywhere(thread_id):
            raise ThreadBusy(
                f"thread {thread_id!r} was answering a message when its run was cut off "
                "(the service stopped or died); the service resumes it at its next start. "
                "Delete it after, or now with --force",
                code="thread_cut_off",
            )
        await services.threads.delete(thread_id)

    _run(checkpoint_url, data_dir, job)
    typer.echo(f"deleted {thread_id}")


@cli.command()
def prune(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
    keep: Annotated[
        int | None,
        typer.Option(
            min=0, help="Checkpoints kept per thread [SKILLDESK_RETENTION_KEEP_CHECKPOINTS]."
        ),
    ] = None,
    idle_days: Annotated[
        float | None,
        typer.Option(min=0, help="Delete threads idle this long [SKILLDESK_RETENTION_IDLE_DAYS]."),
    ] = None,
    keep_summarised: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Summarised messages whose originals are kept per thread "
            "[SKILLDESK_RETENTION_KEEP_SUMMARISED].",
        ),
    ] = None,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Apply the retention policy now (the service also does, every interval)."""

    async def job(services: Any) -> Any:
        policy = services.threads.retention
        services.threads.retention = replace(
            policy,
            keep_checkpoints=policy.keep_checkpoints if keep is None else keep,
            idle_days=policy.idle_days if idle_days is None else idle_days,
            keep_summarised=policy.keep_summarised if keep_summarised is None else keep_summarised,
        )
        return await services.threads.prune(dry_run=dry_run)

    report = _run(checkpoint_url, data_dir, job)
    if as_json:
        _echo_json(vars(report))
        return
    verb = "would delete" if dry_run else "deleted"
    gone = report.summarised_deleted
    typer.echo(
        f"{verb} {len(report.threads_deleted)} idle thread(s) and "
        f"{report.checkpoints_deleted} old checkpoint(s) of {report.threads_pruned} thread(s)"
        + (f", {gone} summarised message(s) kept no more" if gone else "")
    )
    for thread_id in report.threads_deleted:
        typer.echo(f"  thread {thread_id}")
    if report.skipped_busy:
        typer.echo(f"  skipped (answering): {', '.join(report.skipped_busy)}")
    if report.leases_swept:
        typer.echo(f"  {report.leases_swept} lease(s) and line ticket(s) of dead processes cleared")
