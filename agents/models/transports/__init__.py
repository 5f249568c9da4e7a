"""How one profile's requests reach its provider: directly, or through litellm.

OpenAI-compatible endpoints (OpenAI itself and every server reached by base URL: vLLM,
Ollama, a local proxy…) are called directly: aiohttp for async calls, with the server-sent
events read here as JSON, and the OpenAI SDK's client for blocking ones. Every other
provider goes through litellm, which translates the request and the reply. Both return
OpenAI-shaped replies as plain dicts (a ``chat.completion``, or ``chat.completion.chunk``
after chunk), so the chat model reads them alike.

Why two: a streamed reply of a few chunks cost 8-10 ms of CPU through litellm's own layers
(its router, per-chunk re-wrapping, cost calculation, success logging), ~2.5 ms through
the OpenAI SDK it wraps (whose typed request transform and per-chunk model construction
cost more than the HTTP exchange), ~1.2 ms with the SDK only sending bytes, and ~0.3 ms
over aiohttp (the HTTP client litellm itself uses) with the events read here as JSON.
``bench/model_client.py`` measures them side by side. On a 2-core service every
millisecond of a call is a millisecond of every turn's CPU.

What every transport shares is in ``common.py`` (the ``Transport`` protocol); one transport
per module: ``openai_compat.py`` (direct), ``via_litellm.py``; the replies of the direct one
read as dicts in ``replies.py``; ``langchain_transport.py`` beside the package is the third.
``transport_for`` picks a profile's transport.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agents.models.config import ModelProfile, resolve_api_key
from agents.models.transports.common import (
    OPENAI_PREFIX,
    PLACEHOLDER_KEY,
    Transport,
    aclose_stream,
    close_stream,
)
from agents.models.transports.openai_compat import OpenAITransport
from agents.models.transports.via_litellm import LiteLLMTransport

__all__ = [
    "PLACEHOLDER_KEY",
    "LiteLLMTransport",
    "OpenAITransport",
    "Transport",
    "aclose_stream",
    "close_stream",
    "transport_for",
]


def transport_for(profile: ModelProfile, environ: Mapping[str, str] | None = None) -> Transport:
    """The transport of a profile: a LangChain chat model for ``provider: langchain``,
    direct for ``openai/...`` models, else litellm."""
    key = resolve_api_key(profile, environ)
    if profile.provider == "langchain":
        from agents.models.langchain_transport import LangChainTransport

        return LangChainTransport(profile, key)
    if profile.litellm_model.startswith(OPENAI_PREFIX):
        return OpenAITransport(profile, key, os.environ if environ is None else environ)
    return LiteLLMTransport(profile, key)
