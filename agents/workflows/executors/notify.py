"""``notify``: a log line, and a webhook POST (JSON, retried) when the node names one."""

from __future__ import annotations

import asyncio

import httpx
import structlog

from agents.errors import HandlerFailed
from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import render

log = structlog.get_logger("agents.workflows.notify")


@executor("notify")
class NotifyExecutor:
    """Logs the rendered message; posts it to the webhook, retrying with a short backoff."""

    async def run(self, ctx: NodeContext) -> Outcome:
        message = str(render(ctx.node.message, ctx.values, "message"))
        log.info(
            "workflow.notify",
            channel=ctx.node.channel,
            workflow=ctx.run.workflow,
            run_id=ctx.run.run_id,
            message=message,
        )
        output = {"channel": ctx.node.channel, "message": message, "delivered": "log"}
        hook = ctx.node.webhook
        if hook is None:
            return Outcome(output)
        url = str(render(hook.url, ctx.values, "webhook.url"))
        body = {"workflow": ctx.run.workflow, "run_id": ctx.run.run_id, "message": message}
        error = ""
        async with httpx.AsyncClient(timeout=10) as client:
            for attempt in range(hook.attempts):
                try:
                    response = await client.post(url, json=body, headers=hook.headers)
                    if response.status_code < 300:
                        return Outcome({**output, "delivered": "webhook", "status": 200})
                    error = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                if attempt + 1 < hook.attempts:
                    await asyncio.sleep(0.2 * 2**attempt)
        raise HandlerFailed(f"the webhook {url} did not take the notification ({error})")
