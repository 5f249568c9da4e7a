// How an answer was reached, from the run's events: the route decision with its candidates
// and scores, the nodes that ran with their timings, tool calls, errors, usage and time.
import * as api from "./api.js";
import { drawGraph } from "./graph.js";
import { codeBlock, el, pretty } from "./markdown.js";

/** Stored traces not fetched yet: each one's loader, called once it is in view. */
const inView = new WeakMap();
const viewing = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    viewing.unobserve(entry.target);
    inView.get(entry.target)?.();
    inView.delete(entry.target);
  }
});

export class Trace {
  constructor() {
    this.route = null;
    this.nodes = [];
    this.open = new Map();
    this.tools = new Map();
    this.errors = [];
    this.usage = null;
    this.started = performance.now();
    this.seconds = null; // how long the run took; null: not known (no time is shown)
    this.loading = null; // an earlier answer's trace, being fetched
    this.kept = false; // an earlier answer's (stored): timed by the run's record
    this.body = el("div", { class: "trace-body" });
    this.workflow = null; // a workflow run's graph: { name, source, marks, box, drawing, dirty }
    this.approvals = new Set(); // stepKey of the workflow's approval nodes
    this.summary = el("summary", {}, "How this answer was reached");
    this.element = el("details", { class: "trace" }, this.summary, this.body);
  }

  /** The trace of an earlier answer, fetched from the service once it comes into view (its
   * summary then says the route and the time, as a live one's does) or is unfolded. */
  static stored(threadId, runId) {
    const trace = new Trace();
    trace.kept = true; // its time is the run's own, not the page's
    trace.body.replaceChildren(el("p", { class: "hint" }, "Loading…"));
    trace.element.dataset.run = runId;
    const load = () => {
      if (trace.loading) return;
      trace.loading = api.threads
        .trace(threadId, runId)
        .then((record) => trace.replay(record))
        .catch((error) => {
          trace.loading = null; // tried again when unfolded
          trace.body.replaceChildren(el("p", { class: "run-error", role: "alert" }, `The trace could not be loaded: ${error.message}`));
        });
    };
    inView.set(trace.element, load);
    viewing.observe(trace.element);
    trace.element.addEventListener("toggle", () => trace.element.open && load());
    return trace;
  }

  /** Show a run's kept events, with the run's own times. */
  replay(record) {
    for (const { type, data } of record.events) this.add(type, data);
    this.seconds = runSeconds(record);
    this.render();
  }

  /** Once a live run has ended: its time as the service kept it, as its trace says after a
   * reload (the page's clock also counts the request and the stream, or only runs from a
   * join). Its trace not there (not kept), the page's time stays. */
  timeFrom(threadId, runId) {
    if (!threadId || !runId) return;
    api.threads
      .trace(threadId, runId)
      .then((record) => {
        const seconds = runSeconds(record);
        if (seconds === null) return;
        this.seconds = seconds;
        this.render();
      })
      .catch(() => {});
  }

  /** Take one event of the run; true when the trace changed. */
  add(type, data) {
    // A message an approval led to has no route: its workflow's steps name the workflow.
    if (data.workflow && !this.workflow && !this.route) this.showWorkflow(data.workflow);
    if (data.workflow && this.workflow?.name === data.workflow) this.mark(type, data);
    if (type === "route_decided") {
      this.route = data;
      if (data.kind === "workflow" && data.target) this.showWorkflow(data.target);
    }
    else if (type === "node_started") {
      const step = { ...data, running: true };
      this.nodes.push(step);
      this.open.set(stepKey(data), step);
    } else if (type === "node_finished") {
      const step = this.open.get(stepKey(data));
      this.open.delete(stepKey(data));
      if (step) Object.assign(step, data, { running: false });
      else this.nodes.push({ ...data, running: false });
    } else if (type === "tool_called") this.tools.set(data.call_id, { ...data });
    else if (type === "tool_returned") Object.assign(this.tools.get(data.call_id) || {}, { result: data });
    else if (type === "error_raised") this.errors.push(data);
    else if (type === "run_failed") {
      // Kept with the run's other errors, once: a step's error may be what ended it.
      if (!this.errors.some((e) => e.code === data.code)) this.errors.push(data);
    }
    else if (type === "approval_required") {
      const step = [...this.open.values()].find((s) => s.node === data.node);
      if (step) step.waiting = true;
    }
    else if (type === "run_finished") this.usage = data.usage;
    else return false;
    if (type === "run_finished" && !this.kept) this.seconds = (performance.now() - this.started) / 1000;
    if ((type === "run_finished" || type === "run_failed") && !this.kept) this.timeFrom(data.thread_id, data.run_id);
    this.render();
    return true;
  }

  showWorkflow(name) {
    const box = el("div", { class: "graph", role: "img", "aria-label": `Graph of workflow ${name}` });
    this.workflow = { name, source: null, marks: {}, box, drawing: false, dirty: false };
    api.workflows
      .get(name)
      .then((workflow) => {
        this.workflow.source = workflow.mermaid;
        // Its approval steps: how long one "ran" is the node resuming, not the wait.
        for (const node of workflow.definition?.nodes ?? []) {
          if (node.kind === "approval") this.approvals.add(stepKey({ workflow: name, node: node.id }));
        }
        this.redraw();
        if (this.approvals.size) this.render();
      })
      .catch(() => box.replaceChildren(el("p", { class: "hint" }, "The workflow's graph is not available.")));
  }

  mark(type, data) {
    const marks = this.workflow.marks;
    if (type === "node_started") marks[data.node] = "current";
    else if (type === "node_finished") marks[data.node] = data.ok === false ? "failed" : "done";
    else return;
    const states = Object.entries(marks).map(([node, mark]) => `${node} ${mark}`);
    this.workflow.box.setAttribute("aria-label", `Graph of workflow ${this.workflow.name}: ${states.join(", ")}`);
    this.redraw();
  }

  async redraw() {
    const graph = this.workflow;
    if (!graph.source) return;
    if (graph.drawing) {
      graph.dirty = true;
      return;
    }
    graph.drawing = true;
    do {
      graph.dirty = false;
      await drawGraph(graph.box, graph.source, { ...graph.marks });
    } while (graph.dirty);
    graph.drawing = false;
  }

  finish() {
    this.seconds ??= (performance.now() - this.started) / 1000;
    this.render();
  }

  render() {
    const parts = [];
    if (this.route) parts.push(routeView(this.route));
    if (this.workflow) parts.push(el("h3", {}, `Workflow ${this.workflow.name}`), this.workflow.box);
    if (this.nodes.length) {
      const view = (step) => stepView(step, this.approvals.has(stepKey(step)));
      parts.push(el("h3", {}, "Steps"), el("ol", { class: "steps" }, this.nodes.map(view)));
    }
    if (this.tools.size) {
      parts.push(el("h3", {}, "Tool calls"), el("ol", { class: "tools" }, [...this.tools.values()].map(toolView)));
    }
    if (this.errors.length) {
      parts.push(el("h3", {}, "Errors"), el("ul", {}, this.errors.map((e) => el("li", {}, `${e.code}: ${e.message}`))));
    }
    parts.push(el("p", { class: "usage" }, usageLine(this.usage, this.seconds)));
    this.body.replaceChildren(...parts);
    const bits = [];
    if (this.route) bits.push(`${this.route.kind}${this.route.target ? ` → ${this.route.target}` : ""}`);
    if (this.tools.size) bits.push(`${this.tools.size} tool call${this.tools.size > 1 ? "s" : ""}`);
    const took = duration(this.seconds);
    if (took) bits.push(took);
    this.summary.textContent = `How this answer was reached${bits.length ? ` (${bits.join(" · ")})` : ""}`;
  }
}

function stepKey(data) {
  return `${data.workflow || ""}/${data.task_id || ""}/${data.node}`;
}

function routeView(route) {
  const rows = (route.candidates || []).map((c) =>
    el("tr", {}, el("th", { scope: "row" }, c.name), el("td", {}, fmt(c.score)), el("td", {}, fmt(c.dense)), el("td", {}, fmt(c.keyword))),
  );
  return el(
    "section",
    { class: "route" },
    el("h3", {}, "Route"),
    el("p", {}, el("strong", {}, route.kind), route.target ? ` → ${route.target}` : "", ` (by ${route.by})`, route.reason ? `: ${route.reason}` : ""),
    rows.length
      ? el(
          "table",
          { class: "scores" },
          el("caption", {}, "Candidates"),
          el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Candidate"), el("th", { scope: "col" }, "Score"), el("th", { scope: "col" }, "Embedding"), el("th", { scope: "col" }, "Keywords"))),
          el("tbody", {}, rows),
        )
      : null,
  );
}

/** One step: how it went and how long it ran; an approval step (`approval`) that went on
 * was decided (its time, a node resuming, would not be how long it waited). */
function stepView(step, approval = false) {
  const name = [step.workflow, step.task_id, step.node].filter(Boolean).join(" · ");
  const state = step.waiting
    ? "waiting for approval"
    : step.running
      ? "running…"
      : step.ok === false
        ? step.error ? `failed: ${step.error}` : "failed"
        : approval ? "decided" : `${Math.round(step.ms)} ms`;
  return el(
    "li",
    { class: step.ok === false ? "failed" : "" },
    el("span", { class: "step-name" }, name),
    " — ",
    el("span", { class: "step-time" }, state),
    step.output ? codeBlock(step.output, `Output of ${name}`) : null,
  );
}

function toolView(call) {
  const result = call.result;
  return el(
    "li",
    {},
    el("strong", {}, call.tool),
    result ? (result.ok ? " — ok" : " — error") : " — running…",
    el("div", { class: "label" }, "Arguments"),
    codeBlock(pretty(call.arguments), `Arguments of ${call.tool}`, { class: "tool-args" }),
    result ? el("div", { class: "label" }, "Result") : null,
    result ? codeBlock(pretty(result.content), `Result of ${call.tool}`, { class: "tool-result" }) : null,
  );
}

function usageLine(usage, seconds) {
  const bits = [];
  if (usage) {
    bits.push(`Tokens: ${usage.input_tokens ?? 0} in, ${usage.output_tokens ?? 0} out, ${usage.total_tokens ?? 0} total`);
    if (usage.model_calls !== undefined) bits.push(`${usage.model_calls} model call${usage.model_calls === 1 ? "" : "s"}`);
    if (usage.cost_micro_usd !== undefined) bits.push(`$${(usage.cost_micro_usd / 1e6).toFixed(6)}`);
  }
  const took = duration(seconds);
  if (took) bits.push(took);
  return bits.join(" · ") || "Running…";
}

/** How long a kept run took, from its record's times; null when it does not say. */
function runSeconds(record) {
  const { started, ended } = record;
  return typeof started === "number" && typeof ended === "number" && ended > started ? ended - started : null;
}

/** A run's time in words: "40 ms" under a second (in tenths of a second a quick run, a
 * decision's outcome say, read "0.0 s", as if it took none), "1.2 s" from a second on; null
 * for none measured. */
function duration(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds <= 0) return null;
  const ms = Math.round(seconds * 1000);
  if (ms < 1) return "< 1 ms";
  return ms < 1000 ? `${ms} ms` : `${seconds.toFixed(1)} s`;
}

function fmt(value) {
  return typeof value === "number" ? value.toFixed(2) : "–";
}
