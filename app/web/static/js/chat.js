// The chat: thread list, messages, the streamed answer with its trace, files.
import * as api from "./api.js";
import { approvalCard } from "./approvals.js";
import { el, renderMarkdown } from "./markdown.js";
import { Trace } from "./trace.js";

const $ = (id) => document.getElementById(id);
let current = null; // the open thread's id
let busy = false;
let report = () => {};
let succeeded = () => {}; // an action the user asked for went through: an earlier error is old news
let approvalsChanged = () => {};
let canApprove = true;

/** Whether the signed-in user may decide approvals (the `approve` scope). */
export function setCanApprove(value) {
  canApprove = value;
}

export function initChat({ onError, onOk, onApprovals }) {
  report = onError;
  succeeded = onOk;
  approvalsChanged = onApprovals;
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("new-thread").addEventListener("click", () => {
    openThread(null);
    $("message").focus();
  });
  $("rename-thread").addEventListener("click", startRename);
  $("delete-thread").addEventListener("click", deleteThread);
  $("upload").addEventListener("change", upload);
  $("threads-toggle").addEventListener("click", () => {
    const open = $("threads-toggle").getAttribute("aria-expanded") !== "true";
    $("threads-toggle").setAttribute("aria-expanded", String(open));
    $("thread-list").classList.toggle("open", open);
  });
}

export async function loadThreads() {
  const page = await api.threads.list();
  $("thread-list").replaceChildren(...page.data.map(threadItem));
  if (!page.data.length) $("thread-list").append(el("li", { class: "hint" }, "No threads yet."));
  addOlder(page);
}

/** Forget the user's threads on screen (signed out, or the key no longer works). */
export function forgetThreads() {
  $("thread-list").replaceChildren();
  openThread(null);
}

function threadItem(t) {
  return el(
    "li",
    {},
    el(
      "button",
      {
        type: "button",
        class: "thread",
        "data-thread": t.thread_id,
        "aria-current": t.thread_id === current ? "true" : null,
        onclick: () => openThread(t.thread_id),
      },
      el("span", { class: "thread-title" }, t.title || "Untitled"),
      el("span", { class: "thread-time" }, new Date(t.updated * 1000).toLocaleString()),
    ),
  );
}

function addOlder(page) {
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
            const older = await api.threads.list(page.next_cursor);
            // A thread updated since the first page moved up to it: not shown twice.
            const shown = new Set([...document.querySelectorAll(".thread")].map((b) => b.dataset.thread));
            item.replaceWith(...older.data.filter((t) => !shown.has(t.thread_id)).map(threadItem));
            addOlder(older);
            succeeded();
          } catch (error) {
            button.disabled = false;
            report(error);
          }
        },
      },
      "Older threads",
    ),
  );
  $("thread-list").append(item);
}

let opening = 0; // which openThread call is the latest: an earlier one still loading gives way

/** Whether a thread was opened (or a new one started) since the page loaded, or a message sent. */
export const engaged = () => opening > 0 || current !== null || busy;

export async function openThread(id) {
  const mine = ++opening;
  current = id;
  sessionStorage.setItem("skilldesk.thread", id || "");
  $("messages").replaceChildren();
  $("files").hidden = true;
  $("thread-actions").hidden = !id;
  $("thread-title").textContent = "New conversation";
  $("thread-list").classList.remove("open");
  $("threads-toggle").setAttribute("aria-expanded", "false");
  for (const button of document.querySelectorAll(".thread")) {
    button.toggleAttribute("aria-current", button.dataset.thread === id);
  }
  if (!id) return;
  try {
    const [thread, { approvals }] = await Promise.all([
      api.threads.get(id),
      canApprove ? api.approvals.list({ thread: id }) : { approvals: [] },
    ]);
    if (mine !== opening) return; // another thread (or a new one) was opened meanwhile
    // A message sent while this loaded is answered in this thread: it goes after the thread's.
    const live = [...$("messages").children];
    $("thread-title").textContent = thread.title || id;
    for (const message of thread.messages) {
      const kept = { index: message.index, summarised: message.summarised };
      if (message.role === "human") addMessage("user", message.content, kept);
      else if (message.role === "ai" && message.content) {
        const item = addMessage("assistant", message.content, kept);
        if (message.run_id) item.append(Trace.stored(id, message.run_id).element);
      }
      if (message.failed_run) addFailure(id, message.failed_run);
    }
    for (const approval of approvals.filter((a) => a.thread_id === id)) {
      $("messages").append(el("li", { class: "card" }, approvalCard(approval, decided, { canApprove })));
    }
    $("messages").append(...live);
    showFiles(thread.attachments);
    scrollDown();
    succeeded();
  } catch (error) {
    if (mine !== opening) return;
    openThread(null);
    if (error.status === 404) {
      // Deleted, or someone else's: the service answers both alike.
      report(new api.ApiError(404, "thread_not_found", "That thread does not exist, or it is not yours."));
    } else report(error);
  }
}

/**
 * A message of the thread. `index` is its place in the thread (an earlier message of yours can
 * be edited: the edit goes to a new thread that holds what came before it, the original stays);
 * `summarised` marks one the model now sees only through the thread's summary.
 */
function addMessage(who, text, { index, summarised } = {}) {
  const body = who === "user" ? el("p", { class: "text" }, text) : renderMarkdown(text);
  const said = who === "user" ? "You said" : "Answer";
  const item = el(
    "li",
    { class: `message ${who}${summarised ? " summarised" : ""}`, title: summarised ? "Summarised: the model sees this through the thread's summary" : null },
    el("span", { class: "visually-hidden" }, summarised ? `${said} (summarised):` : `${said}:`),
    summarised ? el("span", { class: "summarised-tag", "aria-hidden": "true" }, "Summarised") : null,
    body,
  );
  if (who === "user" && typeof text === "string" && index !== undefined && !summarised) {
    item.append(editButton(item, text, index));
  }
  $("messages").append(item);
  return item;
}

/** The messages sent in this page learn their place in the thread once it is stored. */
function editable(messages) {
  const said = messages.filter((m) => m.role === "human");
  const shown = [...$("messages").querySelectorAll(".message.user")];
  if (said.length !== shown.length) return;
  shown.forEach((item, i) => {
    const message = said[i];
    if (item.querySelector(".edit") || message.summarised || typeof message.content !== "string") return;
    item.append(editButton(item, message.content, message.index));
  });
}

function editButton(item, text, index) {
  return el("button", { type: "button", class: "link edit", "aria-label": `Edit this message: ${text.slice(0, 40)}`, onclick: () => startEdit(item, text, index) }, "Edit");
}

function startEdit(item, text, index) {
  if (busy) return;
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

let resending = false;

async function resend(index, text) {
  if (!text || busy || resending) return;
  resending = true;
  try {
    // Before the first message there is nothing to keep: the edit starts a thread of its own.
    const fork = index === 0 ? null : await api.threads.forkBefore(current, index);
    await openThread(fork ? fork.thread_id : null);
    if (fork && current !== fork.thread_id) return; // it could not be opened (said already)
    $("message").value = text;
    await send();
  } catch (error) {
    report(error);
  } finally {
    resending = false;
  }
}

async function ensureThread() {
  if (current) return current;
  const record = await api.threads.create();
  current = record.thread_id;
  sessionStorage.setItem("skilldesk.thread", current);
  $("thread-actions").hidden = false;
  return current;
}

async function send() {
  const text = $("message").value.trim();
  if (!text || busy) return;
  busy = true;
  $("send").disabled = true;
  $("composer-status").textContent = "Answering…";
  try {
    const id = await ensureThread();
    $("message").value = "";
    addMessage("user", text);
    if ($("thread-title").textContent === "New conversation") $("thread-title").textContent = text.split("\n")[0].slice(0, 60);
    await stream(id, text);
    await loadThreads();
    const thread = await api.threads.get(id);
    showFiles(thread.attachments || []);
    editable(thread.messages);
    succeeded();
  } catch (error) {
    report(error);
  } finally {
    busy = false;
    $("send").disabled = false;
    $("composer-status").textContent = "";
    // Back to the message, unless the page asks for a key meanwhile.
    if (!$("sign-in").contains(document.activeElement)) $("message").focus();
  }
}

/** A run that failed after the message before it, as the page said it when it happened. */
function addFailure(threadId, run) {
  const answer = el("div", { class: "answer" }, el("p", { class: "run-error" }, `The run failed: ${run.message} (${run.code})`));
  const item = el("li", { class: "message assistant failed" }, el("span", { class: "visually-hidden" }, "Answer:"), answer);
  item.append(Trace.stored(threadId, run.run_id).element);
  $("messages").append(item);
}

async function stream(id, text) {
  const trace = new Trace();
  const words = el("div");
  const answer = el("div", { class: "answer", "aria-live": "polite", "aria-busy": "true" }, words);
  const item = el("li", { class: "message assistant streaming" }, el("span", { class: "visually-hidden" }, "Answer:"), answer, trace.element);
  $("messages").append(item);
  const say = (message) => answer.append(el("p", { class: "run-error", role: "alert" }, message));
  let buffer = "";
  let frame = 0;
  let received = 0;
  const paint = () => {
    frame = 0;
    words.replaceChildren(renderMarkdown(buffer));
    scrollDown();
  };
  const onEvent = (type, data) => {
    received++;
    if (type === "token") {
      buffer += data.text;
      frame ||= requestAnimationFrame(paint);
    } else if (type === "reconnect") {
      buffer = ""; // a stopped process's run resumed elsewhere: its answer is written anew
    } else if (type === "approval_required") {
      item.after(el("li", { class: "card" }, approvalCard({ ...data, thread_id: id }, decided, { canApprove })));
      if (canApprove) approvalsChanged();
    } else if (type === "run_finished") {
      buffer = data.answer ?? buffer;
    } else if (type === "run_failed") {
      say(`The run failed: ${data.message} (${data.code})`);
    }
    trace.add(type, data);
  };
  try {
    await api.runStream(id, { message: text }, onEvent);
  } catch (error) {
    if (error.code !== "unreachable") say(`The message was refused: ${error.message} (${error.code})`);
    else if (received) say("The connection to the service was lost; the answer will be in the thread once it is back.");
    else say("The message was not sent: the service cannot be reached.");
    if (error.status === 401 || error.status === 403) throw error; // the caller says why
    if (error.status === 0) report(error);
  } finally {
    if (frame) cancelAnimationFrame(frame);
    paint();
    trace.finish();
    answer.setAttribute("aria-busy", "false");
    item.classList.remove("streaming");
  }
}

function decided() {
  approvalsChanged();
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
      const record = await api.threads.rename(current, input.value.trim());
      title.textContent = record.title;
      await loadThreads();
      succeeded();
    } catch (error) {
      report(error);
    }
    finish();
  });
  form.addEventListener("keydown", (event) => event.key === "Escape" && finish());
  title.replaceWith(form);
  input.select();
}

async function deleteThread() {
  if (!current || !confirm(`Delete “${$("thread-title").textContent}” and its files?`)) return;
  try {
    await api.threads.remove(current);
    await openThread(null);
    await loadThreads();
    $("new-thread").focus();
    succeeded();
  } catch (error) {
    report(error);
  }
}

async function upload() {
  const input = $("upload");
  const file = input.files[0];
  if (!file) return;
  $("composer-status").textContent = `Uploading ${file.name}…`;
  try {
    const id = await ensureThread();
    await api.threads.upload(id, file);
    showFiles((await api.threads.attachments(id)) || []);
    await loadThreads();
    $("composer-status").textContent = `${file.name} attached.`;
    succeeded();
  } catch (error) {
    $("composer-status").textContent = `Could not attach ${file.name}: ${error.message}`;
  } finally {
    input.value = "";
  }
}

function showFiles(files) {
  $("files").hidden = !files.length;
  $("file-list").replaceChildren(...files.map(fileView));
}

function fileView(file) {
  const size = file.size > 1024 ? `${Math.round(file.size / 1024)} KB` : `${file.size} B`;
  const item = el(
    "li",
    { class: "file", "data-file": file.id },
    el("span", { class: "file-name" }, file.name),
    ` (${file.media_type}, ${size})`,
    file.caption ? el("span", { class: "hint" }, ` — ${file.caption}`) : null,
  );
  api
    .fileUrl(file.url)
    .then((url) => {
      if (file.media_type.startsWith("audio/")) {
        item.append(el("audio", { controls: true, preload: "metadata", src: url, "aria-label": `Play ${file.name}` }));
      } else if (file.media_type.startsWith("image/")) {
        item.append(el("img", { src: url, alt: file.caption || file.name }));
      }
      item.append(el("a", { href: url, download: file.name }, `Download ${file.name}`));
    })
    .catch(() => item.append(el("span", { class: "hint" }, " (could not be fetched)")));
  return item;
}

/** To the latest message: the list scrolls on a desktop; at phone width the page does, down
 * to the message box. */
function scrollDown() {
  const list = $("messages");
  if (getComputedStyle(list).overflowY === "visible") window.scrollTo(0, document.scrollingElement.scrollHeight);
  else list.scrollTop = list.scrollHeight;
}

export function currentThread() {
  return current;
}
