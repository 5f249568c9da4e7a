// Workflow graphs drawn by Mermaid (vendored, loaded the first time a graph is shown), with the
// nodes of a run marked: done, current (running or waiting for a person), failed.
import { el } from "./markdown.js";

const RESERVED = new Set(["end", "graph", "subgraph", "flowchart", "style", "class", "classdef", "click"]);
let ready = null;
let count = 0;

function loadMermaid() {
  ready ??= new Promise((resolve, reject) => {
    const script = el("script", { src: "/static/vendor/mermaid.min.js" });
    script.onload = () => {
      const dark = matchMedia("(prefers-color-scheme: dark)").matches;
      window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: dark ? "dark" : "default" });
      resolve(window.mermaid);
    };
    script.onerror = () => reject(new Error("Mermaid could not be loaded"));
    document.head.append(script);
  });
  return ready;
}

/** The Mermaid source with `marks` ({node id: "done" | "current" | "failed"}) as classes. */
function marked(source, marks) {
  const lines = [
    source.trimEnd(),
    "    classDef done fill:#d3f9d8,stroke:#1a7f37,color:#000",
    "    classDef current fill:#fff3bf,stroke:#e8590c,stroke-width:3px,color:#000",
    "    classDef failed fill:#ffe3e3,stroke:#b42318,color:#000",
  ];
  for (const [id, mark] of Object.entries(marks)) {
    if (/^[a-z][a-z0-9_]*$/.test(id)) lines.push(`    class ${RESERVED.has(id) ? `${id}_` : id} ${mark}`);
  }
  return `${lines.join("\n")}\n`;
}

/** Draw `source` into `container` (replacing what was there). */
export async function drawGraph(container, source, marks = {}) {
  try {
    const mermaid = await loadMermaid();
    const { svg } = await mermaid.render(`graph-${++count}`, marked(source, marks));
    container.innerHTML = svg; // Mermaid's own output, rendered with securityLevel "strict"
  } catch (error) {
    container.replaceChildren(el("p", { class: "hint" }, `The graph could not be drawn: ${error.message}`));
  }
}
