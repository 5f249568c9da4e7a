// Skills and workflows: search with the router's scores, definitions, graphs, load errors.
import * as api from "./api.js";
import { drawGraph } from "./graph.js";
import { codeBlock, el, pretty, renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
let report = () => {};
let succeeded = () => {};

export function initBrowser({ onError, onOk }) {
  report = onError;
  succeeded = onOk;
  $("skill-search").addEventListener("submit", async (event) => {
    event.preventDefault();
    const q = $("skill-query").value.trim();
    if (!q) return;
    try {
      const { results } = await api.skills.search(q);
      const table = $("search-results");
      table.tBodies[0].replaceChildren(
        ...results.map((hit) =>
          el(
            "tr",
            {},
            el("th", { scope: "row" }, el("button", { type: "button", class: "link", onclick: () => showSkill(hit.name) }, hit.name)),
            el("td", {}, hit.score.toFixed(2)),
            el("td", {}, hit.dense.toFixed(2)),
            el("td", {}, hit.keyword.toFixed(2)),
          ),
        ),
      );
      table.hidden = !results.length; // no empty table with its headers: said instead
      $("search-status").textContent = results.length ? "" : `No skill matches “${q}”.`;
      succeeded();
    } catch (error) {
      report(error);
    }
  });
}

export async function loadBrowser() {
  const [skills, workflows] = await Promise.all([api.skills.list(), api.workflows.list()]);
  $("skill-list").replaceChildren(
    ...skills.skills.map((s) =>
      el("li", {}, el("button", { type: "button", class: "link", onclick: () => showSkill(s.name) }, s.name), el("span", { class: "hint" }, ` — ${firstSentence(s.description)}`)),
    ),
  );
  $("skill-errors").replaceChildren(
    problems("Skills that failed to load", skills.errors.map((e) => `${e.skill}/${e.file}${e.field ? ` (${e.field})` : ""}: ${e.message}`)),
  );
  $("workflow-list").replaceChildren(
    ...workflows.workflows.map((w) =>
      el("li", {}, el("button", { type: "button", class: "link", onclick: () => showWorkflow(w.name) }, w.name), el("span", { class: "hint" }, ` — ${firstSentence(w.description)}`)),
    ),
  );
  $("workflow-errors").replaceChildren(
    problems("Workflows that failed to load", workflows.errors.map((e) => `${e.file}${e.node ? ` node ${e.node}` : ""}${e.line ? ` line ${e.line}` : ""}: ${e.message}`)),
  );
}

function problems(title, lines) {
  if (!lines.length) return "";
  return el("section", { class: "problems" }, el("h4", {}, title), el("ul", {}, lines.map((line) => el("li", {}, line))));
}

async function showSkill(name) {
  try {
    const skill = await api.skills.get(name);
    const detail = $("detail");
    detail.replaceChildren(
      el("h3", { tabindex: "-1" }, `Skill: ${skill.name}`),
      el("p", {}, skill.description),
      el("h4", {}, "Instructions"),
      renderMarkdown(skill.instructions, { level: 5 }),
      skill.tools.length ? el("h4", {}, "Tools") : null,
      ...skill.tools.map((tool) => {
        const fn = tool.function || tool;
        return el("details", {}, el("summary", {}, fn.name), el("p", {}, fn.description), codeBlock(pretty(fn.parameters), `Parameters of ${fn.name}`));
      }),
      skill.references.length ? el("h4", {}, "References") : null,
      skill.references.length ? el("ul", {}, skill.references.map((r) => el("li", {}, r))) : null,
    );
    detail.querySelector("h3").focus();
  } catch (error) {
    report(error);
  }
}

async function showWorkflow(name) {
  try {
    const workflow = await api.workflows.get(name);
    const graph = el("div", { class: "graph", role: "img", "aria-label": `Graph of ${workflow.name}: ${workflow.nodes.join(", ")}` });
    const detail = $("detail");
    detail.replaceChildren(
      el("h3", { tabindex: "-1" }, `Workflow: ${workflow.name} (version ${workflow.version})`),
      el("p", {}, workflow.description),
      graph,
      el("details", {}, el("summary", {}, "Mermaid source"), codeBlock(workflow.mermaid, "Mermaid source")),
      el("details", {}, el("summary", {}, "Definition"), codeBlock(pretty(workflow.definition), "Definition")),
    );
    detail.querySelector("h3").focus();
    await drawGraph(graph, workflow.mermaid);
  } catch (error) {
    report(error);
  }
}

function firstSentence(text) {
  return text.split(/(?<=[.!?。])\s/)[0];
}
