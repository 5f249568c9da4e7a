// The open thread's header actions: rename it (in place of its title), delete it.
import * as api from "./api.js";
import { el } from "./markdown.js";
import { currentThread, isAnswering } from "./openthread.js";
import { busyNote } from "./runs.js";
import { loadThreads } from "./threadlist.js";

const $ = (id) => document.getElementById(id);
let hooks = { open: async () => {}, report: () => {}, succeeded: () => {} };

/** Wire Rename and Delete: `open(id)` opens a thread, `report` and `succeeded` as the chat's. */
export function initThreadActions(handlers) {
  hooks = handlers;
  $("rename-thread").addEventListener("click", startRename);
  $("delete-thread").addEventListener("click", deleteThread);
}

function startRename() {
  const title = $("thread-title");
  const input = el("input", { id: "rename-input", value: title.textContent, "aria-label": "New title", required: true, maxlength: "200" });
  // The service refuses a title of only spaces: said here, at the field, instead.
  const check = () => input.setCustomValidity(input.value.trim() ? "" : "Enter a title: not only spaces.");
  input.addEventListener("input", check);
  const form = el(
    "form",
    { class: "rename" },
    input,
    el("button", { type: "submit" }, "Save"),
    el("button", { type: "button", onclick: () => finish() }, "Cancel"),
  );
  const finish = () => {
    form.replaceWith(title);
    $("rename-thread").focus();
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    check();
    if (!input.reportValidity()) return;
    try {
      const record = await api.threads.rename(currentThread(), input.value.trim());
      title.textContent = record.title;
      await loadThreads();
      hooks.succeeded();
    } catch (error) {
      hooks.report(error);
    }
    finish();
  });
  form.addEventListener("keydown", (event) => event.key === "Escape" && finish());
  title.replaceWith(form);
  input.select();
}

async function deleteThread() {
  const current = currentThread();
  if (current && isAnswering(current)) return busyNote("deleting it");
  if (!current || !confirm(`Delete “${$("thread-title").textContent}” and its files?`)) return;
  try {
    await api.threads.remove(current);
    await hooks.open(null);
    await loadThreads();
    $("new-thread").focus();
    hooks.succeeded();
  } catch (error) {
    if (error.code !== "thread_busy") return hooks.report(error);
    // Answering a message sent from elsewhere (another tab, the API).
    hooks.report(new api.ApiError(409, "thread_busy", "This thread is answering a message: stop it, or wait for it to end, then delete the thread."));
  }
}
