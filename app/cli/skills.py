"""``skilldesk skills list|validate|search|new|examples`` (shapes other tools script against)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from agents.errors import SkillProblem
from agents.owners import tool_owners
from agents.skills.embeddings import MiniLMEmbedder
from agents.skills.loader import SKILL_FILE
from agents.skills.registry import SkillRegistry, skill_folders
from agents.skills.scaffold import scaffold
from agents.skills.service import SkillService
from app.cli.common import (
    DataDir,
    JsonFlag,
    StoreUrl,
    Typer,
    check_data_dir,
    load_cli_settings,
    report_validation,
)
from app.logging import configure_logging
from app.settings import Settings

cli = Typer(help="Author and inspect skills.", no_args_is_help=True)

SkillsDir = Annotated[
    Path | None, typer.Option("--skills-dir", help="Skills folder [SKILLDESK_SKILLS_DIR].")
]


@cli.callback()
def _quiet_logs() -> None:
    # Problems are printed by each command itself; the log (stderr) keeps to real trouble.
    configure_logging("error", "console")


def _settings(
    skills_dir: Path | None, data_dir: Path | None = None, *, records: bool = False
) -> Settings:
    return load_cli_settings(records=records, skills_dir=skills_dir, data_dir=data_dir)


def _registry(
    directory: Path, data_dir: Path | None, extra: tuple[Path, ...] = ()
) -> SkillRegistry:
    # The service's record of tool owners is read, never written: this is not the service.
    owners = tool_owners(data_dir, write=False) if data_dir is not None else None
    registry = SkillRegistry(directory, owners, extra)
    registry.reload()
    return registry


@cli.command("list")
def list_skills(
    skills_dir: SkillsDir = None, data_dir: DataDir = None, as_json: JsonFlag = False
) -> None:
    """List the skills that load."""
    settings = _settings(skills_dir, data_dir, records=True)
    registry = _registry(settings.skills_dir, settings.data_dir)
    rows: list[dict[str, Any]] = [
        {
            "name": s.name,
            "description": s.description,
            "tools": [t.name for t in s.tools],
            "pinned": s.config.pinned,
            "instruction_only": s.instruction_only,
        }
        for s in registry.all()
    ]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    for row in rows:
        tools = ", ".join(row["tools"]) or "instruction-only"
        typer.echo(f"{row['name']:<24} {tools}\n    {row['description'][:100]}")
    if registry.errors:
        typer.echo(
            f"({len(registry.errors)} problem(s): run `skilldesk skills validate`)", err=True
        )


@cli.command()
def validate(
    directory: Annotated[
        Path | None,
        typer.Argument(help="A skills folder, or one skill's folder; default: the skills folder."),
    ] = None,
    as_json: JsonFlag = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail on the spec's limits a skill breaks but still loads with (a long "
            "description, a name in another case than its folder).",
        ),
    ] = False,
    alone: Annotated[
        bool,
        typer.Option(
            "--alone",
            help="Check one skill's folder by itself, not beside the installed skills.",
        ),
    ] = False,
    skills_dir: SkillsDir = None,
    data_dir: DataDir = None,
) -> None:
    """Check every skill; exit status 1 when any has a problem (with --strict, a warning
    about the Agent Skills spec too).

    One skill's folder (a candidate, say, kept outside the skills folder) is checked as if
    it were dropped into the skills folder: beside the installed skills, with the service's
    record of tool owners, so that a name one of them holds is refused as the service
    refuses it; a folder of an installed skill's name is checked as its new version. With
    --alone it is checked by itself.

    A tool two skills declare goes to the one the service's data folder records (the
    configured one, or --data-dir; for a skills folder given as DIRECTORY, or --alone, only
    --data-dir)."""
    if directory is not None and (directory / SKILL_FILE).is_file():
        loaded, errors, registry = _validate_one(directory, alone, skills_dir, data_dir)
    else:
        if directory is None:
            settings = _settings(skills_dir, data_dir, records=True)
            target, data_dir = settings.skills_dir, settings.data_dir
        else:
            target = directory
            if data_dir is not None:  # the settings' folder is not read for DIRECTORY
                check_data_dir(data_dir, "--data-dir")
        if not target.is_dir():
            typer.echo(f"skilldesk: {target} is not a folder", err=True)
            raise typer.Exit(2)
        registry = _registry(target, data_dir)
        loaded = [s.name for s in registry.all()]
        errors = list(registry.errors)
    warnings = [w for s in registry.all() if s.name in loaded for w in s.all_warnings]
    if strict:
        errors, warnings = [*errors, *warnings], []
    report_validation(loaded, errors, as_json=as_json, warnings=warnings)


def _validate_one(
    folder: Path, alone: bool, skills_dir: Path | None, data_dir: Path | None
) -> tuple[list[str], list[SkillProblem], SkillRegistry]:
    """What loads of one skill's folder, and its problems: by itself (``alone``), else as
    if it were in the configured skills folder, beside the skills installed there."""
    name = folder.name
    if alone:
        if data_dir is not None:
            check_data_dir(data_dir, "--data-dir")
        with tempfile.TemporaryDirectory() as nothing:  # a skills folder with no other skill
            registry = _registry(Path(nothing), data_dir, (folder,))
    else:
        settings = _settings(skills_dir, data_dir, records=True)
        installed = skill_folders(settings.skills_dir)
        in_place = name in installed and installed[name].resolve() == folder.resolve()
        if not in_place:
            others = len(installed) - (name in installed)
            replaces = (
                f", as the new version of the installed {name!r}" if name in installed else ""
            )
            typer.echo(
                f"checking {name} as if in {settings.skills_dir}, beside the {others} skill(s) "
                f"installed there{replaces} (--alone: by itself)",
                err=True,
            )
        registry = _registry(settings.skills_dir, settings.data_dir, (folder,))
    errors = [p for p in registry.errors if p.skill == name]
    if name.startswith((".", "_")):  # the service skips such a folder: it would not load
        errors.insert(
            0,
            SkillProblem(
                name,
                "",
                "",
                "the service skips a folder whose name starts with '.' or '_' (hidden, or "
                "put aside), so this skill would not load — rename the folder",
            ),
        )
    return ([name] if name in registry and not errors else []), errors, registry


@cli.command()
def search(
    query: Annotated[list[str] | None, typer.Argument(help="Words of one query.")] = None,
    queries_file: Annotated[Path | None, typer.Option(help="One query per line.")] = None,
    skills_dir: SkillsDir = None,
    k: Annotated[int, typer.Option(min=1, max=100, help="Results per query.")] = 5,
    as_json: JsonFlag = False,
) -> None:
    """Search the skills index; with --queries-file the index is built once for all."""
    queries = [" ".join(query)] if query else []
    if queries_file is not None:
        queries += [
            q.strip() for q in queries_file.read_text(encoding="utf-8").splitlines() if q.strip()
        ]
    if not queries:
        typer.echo("skilldesk: give a QUERY or --queries-file", err=True)
        raise typer.Exit(2)
    options = _settings(skills_dir).skills_options()
    # One command, a few queries: the encoder is not traced (the same vectors, ~0.8 s less).
    quick = None if options.embedding_model else MiniLMEmbedder(options.embedding_precision, False)
    service = SkillService(options, embedder=quick)
    service.reload()
    for text in queries:
        started = time.perf_counter()
        hits = service.search(text, k=k)
        ms = (time.perf_counter() - started) * 1000
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "query": text,
                        "results": [{"name": h.name, "score": h.score} for h in hits],
                        "ms": round(ms, 3),
                    },
                    ensure_ascii=False,
                )
            )
        else:
            typer.echo(f"{text}  ({ms:.1f} ms)")
            for hit in hits:
                typer.echo(f"  {hit.score:.3f}  {hit.name}")


@cli.command()
def new(name: str, skills_dir: SkillsDir = None) -> None:
    """Scaffold a valid skill folder NAME (SKILL.md, skill.yaml, handler.py)."""
    target = _settings(skills_dir).skills_dir
    try:
        folder = scaffold(target, name)
    except ValueError as exc:
        typer.echo(f"skilldesk: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"created {folder}; edit SKILL.md and skill.yaml, then `skilldesk skills validate {folder}`"
    )


@cli.command()
def examples(
    name: Annotated[str, typer.Argument(help="The skill.")],
    delete: Annotated[
        str | None, typer.Option("--delete", help="Delete the learned example with this id.")
    ] = None,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """List the examples routing learned for skill NAME from use (users' messages whose
    skill the model chose), newest first, or delete one (--delete ID), in the service's store;
    a running service on the same store stops routing by it within five seconds."""
    import asyncio
    from dataclasses import asdict

    from app.services import open_services

    settings = load_cli_settings(store=True, checkpoint_url=checkpoint_url, data_dir=data_dir)
    light = settings.model_copy(update={"skills_embeddings": False})

    async def job() -> tuple[bool, list[dict[str, Any]]]:
        async with open_services(light, watch=False, background=False) as services:
            assert services.learned is not None
            deleted = delete is not None and await services.learned.delete(name, delete)
            found = [asdict(e) for e in await services.learned.examples(name)]
            return deleted, found

    deleted, found = asyncio.run(job())  # a store that does not answer: exit 2, naming it
    if delete is not None and not deleted:
        typer.echo(
            f"skilldesk: skill {name!r} has no learned example {delete!r}; "
            f"`skilldesk skills examples {name}` lists them",
            err=True,
        )
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps({"skill": name, "examples": found}, ensure_ascii=False))
        return
    if delete is not None:
        typer.echo(f"deleted {delete}")
    if not found:
        typer.echo(f"no learned examples for {name}")
    for e in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["created"]))
        typer.echo(
            f"{e['id']}  {when}  {e['status']:<9}  {e['how']:<10}  thread {e['thread_id']}  "
            f"{e['text']}"
        )
