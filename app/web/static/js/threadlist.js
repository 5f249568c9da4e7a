// The thread list: the user's threads newest first, a page at a time (an admin's key may ask
// for every user's), each button opening its thread; on a phone it folds away.
import * as api from "./api.js";
import { el } from "./markdown.js";

const $ = (id) => document.getElementById(id);
/** Thread id: its status (`running`...) as the last listing (or the thread itself) said. */
export const statusOf = new Map();
/** Thread id: the first message sent to it in this page, its title until the service's. */
export const titles = new Map();
/** The title the service gives a thread until its first message names it (and the page a
 * conversation not yet sent). */
export const NEW_TITLE = "New conversation";

/** The mark the service gives a fork: "<title> (edited)", "(edited 2)"... for one made to
 * edit a message, "(fork)", "(fork 2)"... for another. */
export const FORKED = / \((?:edited|fork)(?: \d+)?\)$/;

/** A thread's title as shown: the service's, or, while the service has not named it yet (its
 * run's record not written when the page asked), the first message this page sent it. */
export const titleOf = (t) => (t.title && t.title !== NEW_TITLE ? t.title : titles.get(t.thread_id) || t.title || "Untitled");
let seesAll = false; // an admin signed in with a key: may list every user's threads
let listing = 0; // which listing is the latest asked for: an earlier one answered later is old
let hooks = { open: () => {}, current: () => null, report: () => {}, succeeded: () => {} };

/** Wire the list: `open(id)` opens a thread, `current()` is the open one's id, `report` and
 * `succeeded` as the chat's. */
export function initThreadList(handlers) {
  hooks = handlers;
  $("all-threads").addEventListener("change", () => {
    sessionStorage.setItem("skilldesk.all", String($("all-threads").checked));
    loadThreads().then(hooks.succeeded, hooks.report);
  });
  $("threads-toggle").addEventListener("click", () => {
    const open = $("threads-toggle").getAttribute("aria-expanded") !== "true";
    $("threads-toggle").setAttribute("aria-expanded", String(open));
    $("thread-list").classList.toggle("open", open);
  });
}

/** Whether the user may list every user's threads (an admin's key): the toggle is shown, on
 * as the tab last left it. */
export function setSeesAll(value) {
  seesAll = value;
  $("all-threads-label").hidden = !value;
  $("all-threads").checked = value && sessionStorage.getItem("skilldesk.all") === "true";
}

/** Whether the list shows every user's threads (an admin asked for them). */
const listsAll = () => seesAll && $("all-threads").checked;

/** The list as the service has it now (its first page). */
export async function loadThreads() {
  const all = listsAll();
  const mine = ++listing;
  const page = await api.threads.list(null, { all });
  if (mine !== listing) return;
  remember(page.data);
  $("thread-list").replaceChildren(...page.data.map((t) => threadItem(t, all)));
  if (!page.data.length) $("thread-list").append(el("li", { class: "hint" }, "No threads yet."));
  addOlder(page, all);
}

/** Empty the list (the user changed), and drop a listing still on its way. */
export function clearThreadList() {
  listing += 1;
  $("thread-list").replaceChildren();
}

/** Mark the open thread's button, and fold the list away on a phone. */
export function markOpen(id) {
  $("thread-list").classList.remove("open");
  $("threads-toggle").setAttribute("aria-expanded", "false");
  for (const button of document.querySelectorAll(".thread")) {
    button.toggleAttribute("aria-current", button.dataset.thread === id);
  }
}

function threadItem(t, all = false) {
  return el(
    "li",
    {},
    el(
      "button",
      {
        type: "button",
        class: "thread",
        "data-thread": t.thread_id,
        "aria-current": t.thread_id === hooks.current() ? "true" : null,
        onclick: () => hooks.open(t.thread_id),
      },
      titleSpan(titleOf(t)),
      all ? el("span", { class: "thread-owner" }, t.owner ? `by ${t.owner}` : "by the local user (no key)") : null,
      el("span", { class: "thread-time" }, new Date(t.updated * 1000).toLocaleString()),
    ),
  );
}

/** A title cut to the list's width, its "(edited)" or "(fork)" mark kept in sight (a fork is
 * told from its source by it), the whole title in its tooltip. */
function titleSpan(title) {
  const mark = title.match(FORKED)?.[0] ?? "";
  return el(
    "span",
    { class: "thread-title", title },
    el("span", { class: "thread-name" }, title.slice(0, title.length - mark.length)),
    mark ? el("span", { class: "thread-edited" }, mark) : null,
  );
}

/** Keep what a listing says of each thread's status. */
export function remember(threads) {
  for (const t of threads) statusOf.set(t.thread_id, t.status);
}

function addOlder(page, all) {
  if (!page.next_cursor) return;
  const item = el(
    "li",
    {},
    el(
      "button",
      {
        type: "button",
        class: "link",
        onclick: async (event) => {
          const button = event.currentTarget;
          button.disabled = true; // one page at a time
          try {
            const older = await api.threads.list(page.next_cursor, { all });
            remember(older.data);
            // A thread updated since the first page moved up to it: not shown twice.
            const shown = new Set([...document.querySelectorAll(".thread")].map((b) => b.dataset.thread));
            item.replaceWith(...older.data.filter((t) => !shown.has(t.thread_id)).map((t) => threadItem(t, all)));
            addOlder(older, all);
            hooks.succeeded();
          } catch (error) {
            button.disabled = false;
            hooks.report(error);
          }
        },
      },
      "Older threads",
    ),
  );
  $("thread-list").append(item);
}
