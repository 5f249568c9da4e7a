"""What the OpenAPI tests share: paths, bodies, the workflow they run."""

from __future__ import annotations

LIMIT = 300_000  # request bytes: room for a message at the text limit
ADMIN_KEY = "sdk_openapi-admin-0123456789abcdef"  # the keyed app's (``admin_client``)
CHAT, RUN = "/v1/chat/completions", "/v1/threads/{}/runs/stream"
TOOL = "/v1/skills/order-lookup/tools/get_order"
INVOKE = "/v1/tools/get_order/invoke"
USER = {"role": "user", "content": "Where is my order?"}
ERROR = {"$ref": "#/components/schemas/ErrorResponse"}
LOOKUP = """
name: lookup
description: Looks an order up; a person approves.
inputs: {order_id: {type: string}}
nodes:
  - {id: order, kind: tool, tool: get_order, arguments: {order_id: "{{ inputs.order_id }}"}}
  - {id: ok, kind: approval, summary: "Order {{ nodes.order.output.order_id }}?"}
outputs: {message: "{{ nodes.order.output.status }}"}
"""
START = ("/v1/workflows/lookup/runs", {"inputs": {"order_id": "ORD1001"}})
