// The thread's messages as shown: a message, a run that failed, and scrolling to the latest.
import { el, renderMarkdown } from "./markdown.js";
import { Trace } from "./trace.js";

const $ = (id) => document.getElementById(id);
export const STOPPED = "run_cancelled_by_request"; // a run's failure code when it was stopped as asked

/** A message of the thread, added to its list. `summarised` marks one the model now sees only
 * through the thread's summary. */
export function addMessage(who, text, { summarised } = {}) {
  const body = who === "user" ? el("p", { class: "text" }, text) : renderMarkdown(text);
  const said = who === "user" ? "You said" : "Answer";
  const item = el(
    "li",
    { class: `message ${who}${summarised ? " summarised" : ""}`, title: summarised ? "Summarised: the model sees this through the thread's summary" : null },
    el("span", { class: "visually-hidden" }, summarised ? `${said} (summarised):` : `${said}:`),
    summarised ? el("span", { class: "summarised-tag", "aria-hidden": "true" }, "Summarised") : null,
    body,
  );
  $("messages").append(item);
  return item;
}

/** A run that failed after the message before it, as the page said it when it happened. */
export function addFailure(threadId, run) {
  const answer = el("div", { class: "answer" }, run.code === STOPPED ? stoppedNote() : el("p", { class: "run-error" }, `The run failed: ${run.message} (${run.code})`));
  const item = el("li", { class: "message assistant failed" }, el("span", { class: "visually-hidden" }, "Answer:"), answer);
  item.append(Trace.stored(threadId, run.run_id).element);
  $("messages").append(item);
}

export function stoppedNote() {
  return el("p", { class: "hint stopped" }, "Stopped as asked: the answer ends here.");
}

/** To the latest message: the list scrolls on a desktop; at phone width the page does, down
 * to the message box. */
export function scrollDown() {
  const list = $("messages");
  if (getComputedStyle(list).overflowY === "visible") window.scrollTo(0, document.scrollingElement.scrollHeight);
  else list.scrollTop = list.scrollHeight;
}
