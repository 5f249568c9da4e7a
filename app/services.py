"""What the routes need, built once per process from the settings."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.bus import RunBus, check_redis
from agents.cancelling import stop_tasks
from agents.conversations import Conversations
from agents.errors import NO_MODEL_HINT
from agents.feed import RunFeed
from agents.graph.builder import build_graph
from agents.graph.nodes import AnswerOptions
from agents.models import ModelGateway
from agents.owners import workflow_owners
from agents.prompts import Prompts
from agents.queued_runs import QueuedRuns
from agents.router.learned import LearnedExamples
from agents.router.router import Router, RouterOptions
from agents.run import RunLimits
from agents.skills.registry import ReloadReport
from agents.skills.service import SkillService
from agents.skills.watcher import start_watcher, stop_watcher
from agents.skills.written import WrittenExamples
from agents.state.attachments import AttachmentStore
from agents.state.call_stores import call_journal
from agents.state.checkpointers import check_checkpoint_store, open_checkpointer
from agents.state.documents import documents_for
from agents.state.records import ThreadRecords
from agents.state.spend import SpendLedger
from agents.state.traces import RunTraces
from agents.state.transcript import Transcript
from agents.threads import Threads
from agents.tokens import count_tokens
from agents.toolserver.catalogue import ToolCatalogue
from agents.toolserver.runs import WorkflowTools
from agents.workflows.conversation import WorkflowTurns
from agents.workflows.engine import WorkflowEngine
from agents.workflows.matcher import IntentMatcher, WorkflowMatcher
from agents.workflows.registry import WorkflowRegistry, skills_world
from agents.workflows.watcher import start_workflow_watcher, stop_workflow_watcher
from app.auth.keys import ApiKeys, bootstrap_keys
from app.settings import Settings

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Services:
    """The long-lived parts of a running service."""

    settings: Settings
    gateway: ModelGateway
    checkpointer: BaseCheckpointSaver[Any]
    conversations: Conversations
    skills: SkillService
    workflows: WorkflowMatcher
    workflow_registry: WorkflowRegistry
    engine: WorkflowEngine
    workflow_turns: WorkflowTurns
    threads: Threads
    tools: ToolCatalogue
    keys: ApiKeys
    spend: SpendLedger
    learned: LearnedExamples | None = None  # examples routing learned from use
    bus: RunBus | None = None  # the other processes, through Redis

    def leaving(self) -> bool:
        """Whether this process is stopping and its readers should go on at another one
        (which reads the runs' events from Redis)."""
        return self.bus is not None and self.conversations.stopping is not None

    async def reload(self) -> dict[str, Any]:
        """Read the skills and workflows folders again (an operator's call, which every
        process receives): what loaded and what failed."""
        await self.skills.areload()
        config = self.gateway.config
        profiles = sorted(config.profiles) if config else None
        self.workflow_registry.recheck(profiles=profiles, **skills_world(self.skills.registry))
        await asyncio.to_thread(self.workflow_registry.reload)
        log.info(
            "content.reloaded",
            skills=len(self.skills.registry),
            workflows=len(self.workflow_registry),
        )
        return {
            "skills": sorted(s.name for s in self.skills.registry.all()),
            # Every problem there is now, not only those this reload found first (the
            # folder's watcher may have found them already; a broken edit of a skill that
            # serves its last good version is kept until it is fixed).
            "skill_errors": [str(e) for e in self.skills.registry.errors],
            "workflows": self.workflows.names(),
            "workflow_errors": [str(e) for e in self.workflow_registry.errors],
        }

    @property
    def attachments(self) -> AttachmentStore:
        """The attachment store of every thread."""
        return self.threads.attachments


async def check_stores(settings: Settings) -> None:
    """Reach the checkpoint store and Redis the settings name, before a server starts (the
    server's services are then opened with ``stores_checked``).

    Raises:
        ConfigError: naming the setting whose store cannot be reached.
    """
    await check_checkpoint_store(settings.resolved_checkpoint_url)
    if settings.redis_url:
        await check_redis(settings.redis_url)


@asynccontextmanager
async def open_services(
    settings: Settings,
    *,
    watch: bool | None = None,
    background: bool = True,
    stores_checked: bool = False,
) -> AsyncIterator[Services]:
    """Validate the model profiles, load the skills, open the checkpointer, compile the graph.

    ``background`` (the server's): resume workflow runs a stop cut off, apply retention on
    its interval and record who owns each tool and workflow name; a command-line tool
    opening the same store beside a server does not.
    ``stores_checked``: the caller reached the checkpoint store and Redis already
    (``check_stores``: ``skilldesk serve``, before the server starts), so neither is probed
    again here.
    """
    secret = settings.api_keys.get_secret_value() if settings.api_keys else None
    bootstrap = bootstrap_keys(secret, settings.api_keys_file)  # a bad entry stops start-up
    gateway = ModelGateway(settings.models())
    if not gateway.configured:
        log.warning("model.not_configured", hint=NO_MODEL_HINT)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    for topic, folder, setting in (
        ("skills", settings.skills_dir, "SKILLDESK_SKILLS_DIR"),
        ("workflows", settings.workflows_dir, "SKILLDESK_WORKFLOWS_DIR"),
    ):
        if not folder.is_dir():
            log.warning(
                f"{topic}.folder_missing",
                directory=str(folder),
                fix=f"check {setting}; the folder is created and watched, empty",
            )
    skills = SkillService(replace(settings.skills_options(), record_owners=background))
    await asyncio.to_thread(skills.reload)  # the registry logs each problem (skill.invalid)
    options = AnswerOptions(
        max_rounds=settings.max_tool_rounds,
        index_budget_tokens=settings.skills_prompt_budget,
        joint_budget_tokens=settings.joint_expert_tokens,
        summary=settings.summary_options(),
        note_skills=settings.learn_examples,
    )
    router_options = RouterOptions(
        confident=settings.route_confident,
        ambiguous_floor=settings.route_ambiguous_floor,
        offer_tokens=settings.route_offer_tokens,
        learned=settings.route_learned,
    )
    limits = RunLimits(settings.max_model_calls, settings.max_tool_calls)
    profiles = sorted(gateway.config.profiles) if gateway.config else None
    registry = WorkflowRegistry(
        settings.workflows_dir,
        profiles=profiles,
        owners=workflow_owners(settings.data_dir, write=background),
        **skills_world(skills.registry),
    )
    await asyncio.to_thread(registry.reload)  # logs each problem (workflow.invalid)
    workflows = IntentMatcher(registry, getattr(skills.index, "cache", None))
    watching = settings.skills_watch if watch is None else watch
    prompts = Prompts(settings.prompts_dir)
    writer = None
    if background and settings.skills_write_examples and settings.skills_embeddings:
        path = settings.data_dir / "cache" / "written_examples.sqlite"
        writer = WrittenExamples(path, gateway, prompts)
        writer.refresh(skills)

    def recheck(report: ReloadReport) -> None:
        # Skills changed: workflows naming them are checked again, new versions get examples.
        registry.recheck(profiles=profiles, **skills_world(skills.registry))
        if writer is not None and report.changed_anything:
            writer.refresh(skills)

    watcher = start_watcher(skills, recheck) if watching else None
    workflow_watcher = start_workflow_watcher(registry) if watching else None
    if settings.redis_url and not stores_checked:  # a wrong URL: an error naming the setting
        await check_redis(settings.redis_url)
    bus = (
        RunBus(
            settings.redis_url,
            settings.redis_prefix,
            settings.run_events_retain_s,
            alive_s=settings.run_lease_s,
        )
        if settings.redis_url
        else None
    )
    try:
        url = settings.resolved_checkpoint_url
        async with open_checkpointer(url, checked=stores_checked) as checkpointer:
            skills.runner.journal = call_journal(checkpointer)
            documents = documents_for(checkpointer)
            attachments = AttachmentStore(documents, settings.attachment_options())
            skills.runner.attachments = attachments
            records = ThreadRecords(documents)
            engine = WorkflowEngine(
                registry,
                checkpointer,
                skills=skills,
                gateway=gateway,
                prompts=prompts,
                documents=documents,
                max_rounds=settings.max_tool_rounds,
                lease_s=settings.run_lease_s,
            )
            spend = SpendLedger(documents)
            turns = WorkflowTurns(engine, gateway, prompts, spend, records)
            limit = settings.daily_spend_limit_micro_usd
            tools = ToolCatalogue(
                skills,
                prompts,
                WorkflowTools(registry, engine, partial(spend.refusal, limit=limit)),
                list_skill_tools=settings.mcp_skill_tools_listed(),
            )
            router = Router(skills, gateway, prompts, workflows, router_options)
            transcript = Transcript(documents)
            graph = build_graph(
                gateway,
                checkpointer,
                prompts,
                skills,
                options,
                router=router,
                workflow_turns=turns,
                transcript=transcript,
            )
            log.info(
                "service.ready",
                checkpointer=type(checkpointer).__name__,
                model_profiles=profiles or [],
                skills=len(skills.registry),
                skill_errors=len(skills.registry.errors),
                workflows=len(registry),
                workflow_errors=len(registry.errors),
            )
            # Examples learned before are searched whether or not learning goes on.
            learned = LearnedExamples(documents, skills, settings.learn_options())
            await learned.load()
            conversations = Conversations(
                graph,
                limits,
                router,
                records,
                attachments,
                retain_s=settings.run_events_retain_s,
                lease_s=settings.run_lease_s,
                learner=learned,
                traces=RunTraces(documents),
                mirror=bus,
                queued=QueuedRuns(documents),
            )
            # A decided run resumed here after its deciding process stopped: its thread told.
            engine.after_decision = partial(turns.resumed, post=conversations.post)
            threads = Threads(
                conversations,
                records,
                attachments,
                settings.retention(),
                transcript=transcript,
                workflows=engine,
            )
            engine.watch_threads(threads.exists)  # a run on a deleted thread goes no further
            tasks: list[asyncio.Task[Any]] = []
            # From the first run taken up on, a start-up that fails (Redis refusing the
            # listener, say) stops what it started, as a stop does.
            try:
                if background:
                    # Workflow runs a stopped process left (on PostgreSQL: only those whose
                    # lease expired or whose process, on this machine, is gone; one process
                    # claims each).
                    tasks.append(asyncio.create_task(engine.resume_orphans()))
                    # Conversation runs a stopped or killed process left: resumed here; on
                    # PostgreSQL also those of another process whose lease expired. Taken up
                    # before the first request: a run left waiting is known (queued) at once,
                    # not a 404 until the runs ahead of it ended (QA).
                    left = await taken_up(threads)
                    tasks.append(asyncio.create_task(threads.orphans.follow(left)))
                    if settings.resolved_checkpoint_url.startswith(("postgresql:", "postgres:")):
                        every = settings.run_lease_s
                        tasks.append(asyncio.create_task(threads.orphans.keep_resuming(every)))
                        tasks.append(asyncio.create_task(engine.keep_resuming(every)))
                    # What other processes learn or delete reaches this one.
                    tasks.append(asyncio.create_task(learned.keep_fresh()))
                if background and settings.retention_interval_s > 0:
                    tasks.append(asyncio.create_task(threads.keep_bounded()))
                services = Services(
                    settings,
                    gateway,
                    checkpointer,
                    conversations,
                    skills,
                    workflows,
                    registry,
                    engine,
                    turns,
                    threads,
                    tools,
                    ApiKeys(documents, bootstrap),
                    spend,
                    learned,
                    bus,
                )
                if background and bus is not None:
                    await bus.listen(_handlers(services, tasks))
                yield services
            finally:
                await stop_tasks(tasks)
                # Before the store closes under a run; told to stop (SIGTERM), runs get
                # their grace, and those it cuts off are resumed by another process now.
                cut = await conversations.aclose(settings.shutdown_grace_s)
                # Workflow runs the server cut off (requests past the grace period) let go
                # of while the store is open, then resumed elsewhere at once too.
                cut_runs = await engine.aclose()
                # Tool calls those runs left under way end while the journal can still
                # record them (else the next start would make them again), and before
                # other processes are told to resume the runs.
                await skills.finish_calls()
                if cut and bus is not None:
                    await _told_others(bus, "orphans", threads=cut)
                if cut_runs and bus is not None:
                    await _told_others(bus, "workflow_orphans", runs=cut_runs)
                log.info(
                    "service.stopped", runs_cut_off=len(cut), workflow_runs_cut_off=len(cut_runs)
                )
    finally:
        if bus is not None:
            await bus.aclose()
        if watcher is not None:
            await stop_watcher(*watcher)
        if workflow_watcher is not None:
            await stop_workflow_watcher(*workflow_watcher)
        if writer is not None:
            await writer.aclose()
        await skills.aclose()
        await gateway.aclose()


def _handlers(services: Services, tasks: list[asyncio.Task[Any]]) -> dict[str, Any]:
    """What this process does with what another process publishes (``RunBus.listen``)."""

    def spawn(work: Any) -> None:
        tasks[:] = [t for t in tasks if not t.done()]
        tasks.append(asyncio.create_task(work))

    def orphans(_: object) -> None:  # a stopping process handed its runs over
        if services.conversations.stopping is None:
            spawn(services.threads.orphans.resume())

    def workflow_orphans(body: dict[str, Any]) -> None:  # a stopping process let them go
        if services.conversations.stopping is None:
            spawn(services.engine.resume_orphans([str(r) for r in body.get("runs", [])]))

    return {
        "cancel": lambda body: services.conversations.cancel(str(body.get("run_id"))),
        "reload": lambda _: spawn(services.reload()),
        "orphans": orphans,
        "workflow_orphans": workflow_orphans,
    }


async def _told_others(bus: RunBus, topic: str, **body: Any) -> None:
    """Publish what a stop left for the other processes; Redis failing (a start-up that
    failed on it, say) is logged, not raised over why the service stopped: they find the
    runs at their next look."""
    try:
        await bus.publish(topic, **body)
    except Exception as exc:
        log.warning("service.stop_not_told", topic=topic, error=str(exc))


async def taken_up(threads: Threads) -> list[tuple[str, str | None, RunFeed]]:
    """The runs a stopped process left, started (``OrphanRuns.take_up``); none when the
    store fails now (the next look, or the next start, takes them up)."""
    try:
        return await threads.orphans.take_up()
    except Exception:
        log.exception("thread.orphans_failed")
        return []


async def warm_up(services: Services) -> None:
    """Do at start-up what the first request would otherwise wait for: load and trace the
    query encoder (skill embeddings from the on-disk cache do not need it), load the token
    counter, and import what each model profile's calls need. About 2 s, once; without it
    the first conversation after a restart waited that long, and everything it loaded sat
    outside the frozen heap (see ``freeze_startup_heap``), where full collections walked it.
    """
    started = time.perf_counter()
    await services.skills.index.off_loop(services.skills.search, "warm up the query encoder")
    count_tokens("warm up the token counter")
    services.gateway.warm_up()
    log.info("service.warmed_up", ms=round((time.perf_counter() - started) * 1000))


def freeze_startup_heap() -> None:
    """Take what start-up built (libraries, the embedding model, the skill index, the
    compiled graph: about a million objects) out of the garbage collector's sight, for a
    long-running server. They live as long as the process, yet every full collection walks
    them all: a 0.4-0.5 s stall of every request under way on a 2-core machine, and a share
    of each young collection. Start-up's own garbage is collected first.

    Young collections then come every 20,000 allocations instead of 700: a turn allocates
    tens of thousands of objects (messages, events, checkpoints) and almost none live in
    cycles, so the default ran several collections a turn for nothing (bench/load at
    saturation: 9 % fewer CPU ms a turn, 10 % more turns a second)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)
