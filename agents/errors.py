"""Every error Skilldesk raises on purpose, in one hierarchy.

Two kinds (STYLE §7): authoring and configuration mistakes (``ConfigError``, with a fix-it
hint, found at load time) and runtime failures. Each class has a stable ``code``: the API
layer maps errors to HTTP statuses by class in one place (``app/api/errors.py``), and a tool
failure reaches the model as ``error (<code>): <message>``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from agents.echo import few


class SkilldeskError(Exception):
    """Base class of every error Skilldesk raises on purpose.

    Args:
        message: What happened, in words the reader (a user, an operator) can act on.
        code: Overrides the class's stable machine-readable code.
    """

    code: ClassVar[str] = "skilldesk_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]  # an instance may be more precise
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


# Authoring and configuration mistakes.


class ConfigError(SkilldeskError):
    """A configuration or authoring mistake, found at load time.

    Args:
        message: What is wrong, naming the setting, file or profile.
        fix: How to fix it, in one sentence.
    """

    code = "config_error"

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.fix}" if self.fix else self.message


@dataclass(frozen=True)
class SkillProblem:
    """One thing wrong with a skill: where, what, and how to fix it."""

    skill: str
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}" + (f" [{self.field}]" if self.field else "")
        return f"skill {self.skill!r}, {where}: {self.message}"


class SkillLoadError(ConfigError):
    """A skill folder that cannot be loaded; ``problems`` says every reason, each naming the
    file and the field."""

    code = "invalid_skill"

    def __init__(self, problems: Sequence[SkillProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class WorkflowProblem:
    """One thing wrong with a workflow file: the file, the node id ("" for the file as a
    whole), the line the YAML parser gives (0 when there is none) and what to do."""

    file: str
    node: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: " + (f"node {self.node!r}: " if self.node else "") + self.message


class WorkflowLoadError(ConfigError):
    """A workflow file that cannot be loaded; ``problems`` says every reason, each naming the
    file, the node and the line."""

    code = "invalid_workflow"

    def __init__(self, problems: Sequence[WorkflowProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = list(problems)


# What a request asked for that is not there, or cannot be taken.


class InvalidTurn(SkilldeskError):
    """Client messages that cannot become a turn; ``param`` names the offending message."""

    code = "invalid_request"

    def __init__(self, code: str, message: str, param: str) -> None:
        super().__init__(message, code=code)
        self.param = param


def _not_found(kind: str, name: str, known: Sequence[str], reason: str) -> str:
    """Why no ``kind`` ``name`` serves: ``reason`` when one is there but not serving, else
    that there is none, with the close names among ``known``."""
    if reason:
        return f"{kind} {name!r} is not available: {reason}"
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"no {kind} named {name!r}{hint}"


class SkillNotFound(SkilldeskError, LookupError):
    """No skill (or tool) by that name is serving; the message suggests close names, or says
    why a skill of that name is not serving (its folder did not load).

    Args:
        kind: ``"skill"`` or ``"tool"``.
        name: The name asked for.
        known: The names there are, for the suggestion.
        reason: Why a skill of that name is not serving, when one is there.
    """

    code = "skill_not_found"

    def __init__(self, kind: str, name: str, known: Sequence[str], reason: str = "") -> None:
        super().__init__(_not_found(kind, name, known, reason), code=f"{kind}_not_found")
        self.kind, self.name, self.reason = kind, name, reason


class WorkflowNotFound(SkilldeskError, LookupError):
    """No workflow by that name is serving: ``unknown_workflow`` when there is none (the
    message suggests close names and lists the installed ones), ``workflow_unavailable``
    when there is one that does not serve (the message says why: its file is broken, a tool
    it needs is missing). Every surface (chat, the workflow routes, the tool server, the
    API's handler of agents' errors) answers a workflow asked for by name with its code and
    message.

    Args:
        name: The name asked for.
        known: The names that are serving, for the suggestion and the list.
        reason: Why a workflow of that name is not serving, when one exists.
    """

    code = "unknown_workflow"

    def __init__(self, name: str, known: Sequence[str], reason: str = "") -> None:
        message = _not_found("workflow", name, known, reason)
        if not reason:
            listed = f"installed: {few(sorted(known))}" if known else "no workflows are installed"
            message = f"{message} ({listed})"
        code = "workflow_unavailable" if reason else "unknown_workflow"
        super().__init__(message, code=code)
        self.name, self.reason = name, reason


class SkillReferenceError(SkilldeskError):
    """A reference path outside the skill's folder (``outside``), or one that names nothing
    there; ``reason`` is the message without the skill's references it lists."""

    code = "bad_reference"

    def __init__(self, message: str, *, reason: str = "", outside: bool = False) -> None:
        super().__init__(message)
        self.reason, self.outside = reason or message, outside


# Runtime limits and failures.


class BudgetExceeded(SkilldeskError):
    """The run used up its model or tool calls."""

    code = "budget_exhausted"


class HandlersBusy(SkilldeskError):
    """Every handler thread is taken (hung handlers keep theirs)."""

    code = "busy"


class HandlerExit(SkilldeskError):
    """A handler raised what is not a plain Exception (SystemExit, KeyboardInterrupt,
    CancelledError) or a StopIteration: a failed call, not a stopped service or run."""

    code = "tool_failed"


class HandlerFailed(SkilldeskError):
    """A handler raised, or returned what cannot be made JSON."""

    code = "tool_failed"


class FailedForGood(HandlerFailed):
    """A workflow node failed in a way its retries cannot mend (a sub-workflow that waits
    for an approval): the node fails at once, its ``on_error`` applies."""


class HandlerCrashed(SkilldeskError):
    """A handler's worker process died during the call (a crash, a CPU or memory limit)."""

    code = "tool_failed"


class HandlerImportFailed(SkilldeskError):
    """A skill's handler module could not be imported."""

    code = "handler_import_failed"


class SchemaUnusable(SkilldeskError):
    """A JSON Schema could not check a value (a pattern Python's re does not compile, a $ref
    to nothing): what the load check refuses in a tool's schema, should one get through."""

    code = "invalid_schema"


class TemplateFailed(SkilldeskError):
    """A workflow template could not be rendered with the run's values."""

    code = "template_failed"


class WorkflowFailed(SkilldeskError):
    """A workflow node failed and its ``on_error`` is ``fail``: the run ends FAILED.

    Args:
        message: What failed, naming the node.
        node: The node's id, when one node failed (its record shows the error).
        error: That node's own error.
        ms: How long the node ran, its tries together.
        visits: How many times the node ran in the run, this one included.
    """

    code = "workflow_failed"

    def __init__(
        self,
        message: str,
        *,
        node: str | None = None,
        error: str = "",
        ms: float | None = None,
        visits: int | None = None,
    ) -> None:
        super().__init__(message)
        self.node, self.error, self.ms, self.visits = node, error, ms, visits


class BadInputs(SkilldeskError):
    """Inputs a workflow cannot start with (missing, wrong type, not allowed).

    Args:
        message: Every input that is wrong, each named, and why.
        param: The first of them as a request's field (``inputs.order_id``), when one is.
    """

    code = "invalid_inputs"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class KeyReused(SkilldeskError):
    """An idempotency key sent again with a different request than the one it started."""

    code = "idempotency_key_reused"

    @classmethod
    def for_message(cls, key: str, thread_id: str, run_id: str) -> KeyReused:
        """A chat turn's key that came before with another message, or the same message
        for another skill, workflow or model profile."""
        return cls(
            f"Idempotency-Key {key!r} came before with another message (or the same one "
            f"for another skill, workflow or profile) on thread {thread_id!r} (run {run_id}); "
            "send a new request with a new key"
        )


class RunNotFound(SkilldeskError, LookupError):
    """No workflow run (or pending approval) by that id."""

    code = "run_not_found"


class ApprovalNotFound(RunNotFound):
    """No approval by that id was ever asked (a pending or past one is found)."""

    code = "approval_not_found"


class AlreadyDecided(SkilldeskError):
    """The approval was decided already (or its run is no longer waiting)."""

    code = "already_decided"


class RunStatusConflict(SkilldeskError):
    """A workflow run is not in the status a request needs: a fork needs it ended (it waits
    for a decision, ``run_waiting``, or is under way, ``run_running``); a cancel needs it not
    ended (``run_ended``), and not a step of a run under way (``run_is_step``)."""

    code = "run_running"


class ModelError(SkilldeskError):
    """A model call failed after its retries and fallbacks.

    Args:
        message: What happened, in words a user of the chat can act on: it reaches every
            client (a run's failure, an error event). Never the provider's own text, which
            may quote keys, internal ids or hosts.
        profile: The model profile that was asked.
        code: A stable machine-readable code (``model_timeout``, ``model_unavailable``...).
        detail: For the service's operator, logged, never sent: the profiles tried, what
            to check, what the provider said.
    """

    code = "model_error"

    def __init__(
        self, message: str, *, profile: str, code: str = "model_error", detail: str = ""
    ) -> None:
        super().__init__(message, code=code)
        self.profile = profile
        self.detail = detail


class ProfileUnusable(SkilldeskError):
    """A model profile's model cannot be built from what the profile says (LangChain knows
    no such provider, a keyword argument the model does not take): no attempt can succeed
    until the profile is fixed."""

    code = "model_misconfigured"


class NoModelConfigured(ModelError):
    """No model profile is configured: the service runs in no-model mode."""

    def __init__(self) -> None:
        super().__init__(NO_MODEL_HINT, profile="default", code="no_model_configured")


NO_MODEL_HINT = (
    "No language model is configured, so I can't answer free-form messages yet. "
    "Set SKILLDESK_MODEL (for example 'openai/gpt-4o-mini'), with SKILLDESK_MODEL_API_BASE "
    "and SKILLDESK_MODEL_API_KEY as your provider needs, or point SKILLDESK_MODELS_FILE "
    "at a models YAML file, then restart the service."
)


# What a provider did, before the gateway turns it into a ModelError (agents/models/errors.py).


class ProviderFault(SkilldeskError):
    """A provider's answer a transport could not use; never leaves the model gateway."""

    code = "model_error"


class ProviderStatusError(ProviderFault):
    """The provider answered with an HTTP error status."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str]) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status_code = status
        self.headers = headers


class MissingKey(ProviderFault):
    """No API key for a provider that needs one."""

    code = "model_auth_failed"

    def __init__(self) -> None:
        super().__init__("no api_key: OPENAI_API_KEY is not set and the profile names none")


class UnreadableReply(ProviderFault):
    """The provider answered with something that is not an OpenAI-shaped JSON reply."""

    code = "model_bad_reply"


class StreamError(ProviderFault):
    """The provider reported an error in a reply it sent as a success (inside a stream that
    had started, or in a 200 body)."""

    code = "model_bad_reply"


class AttachmentRejected(SkilldeskError):
    """A file the attachment store does not take: too large (``attachment_too_large``), a
    type not accepted (``unsupported_media_type``), or content that is not what its type
    says (``media_type_mismatch``)."""

    code = "unsupported_media_type"


class ThreadNotFound(SkilldeskError, LookupError):
    """No thread by that id (or none the caller may see)."""

    code = "thread_not_found"


class CheckpointNotFound(SkilldeskError, LookupError):
    """The thread has no checkpoint by that id (never had, or retention pruned it);
    ``param`` names the request's field that gave the id, when one did."""

    code = "checkpoint_not_found"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class AttachmentNotFound(SkilldeskError, LookupError):
    """The thread has no attachment by that id."""

    code = "attachment_not_found"


class NothingToResume(SkilldeskError):
    """The thread's last run finished: there is no step left to resume."""

    code = "nothing_to_resume"


class ShuttingDown(SkilldeskError):
    """The process is stopping (SIGTERM): it takes no new runs; another process does."""

    code = "shutting_down"


class DependencyUnavailable(SkilldeskError):
    """A server the service needs (Redis) does not answer; the request was not done."""

    code = "dependency_unavailable"


class ThreadBusy(SkilldeskError):
    """The thread is answering a message; the request needs it idle (delete, fork)."""

    code = "thread_busy"
