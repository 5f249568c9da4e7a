"""``skilldesk workflows list|validate|graph`` (shapes that other tools and CI script against)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from agents.errors import WorkflowLoadError, WorkflowNotFound, WorkflowProblem
from agents.skills.registry import SkillRegistry
from agents.workflows.loader import SUFFIXES, Workflow, line_of, load_workflow, read_workflow
from agents.workflows.mermaid import mermaid
from agents.workflows.registry import WorkflowRegistry, skills_world
from app.cli.common import load_cli_settings
from app.logging import configure_logging
from app.settings import Settings

cli = typer.Typer(help="Author and inspect workflows.", no_args_is_help=True)

WorkflowsDir = Annotated[
    Path | None,
    typer.Option("--workflows-dir", help="Workflows folder [SKILLDESK_WORKFLOWS_DIR]."),
]
SkillsDir = Annotated[
    Path | None,
    typer.Option("--skills-dir", help="Skills the workflows may use [SKILLDESK_SKILLS_DIR]."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


@cli.callback()
def _quiet_logs() -> None:
    # Problems are printed by each command itself; the log (stderr) keeps to real trouble.
    configure_logging("error", "console")


def _world(settings: Settings) -> dict[str, Any]:
    """What workflows may name: the installed skills and tools, the model profiles (not
    checked when no model is configured: every model node then waits for one anyway)."""
    skills = SkillRegistry(settings.skills_dir)
    skills.reload()
    world = skills_world(skills)
    models = settings.models()
    if models is not None:
        world["profiles"] = set(models.profiles)
    return world


def _registry(settings: Settings, *, world: bool = True) -> WorkflowRegistry:
    registry = WorkflowRegistry(settings.workflows_dir, **(_world(settings) if world else {}))
    registry.reload()
    return registry


@cli.command("list")
def list_workflows(
    workflows_dir: WorkflowsDir = None, skills_dir: SkillsDir = None, as_json: JsonFlag = False
) -> None:
    """List the workflows that load."""
    registry = _registry(load_cli_settings(workflows_dir=workflows_dir, skills_dir=skills_dir))
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
        typer.Argument(help="Workflow files or folders; default: the workflows folder."),
    ] = None,
    workflows_dir: WorkflowsDir = None,
    skills_dir: SkillsDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Check workflows against the installed skills and model profiles; exit status 1 when
    any has a problem (run it in CI)."""
    settings = load_cli_settings(workflows_dir=workflows_dir, skills_dir=skills_dir)
    if not files:
        registry = _registry(settings)
        loaded, errors = registry.names(), list(registry.errors)
    else:
        loaded, errors = _validate_files(files, settings)
    if as_json:
        typer.echo(
            json.dumps({"loaded": loaded, "errors": [vars(p) for p in errors]}, ensure_ascii=False)
        )
    else:
        for name in loaded:
            typer.echo(f"ok      {name}")
        for problem in errors:
            typer.echo(f"error   {problem}")
        typer.echo(f"{len(loaded)} loaded, {len(errors)} problem(s)")
    if errors:
        raise typer.Exit(1)


def _validate_files(
    files: list[Path], settings: Settings
) -> tuple[list[str], list[WorkflowProblem]]:
    """Each file (a folder: each workflow file in it) with every check; a sub-workflow may be
    one of the files or a workflow of the configured folder."""
    world = _world(settings)
    paths = [
        p
        for path in files
        for p in (
            sorted(f for f in path.iterdir() if f.suffix in SUFFIXES) if path.is_dir() else [path]
        )
    ]
    names: dict[Path, str] = {}
    for path in paths:
        with contextlib.suppress(WorkflowLoadError):
            names[path] = read_workflow(path).name
    known = {*names.values(), *_registry(settings, world=False).names()}
    loaded: dict[str, Workflow] = {}
    errors: list[WorkflowProblem] = []
    for path in paths:
        try:
            workflow = load_workflow(path, workflows=known, **world)
        except WorkflowLoadError as exc:
            errors += exc.problems
            continue
        if workflow.name in loaded:
            errors.append(
                WorkflowProblem(
                    str(path),
                    "",
                    line_of(workflow.lines, "name"),
                    f"name: workflow {workflow.name!r} is already defined by "
                    f"{loaded[workflow.name].path}; workflow names are unique — rename one",
                )
            )
            continue
        loaded[workflow.name] = workflow
    return sorted(loaded), errors


@cli.command()
def graph(name: str, workflows_dir: WorkflowsDir = None) -> None:
    """Print workflow NAME as a Mermaid flowchart."""
    registry = _registry(load_cli_settings(workflows_dir=workflows_dir), world=False)
    try:
        workflow = registry.get(name)
    except WorkflowNotFound as exc:
        typer.echo(f"skilldesk: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(mermaid(workflow), nl=False)
