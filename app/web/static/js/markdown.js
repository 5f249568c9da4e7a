// Markdown to safe HTML: markdown-it with raw HTML off (it is escaped, and links with
// javascript: and the like are refused), then DOMPurify over the result as a second guard.

let md = null;

/**
 * Markdown as a safe element; its headings start at `level` (an answer's `#` is an h3 under
 * the thread's h2), so a screen reader's outline of the page stays in order.
 */
export function renderMarkdown(text, { level = 3 } = {}) {
  md ??= window.markdownit({ html: false, linkify: true, breaks: true });
  const html = window.DOMPurify.sanitize(md.render(text || ""), { USE_PROFILES: { html: true } });
  const box = document.createElement("div");
  box.className = "markdown";
  box.innerHTML = html;
  for (const link of box.querySelectorAll("a[href]")) {
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  for (const heading of box.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
    const moved = document.createElement(`h${Math.min(6, Number(heading.tagName[1]) + level - 1)}`);
    moved.replaceChildren(...heading.childNodes);
    heading.replaceWith(moved);
  }
  return box;
}

/** An element with text (never parsed as HTML). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/**
 * Preformatted text (JSON, a tool's result, a graph's source) in a box that scrolls when long:
 * focusable and named, so a keyboard can reach and scroll it and a screen reader says what it is.
 */
export function codeBlock(text, label, attrs = {}) {
  return el("pre", { tabindex: "0", role: "region", "aria-label": label, ...attrs }, text);
}

export function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}
