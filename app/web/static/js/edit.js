// Editing a message of yours: its Edit button, the form in its place, and the edit sent to a
// new thread that holds what came before it (the original thread stays as it was).
import * as api from "./api.js";
import { el } from "./markdown.js";
import { currentThread, isAnswering } from "./openthread.js";
import { busyNote, send } from "./runs.js";

const $ = (id) => document.getElementById(id);
let resending = false;
let hooks = { open: async () => {}, report: () => {} };

/** `open(id)` opens a thread, `report` as the chat's. */
export function initEdit(handlers) {
  hooks = handlers;
}

/** Give the item showing a message of yours (`{ content, index, summarised }`, `index` its
 * place in the thread) its Edit button; none for one the model sees only through the thread's
 * summary. */
export function offerEdit(item, { content, index, summarised }) {
  if (summarised || typeof content !== "string" || index === undefined || item.querySelector(".edit")) return;
  item.append(editButton(item, content, index));
}

/** The messages sent in this page learn their place in the thread once it is stored. */
export function editable(messages) {
  const said = messages.filter((m) => m.role === "human");
  const shown = [...$("messages").querySelectorAll(".message.user")];
  if (said.length !== shown.length) return;
  shown.forEach((item, i) => offerEdit(item, said[i]));
}

function editButton(item, text, index) {
  const busy = isAnswering(currentThread()) ? "true" : null;
  return el("button", { type: "button", class: "link edit", "aria-label": `Edit this message: ${text.slice(0, 40)}`, "aria-disabled": busy, onclick: () => startEdit(item, text, index) }, "Edit");
}

function startEdit(item, text, index) {
  if (isAnswering(currentThread())) return busyNote("editing a message");
  const kept = [...item.childNodes];
  const box = el("textarea", { "aria-label": "Edited message", rows: "3" });
  box.value = text;
  const restore = () => {
    item.replaceChildren(...kept);
    item.querySelector(".edit")?.focus();
  };
  const form = el(
    "form",
    { class: "edit-form", onsubmit: (event) => { event.preventDefault(); resend(index, box.value.trim()); } },
    box,
    el("div", { class: "edit-actions" }, el("button", { type: "submit" }, "Send edited"), el("button", { type: "button", class: "link", onclick: restore }, "Cancel")),
  );
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") restore();
    else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  item.replaceChildren(form);
  box.focus();
}

async function resend(index, text) {
  if (!text || isAnswering(currentThread()) || resending) return;
  resending = true;
  try {
    // Before the first message there is nothing to keep: the edit starts a thread of its own.
    const fork = index === 0 ? null : await api.threads.forkBefore(currentThread(), index);
    await hooks.open(fork ? fork.thread_id : null);
    if (fork && currentThread() !== fork.thread_id) return; // it could not be opened (said already)
    $("message").value = text;
    await send();
  } catch (error) {
    hooks.report(error);
  } finally {
    resending = false;
  }
}
