"""One gateway for every model call: profiles, retries and fallbacks, LangChain chat models."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from agents import metrics
from agents.errors import ModelError, NoModelConfigured, UnreadableReply
from agents.models.chat_model import GatewayChatModel
from agents.models.config import ModelProfile, ModelsConfig, NodeRole, Price
from agents.models.cost import micro_usd, price_map, price_of
from agents.models.deadline import StreamDeadline
from agents.models.errors import logged, retry_delay, to_model_error
from agents.models.transports import (
    Transport,
    aclose_stream,
    close_stream,
    transport_for,
)
from agents.models.usage import UsageRecorder


class ModelGateway:
    """Hands out chat models by profile name and makes their calls: each profile is tried
    once plus its ``retries`` (transient failures only), then each fallback the same way.

    A streamed call is retried or falls back only until its first chunk has arrived: after
    that, text may already be on its way to the user, and a failure is reported instead.

    Args:
        config: The validated profiles, or ``None`` for no-model mode.
        environ: Where ``api_key_env`` variables are read (defaults to ``os.environ``).
    """

    def __init__(
        self, config: ModelsConfig | None, environ: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self.usage = UsageRecorder()
        self._environ = environ
        self._transports: dict[str, Transport] = {}
        self._prices: dict[str, Price | None] = {}
        self._models: dict[str, GatewayChatModel] = {}

    @property
    def configured(self) -> bool:
        """Whether any model is configured (``False`` in no-model mode)."""
        return self.config is not None

    def chat_model(self, profile: str | None = None, **call_kwargs: Any) -> GatewayChatModel:
        """A LangChain chat model for ``profile`` (the default profile when ``None``)."""
        if self.config is None:
            raise NoModelConfigured()
        name = profile or self.config.default
        self.config.get(name)  # unknown names fail here, naming the known ones
        if call_kwargs:
            return GatewayChatModel(gateway=self, profile_name=name, call_kwargs=call_kwargs)
        # One per profile: the model holds no state of a call, and building one (a pydantic
        # model) is a fair part of a call's own work.
        model = self._models.get(name)
        if model is None:
            model = self._models[name] = GatewayChatModel(gateway=self, profile_name=name)
        return model

    def node_profile(self, node: NodeRole, run_profile: str | None = None) -> str | None:
        """The profile ``node`` calls: the run's when it names one, else the node's setting,
        else the default (``None`` in no-model mode)."""
        return self.config.for_node(node, run_profile) if self.config is not None else None

    def request_params(self, profile: str) -> dict[str, Any]:
        """Per-call request fields a profile sets (temperature, max_tokens, reasoning_effort;
        a LangChain chat model gets its reasoning settings when it is built)."""
        if self.config is None:
            raise NoModelConfigured()
        spec = self.config.get(profile)
        params: dict[str, Any] = {}
        if spec.temperature is not None:
            params["temperature"] = spec.temperature
        if spec.max_tokens is not None:
            params["max_tokens"] = spec.max_tokens
        if spec.reasoning_effort is not None and spec.provider != "langchain":
            params["reasoning_effort"] = spec.reasoning_effort
        return params

    def chain(self, profile: str) -> list[str]:
        """The profile followed by its fallbacks, depth first, each once."""
        if self.config is None:
            return []
        # A stack, not a recursive closure: that made a reference cycle per model call,
        # left to the garbage collector (a few hundred cycles per collection under load).
        order: list[str] = []
        todo = [profile]
        while todo:
            name = todo.pop()
            if name not in order:
                order.append(name)
                todo.extend(reversed(self.config.get(name).fallbacks))
        return order

    async def acomplete(self, profile: str, request: dict[str, Any]) -> Any:
        """One whole completion (OpenAI-shaped), after retries and fallbacks.

        Raises:
            ModelError: when every attempt failed, saying what to check.
        """
        attempts = _Attempts(self, profile)
        started = time.perf_counter()
        for transport, timeout in attempts:
            try:
                # The wait for a slot of the profile's max_connections is this service's
                # queue, not the server's time: the attempt's timeout starts once one is held.
                async with transport.slot() as slot, asyncio.timeout(timeout):
                    reply = self.priced(attempts.current, await transport.acreate(request, slot))
            except Exception as exc:  # _Attempts judges every failure
                await asyncio.sleep(attempts.failed(exc))
            else:
                _observed(attempts.current, "ok", started)
                return reply
        _observed(attempts.current, "failed", started)
        raise attempts.error()

    async def astream(self, profile: str, request: dict[str, Any]) -> AsyncIterator[Any]:
        """The chunks of one streamed completion (``stream=True`` is set here).

        Raises:
            ModelError: when every attempt failed before its first chunk, or the stream
                broke after it.
        """
        attempts = _Attempts(self, profile)
        request = {**request, "stream": True}
        started = time.perf_counter()
        for transport, timeout in attempts:
            stream: Any = None
            try:
                # Timed from a held slot (as in acomplete) until the first chunk; the stream
                # keeps its slot until it is closed.
                async with transport.slot() as slot, asyncio.timeout(timeout):
                    stream = await transport.acreate(request, slot)
                    first = await anext(aiter(stream), None)
                if first is None:
                    raise UnreadableReply(_NO_EVENTS)
            except Exception as exc:  # _Attempts judges every failure
                if stream is not None:
                    await aclose_stream(stream)
                await asyncio.sleep(attempts.failed(exc))
                continue
            except asyncio.CancelledError:  # the stream's connection and slot go back too
                if stream is not None:
                    await aclose_stream(stream)
                raise
            metrics.MODEL_FIRST_TOKEN.labels(attempts.current).observe(
                time.perf_counter() - started
            )
            deadline: StreamDeadline | None = None
            chunks = aiter(stream)
            answered = _has_choice(first)
            try:
                deadline = StreamDeadline(timeout, attempts.spec.stream_limit_s)
                yield self.priced(attempts.current, first)
                while True:
                    try:
                        chunk = await deadline.next(chunks)
                    except StopAsyncIteration:
                        break
                    answered = answered or _has_choice(chunk)
                    yield self.priced(attempts.current, chunk)
                if not answered:  # an empty answer is not an answer
                    raise UnreadableReply(_NO_CHOICES)
            except Exception as exc:
                _observed(attempts.current, "failed", started)
                raise attempts.broken(exc) from exc
            finally:
                if deadline is not None:
                    deadline.close()
                await aclose_stream(stream)
            _observed(attempts.current, "ok", started)
            return
        _observed(attempts.current, "failed", started)
        raise attempts.error()

    def complete(self, profile: str, request: dict[str, Any]) -> Any:
        """Blocking :meth:`acomplete` (the transport's own timeout bounds each attempt)."""
        attempts = _Attempts(self, profile)
        for transport, _ in attempts:
            try:
                return self.priced(attempts.current, transport.create(request))
            except Exception as exc:  # _Attempts judges every failure
                time.sleep(attempts.failed(exc))
        raise attempts.error()

    def stream(self, profile: str, request: dict[str, Any]) -> Iterator[Any]:
        """Blocking :meth:`astream`."""
        attempts = _Attempts(self, profile)
        request = {**request, "stream": True}
        for transport, _ in attempts:
            stream: Any = None
            try:
                stream = transport.create(request)
                first = next(iter(stream), None)
                if first is None:
                    raise UnreadableReply(_NO_EVENTS)
            except Exception as exc:  # _Attempts judges every failure
                if stream is not None:
                    close_stream(stream)
                time.sleep(attempts.failed(exc))
                continue
            try:
                yield self.priced(attempts.current, first)
                for chunk in stream:
                    yield self.priced(attempts.current, chunk)
            except Exception as exc:
                raise attempts.broken(exc) from exc
            finally:
                close_stream(stream)
            return
        raise attempts.error()

    def priced(self, profile: str, reply: Any) -> Any:
        """A reply (or chunk) whose ``usage`` carries its cost, ``cost_micro_usd``, at the
        prices of the profile that answered (a fallback's, it may be), when they are known."""
        usage = reply.get("usage") if isinstance(reply, dict) else None
        if not isinstance(usage, dict):
            return reply
        if profile not in self._prices:
            assert self.config is not None
            self._prices[profile] = price_of(self.config.get(profile), reply.get("model"))
        price = self._prices[profile]
        if price is not None:
            tokens_in = int(usage.get("prompt_tokens") or 0)
            usage["cost_micro_usd"] = micro_usd(
                price, tokens_in, int(usage.get("completion_tokens") or 0)
            )
        return reply

    def warm_up(self) -> None:
        """Build every profile's transport and import what its calls need (at start-up,
        rather than in the first conversation); read the price map if a profile needs it."""
        profiles = self.config.profiles if self.config is not None else {}
        if any(profile.price is None for profile in profiles.values()):
            price_map()
        for name in profiles:
            self._transport(name).warm_up()

    async def aclose(self) -> None:
        """Close the connection pools opened on the running event loop."""
        for transport in self._transports.values():
            await transport.aclose()

    def _transport(self, profile: str) -> Transport:
        transport = self._transports.get(profile)
        if transport is None:
            assert self.config is not None  # chat_model() checked
            transport = transport_for(self.config.get(profile), self._environ)
            self._transports[profile] = transport
        return transport


_NO_CHOICES = "the model server's stream ended without a reply (no event had a choice)"


def _has_choice(chunk: Any) -> bool:
    """Whether a streamed chunk carries a choice (a usage-only chunk does not)."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else getattr(chunk, "choices", None)
    return bool(choices)


_NO_EVENTS = "the model server's stream ended without a single event (is it an OpenAI-style API?)"


def _observed(profile: str, outcome: str, started: float) -> None:
    metrics.MODEL_CALLS.labels(profile, outcome).inc()
    metrics.MODEL_SECONDS.labels(profile).observe(time.perf_counter() - started)


RETRY_BASE_S = 0.25  # the first retry's wait; it doubles with each retry of a profile
RETRY_MAX_S = 4.0


def retry_backoff(retry: int) -> float:
    """The wait before a profile's ``retry``-th retry (0 for the first): exponential, with a
    random part so that calls that failed together do not come back together. A retry at
    once would meet the same overloaded server, or the next stale connection of the pool a
    server closed while it was being reused (seen at load: "Can not write request body")."""
    return min(RETRY_BASE_S * 2.0**retry, RETRY_MAX_S) * random.uniform(0.75, 1.0)


class _Attempts:
    """The attempts of one call: each profile of the chain, once plus its retries.

    Iterating yields ``(transport, timeout_s)`` per attempt; the caller reports a failure
    with :meth:`failed`, which decides whether the same profile is tried again (transient
    failures: timeouts, connection errors, rate limits, 5xx) or the next one is.
    """

    def __init__(self, gateway: ModelGateway, profile: str) -> None:
        self._gateway = gateway
        self.profile = profile
        self.chain = gateway.chain(profile)
        self.current = profile  # the profile of the attempt under way
        self.spec: ModelProfile  # and its settings (set as the attempts go)
        self._last: Exception | None = None
        self._again = False
        self._retries_left = 0

    def __iter__(self) -> Iterator[tuple[Transport, float]]:
        assert self._gateway.config is not None
        for name in self.chain:
            spec = self._gateway.config.get(name)
            transport = self._gateway._transport(name)
            self.current, self.spec = name, spec
            for attempt in range(spec.retries + 1):
                self._again = False
                self._retries_left = spec.retries - attempt
                yield transport, spec.timeout_s
                if not self._again:
                    break

    def failed(self, exc: Exception) -> float:
        """Record a failed attempt; returns how long to wait before the next one (no wait
        when the next attempt goes to another profile, or there is none)."""
        self._last = exc
        delay = retry_delay(exc)
        self._again = delay is not None
        if delay is None or self._retries_left <= 0:
            return 0.0
        return max(delay, retry_backoff(self.spec.retries - self._retries_left))

    def error(self) -> ModelError:
        """What the caller raises when every attempt failed (its detail logged)."""
        assert self._last is not None
        return logged(to_model_error(self._last, self.profile, self.chain))

    def broken(self, exc: Exception) -> ModelError:
        """A stream that failed after its first chunk (not retried: text may be out)."""
        error = to_model_error(exc, self.profile, self.chain)
        if error.code not in ("model_timeout", "model_unreachable"):
            return logged(error)
        if error.code == "model_timeout":
            what = f"was cut off: {exc}" if str(exc) else "stopped mid-way"
            code, hint = "model_timeout", "if it recurs, check the model server's load"
        else:  # it was reached: it answered, then the connection broke
            what, code = f"broke off mid-way ({exc or type(exc).__name__})", "model_unavailable"
            hint = "if it recurs, check the model server's logs"
        return logged(
            ModelError(
                "The language model's reply stopped mid-way; the part already streamed is "
                "not kept: send the message again.",
                profile=self.profile,
                code=code,
                detail=f"The reply {what} (profile '{self.current}'); {hint}.",
            )
        )
