"""Scripted model replies of the conversation benchmark, as module-level functions so that
they can be sent to the scripted server's own process (light imports: the server process
loads this module to run them)."""

from __future__ import annotations

from tests.fakellm import Reply, RequestView, ToolCall


def route_reply(skill: str, request: RequestView) -> Reply:
    """The router's tie-break picks ``skill``."""
    return Reply(tool_calls=[ToolCall("choose_route", {"skill": skill})])


def plan_reply(plan: list[dict[str, str]], request: RequestView) -> Reply:
    """The planner answers with ``plan``."""
    return Reply(tool_calls=[ToolCall("plan_tasks", {"tasks": plan})])


def expert_reply(tools: list[str], request: RequestView) -> Reply:
    """An expert: first call the task's tools it holds (in one turn), then answer."""
    if any(m.is_tool_result for m in request.turn):
        return Reply(content="Record 7 is fine.")
    offered = [t.name for t in request.tools]
    return Reply(tool_calls=[ToolCall(n, {"record_id": "7"}) for n in offered if n in tools])


def policy_body(skill: str) -> str:
    """The instructions of a skill installed by bench/sets.py (what the policy recognises)."""
    return f"Use the {skill} service to answer the user's request."


def policy_reply(skill: str, request: RequestView) -> Reply:
    """A model that knows the query's skill: uses it when it is offered (its instructions in
    the prompt or loaded), picks it in a tie-break, loads it when the index lists it, and
    otherwise answers without a skill. The answer says which skill it used."""
    body = policy_body(skill)
    if request.forced_tool == "choose_route":
        choices = request.tool("choose_route").parameters["properties"]["skill"]["enum"]
        return Reply(
            tool_calls=[ToolCall("choose_route", {"skill": skill if skill in choices else "none"})]
        )
    loaded = any(body in m.text for m in request.results_of("load_skill"))
    if request.system_contains(body) or loaded:
        # Among several skills it says which one it followed, beside its answer.
        notable = request.tool("note_skill") if request.offers("note_skill") else None
        if notable is not None and skill in notable.parameters["properties"]["name"]["enum"]:
            return Reply(
                content=f"used {skill}", tool_calls=[ToolCall("note_skill", {"name": skill})]
            )
        return Reply(content=f"used {skill}")
    if request.offers("load_skill") and f"- {skill}:" in request.system:
        return Reply(tool_calls=[ToolCall("load_skill", {"name": skill})])
    return Reply(content="used none")


def thread_turn_reply(turn: int, request: RequestView) -> Reply:
    """One turn of the long-thread benchmark: a summary when asked for one; else the order
    lookup, then an answer once its result is in."""
    if request.system_contains("You keep the record of a long conversation"):
        return Reply(content=f"The user looked up orders 1 to {turn} [#0 user]; all shipped.")
    if any(m.is_tool_result for m in request.turn):
        return Reply(content=f"Order ORD{1000 + turn} has shipped with DHL, as planned.")
    return Reply(tool_calls=[ToolCall("get_order", {"order_id": f"ORD{1000 + turn}"})])


def load_reply(latency: float, request: RequestView) -> Reply:
    """The load benchmark's model: ``latency`` seconds a call; an order question calls the
    order tool first, then answers; anything else is answered at once."""
    if any(m.is_tool_result for m in request.turn):
        return Reply(content="Your order has shipped with DHL and arrives tomorrow.", delay=latency)
    if request.offers("get_order") and "order" in request.last_user:
        order = next((w for w in request.last_user.split() if w.startswith("ORD")), "ORD1001")
        return Reply(
            tool_calls=[ToolCall("get_order", {"order_id": order.strip("?")})], delay=latency
        )
    return Reply(content="Glad to help. Anything else I can do for you today?", delay=latency)
