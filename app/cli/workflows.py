"""``skilldesk workflows list|validate|graph|run|runs`` (shapes other tools and CI script
against)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from pathlib import Path
from typing import Annotated, Any, get_args
from urllib.parse import urlsplit, urlunsplit

import typer

from agents.errors import BadInputs, WorkflowLoadError, WorkflowNotFound, WorkflowProblem
from agents.owners import tool_owners, workflow_owners
from agents.skills.registry import SkillRegistry
from agents.workflows.inputs import check_inputs
from agents.workflows.loader import Workflow, line_of, load_workflow, read_workflow
from agents.workflows.mermaid import mermaid
from agents.workflows.registry import (
    WorkflowRegistry,
    is_workflow_file,
    nesting_loop,
    skills_world,
)
from agents.workflows.spec import WorkflowSpec
from app.api.schemas.workflows import RunStatus
from app.cli.approval_views import run_view
from app.cli.common import DataDir, JsonFlag, Typer, load_cli_settings, report_validation
from app.logging import configure_logging
from app.settings import Settings

cli = Typer(help="Author and inspect workflows.", no_args_is_help=True)

WorkflowsDir = Annotated[
    Path | None,
    typer.Option("--workflows-dir", help="Workflows folder [SKILLDESK_WORKFLOWS_DIR]."),
]
SkillsDir = Annotated[
    Path | None,
    typer.Option("--skills-dir", help="Skills the workflows may use [SKILLDESK_SKILLS_DIR]."),
]


@cli.callback()
def _quiet_logs() -> None:
    # Problems are printed by each command itself; the log (stderr) keeps to real trouble.
    configure_logging("error", "console")


def _world(settings: Settings) -> dict[str, Any]:
    """What workflows may name: the installed skills and tools, the model profiles (not
    checked when no model is configured: every model node then waits for one anyway).
    The service's records of name owners are read, never written: this is not the service."""
    skills = SkillRegistry(settings.skills_dir, tool_owners(settings.data_dir, write=False))
    skills.reload()
    world = skills_world(skills)
    models = settings.models()
    if models is not None:
        world["profiles"] = set(models.profiles)
    return world


def _registry(settings: Settings, *, world: bool = True) -> WorkflowRegistry:
    return _folder(settings, settings.workflows_dir, _world(settings) if world else {})


def _folder(settings: Settings, directory: Path, world: dict[str, Any]) -> WorkflowRegistry:
    """The workflows of ``directory`` as a service serving it would load them."""
    registry = WorkflowRegistry(
        directory, owners=workflow_owners(settings.data_dir, write=False), **world
    )
    registry.reload()
    return registry


@cli.command("list")
def list_workflows(
    workflows_dir: WorkflowsDir = None,
    skills_dir: SkillsDir = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """List the workflows that load."""
    registry = _registry(
        load_cli_settings(
            records=True, workflows_dir=workflows_dir, skills_dir=skills_dir, data_dir=data_dir
        )
    )
    rows = [
        {
            "name": w.name,
            "version": w.spec.version,
            "description": w.spec.description,
            "nodes": [n.id for n in w.spec.nodes],
        }
        for w in registry.all()
    ]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    for w in registry.all():
        typer.echo(f"{w.name:<24} v{w.spec.version}  {', '.join(n.id for n in w.spec.nodes)}")
        typer.echo(f"    {w.spec.description[:100]}")
    if registry.errors:
        typer.echo(
            f"({len(registry.errors)} problem(s): run `skilldesk workflows validate`)", err=True
        )


@cli.command()
def validate(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Workflow files (checked as if added to the workflows folder) or folders "
            "(each checked on its own); default: the workflows folder."
        ),
    ] = None,
    workflows_dir: WorkflowsDir = None,
    skills_dir: SkillsDir = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Check workflows against the installed skills and model profiles; exit status 1 when
    any has a problem (run it in CI). A name two files declare goes to the one the
    service's data folder records. A folder given is checked on its own, as a service serving
    it would load it; a file given, as if added to the configured folder."""
    settings = load_cli_settings(
        records=True, workflows_dir=workflows_dir, skills_dir=skills_dir, data_dir=data_dir
    )
    if not files:
        registry = _registry(settings)
        loaded, errors = registry.names(), list(registry.errors)
    else:
        loaded, errors = _validate_files(files, settings)
    report_validation(loaded, errors, as_json=as_json)


def _validate_files(
    files: list[Path], settings: Settings
) -> tuple[list[str], list[WorkflowProblem]]:
    """Each folder on its own, as a service serving it would load it (as ``--workflows-dir``
    does); the files (but those of a folder given) as if added to the configured folder: with
    every check, a name must not be another file's there, and a sub-workflow may be one of the
    files or a workflow of the configured folder."""
    world = _world(settings)
    folders: dict[Path, Path] = {}  # each folder once, as first given
    for path in files:
        if path.is_dir():
            folders.setdefault(path.resolve(), path)
    loaded: set[str] = set()
    errors: list[WorkflowProblem] = []
    for directory in folders.values():
        registry = _folder(settings, directory, world)
        loaded.update(registry.names())
        errors += registry.errors
    # A file of a folder given is checked with it (a file its registry reads: not hidden).
    paths = [
        p
        for p in files
        if not p.is_dir() and not (p.parent.resolve() in folders and is_workflow_file(p))
    ]
    if paths:
        names, problems = _files_in_folder(paths, settings, world)
        loaded.update(names)
        errors += problems
    return sorted(loaded), errors


def _files_in_folder(
    paths: list[Path], settings: Settings, world: dict[str, Any]
) -> tuple[list[str], list[WorkflowProblem]]:
    """``paths`` as if added to the configured folder (a file of it stands for itself)."""
    # Each sub-workflow by its definition, so a child that can wait for an approval is found.
    folder = {w.name: w for w in _registry(settings, world=False).all()}
    known: dict[str, WorkflowSpec] = {name: w.spec for name, w in folder.items()}
    for path in paths:
        with contextlib.suppress(WorkflowLoadError):
            read = read_workflow(path)
            known[read.name] = read.spec
    loaded: dict[str, Workflow] = {}
    errors: list[WorkflowProblem] = []
    for path in paths:
        try:
            workflow = load_workflow(path, workflows=known, **world)
        except WorkflowLoadError as exc:
            errors += exc.problems
            continue
        there = loaded.get(workflow.name) or folder.get(workflow.name)
        if there is not None and there.path.resolve() != workflow.path.resolve():
            # As the service would find them: another file of the files given, or of the
            # configured folder, already defines the name.
            errors.append(
                WorkflowProblem(
                    str(path),
                    "",
                    line_of(workflow.lines, "name"),
                    f"name: workflow {workflow.name!r} is already defined by "
                    f"{there.path}; workflow names are unique — rename one",
                )
            )
            continue
        loaded[workflow.name] = workflow
    serving = {**folder, **loaded}
    for name, workflow in list(loaded.items()):
        looped = nesting_loop(workflow, serving)  # workflows that run each other
        if looped:
            errors += [workflow.problem(f) for f in looped]
            del loaded[name]
    return sorted(loaded), errors


@cli.command()
def graph(name: str, workflows_dir: WorkflowsDir = None) -> None:
    """Print workflow NAME as a Mermaid flowchart; exit 2 for a name that is not a workflow
    that loads (as ``run`` does)."""
    registry = _registry(load_cli_settings(workflows_dir=workflows_dir), world=False)
    try:
        workflow = registry.get(name)
    except WorkflowNotFound as exc:
        typer.echo(f"skilldesk: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(mermaid(workflow), nl=False)


@cli.command()
def run(
    name: str,
    input_json: Annotated[
        str,
        typer.Option(
            "--input", help='The inputs as a JSON object, e.g. \'{"order_id": "ORD1001"}\'.'
        ),
    ] = "{}",
    thread: Annotated[str | None, typer.Option(help="The conversation it belongs to.")] = None,
    workflows_dir: WorkflowsDir = None,
    skills_dir: SkillsDir = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a workflow in-process: each node as it finishes, then how it ended. Exit 0 when it
    succeeded or waits for an approval, 1 when it failed, 2 for bad inputs or names or a
    configuration error (a store that does not answer, say)."""
    try:
        inputs = json.loads(input_json)
    except json.JSONDecodeError as exc:
        typer.echo(f"skilldesk: --input is not JSON ({exc.msg} at position {exc.pos})", err=True)
        raise typer.Exit(2) from None
    if not isinstance(inputs, dict):
        typer.echo("skilldesk: --input must be a JSON object of input names", err=True)
        raise typer.Exit(2)
    settings = load_cli_settings(
        workflows_dir=workflows_dir, skills_dir=skills_dir, data_dir=data_dir
    )
    record = asyncio.run(_run(settings, name, inputs, thread, quiet=as_json))
    if as_json:  # as the HTTP API shows a run
        typer.echo(json.dumps(run_view(record), ensure_ascii=False))
    else:
        typer.echo(ending(record, store_flags(data_dir)))
    if record["status"] == "FAILED":
        raise typer.Exit(1)


@cli.command()
def runs(
    name: Annotated[str | None, typer.Argument(help="Only this workflow's runs.")] = None,
    status: Annotated[
        str | None, typer.Option(help="RUNNING, WAITING, SUCCEEDED, FAILED or CANCELLED.")
    ] = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Execution records, newest first."""
    allowed = get_args(RunStatus)
    if status is not None and status not in allowed:
        typer.echo(
            f"skilldesk: --status {status!r} is not a run status; use one of " + ", ".join(allowed),
            err=True,
        )
        raise typer.Exit(2)
    settings = load_cli_settings(store=True, data_dir=data_dir)
    records = asyncio.run(_runs(settings, name, status))
    if as_json:  # as the HTTP API lists runs
        typer.echo(json.dumps([run_view(r) for r in records], ensure_ascii=False))
        return
    for r in records:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
        typer.echo(
            f"{r['id']}  {r['workflow']:<24} {r['status']:<9} {started}  {r['thread_id'] or ''}"
        )


async def _run(
    settings: Settings, name: str, inputs: dict[str, Any], thread: str | None, *, quiet: bool
) -> dict[str, Any]:
    async with _services(settings) as services:
        record: dict[str, Any] = {}
        try:
            if thread is not None:  # made, so that it is told how the run ends after approval
                check_inputs(services.workflow_registry.get(name).spec, inputs)
                await services.threads.ensure(thread, owner=None, title=f"Workflow {name}")
            async for event in services.engine.stream(name, inputs, thread_id=thread):
                kind = event.get("type")
                if kind in ("workflow_waiting", "workflow_ended"):  # it waits, or is over
                    record = event["record"]
                elif kind == "node_finished" and not quiet:
                    mark = "ok" if event.get("ok") else f"failed: {event.get('error')}"
                    typer.echo(f"  {event['node']}: {mark}")
        except (BadInputs, WorkflowNotFound) as exc:
            typer.echo(f"skilldesk: {exc}", err=True)
            raise typer.Exit(2) from None
        return record


async def _runs(settings: Settings, name: str | None, status: str | None) -> list[dict[str, Any]]:
    async with _services(settings) as services:
        records: list[dict[str, Any]] = await services.engine.list_runs(
            workflow=name, status=status
        )
        return records


def _services(settings: Settings) -> Any:
    # Lazy: the whole service (skills, graph, checkpointer) loads only for these commands.
    from app.services import open_services

    # Without background work: beside a live server (on SQLite especially, where no lease
    # tells its runs apart) a command must not resume the runs it has under way.
    return open_services(settings, watch=False, background=False)


def store_flags(data_dir: Path | None, checkpoint_url: str | None = None) -> str:
    """The options that named the store of a command, to repeat in the commands it suggests
    (`` --data-dir DIR``); empty when the settings named it. A URL's password is never
    repeated (terminals and CI logs keep what is printed): ``***`` stands for it."""
    flags = [] if data_dir is None else ["--data-dir", str(data_dir)]
    flags += [] if checkpoint_url is None else ["--checkpoint-url", _unsecret(checkpoint_url)]
    return "".join(f" {shlex.quote(flag)}" for flag in flags)


def _unsecret(url: str) -> str:
    """``url`` with its password, if it has one, as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=user + host))


def ending(record: dict[str, Any], flags: str = "") -> str:
    """How a run ended, or the approval it waits for and the commands that decide it (with
    ``flags``, the options that name the store: ``store_flags``)."""
    status = record.get("status")
    if status == "WAITING":
        waiting = record.get("waiting") or {}
        approval = waiting.get("approval_id")
        return (
            f"{record['id']} WAITING for approval {approval}: {waiting.get('summary')}\n"
            f"(decide with `skilldesk approvals approve {approval}{flags}` or "
            f"`skilldesk approvals reject {approval}{flags}`)"
        )
    if status == "SUCCEEDED":
        message = (record.get("outputs") or {}).get("message") or ""
        return f"{record['id']} SUCCEEDED\n{message}".rstrip()
    return f"{record['id']} {status}: {record.get('error')}"
