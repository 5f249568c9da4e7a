// The chat: messages, the streamed answer with its trace, files (the thread list beside it is
// threadlist.js).
import * as api from "./api.js";
import { approvalCard, settleCards } from "./approvals.js";
import { el, renderMarkdown } from "./markdown.js";
import { NEW_TITLE, clearThreadList, initThreadList, loadThreads, markOpen, remember, statusOf, titleOf, titles } from "./threadlist.js";
import { Trace } from "./trace.js";

export { loadThreads, setSeesAll } from "./threadlist.js";

const $ = (id) => document.getElementById(id);
let current = null; // the open thread's id
// The answers under way this page shows, by thread: the nodes showing one (the answer, its
// approval cards) go back in when its thread is opened again. Only that thread is busy.
const answering = new Map();
let starting = false; // a first message is making its new thread
let attaching = 0; // uploads under way (one may be making its new thread)
const followedRuns = new Set(); // runs this page joined and read to their end
const RUN = "skilldesk.run."; // + thread id: its run under way, kept over a reload
let report = () => {};
let succeeded = () => {}; // an action the user asked for went through: an earlier error is old news
let approvalsChanged = () => {};
let canApprove = true;
const MAX_CHARS = 100_000; // a message's text, in characters: the API's limit (MAX_MESSAGE_CHARS)
const FOLLOW_MS = 3000; // how often a waiting approval shown in the open thread is looked at
const STOPPED = "run_cancelled_by_request"; // a run's failure code when it was stopped as asked

/** Whether the signed-in user may decide approvals (the `approve` scope). */
export function setCanApprove(value) {
  canApprove = value;
}

/** The page's address for the open thread (`#thread=ID`, to copy), or none. */
export function threadAddress() {
  return current ? `#thread=${encodeURIComponent(current)}` : location.pathname;
}

function showAddress() {
  if (!$("view-chat").hidden) history.replaceState(null, "", threadAddress());
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
  $("stop").addEventListener("click", stop);
  $("upload").addEventListener("change", upload);
  $("message").addEventListener("input", () => $("message").removeAttribute("aria-invalid"));
  setInterval(followApprovals, FOLLOW_MS);
  initThreadList({ open: openThread, current: () => current, report, succeeded });
}

/** Forget the user's threads on screen (signed out, or the key no longer works). */
export function forgetThreads() {
  clearThreadList();
  openThread(null);
  forgotAt = opening; // what the next user does counts as engagement, not this
}

let opening = 0; // which openThread call is the latest: an earlier one still loading gives way
let forgotAt = 0; // `opening` when the last user's threads were forgotten (sign-out)

/** Whether a thread was opened (or a new one started) since the page loaded or the user
 * changed, or a message sent. */
export const engaged = () =>
  opening > forgotAt || current !== null || answering.size > 0 || starting || attaching > 0;

export async function openThread(id) {
  const mine = ++opening;
  current = id;
  sessionStorage.setItem("skilldesk.thread", id || "");
  $("messages").replaceChildren();
  $("files").hidden = true;
  $("thread-actions").hidden = !id;
  $("thread-title").textContent = NEW_TITLE;
  markOpen(id);
  showAddress();
  showComposer();
  if (!id) return;
  try {
    const thread = await api.threads.get(id);
    if (mine !== opening) return; // another thread (or a new one) was opened meanwhile
    // A message sent while this loaded is answered in this thread: it goes after the thread's.
    const early = [...$("messages").children];
    const run = answering.get(id); // its answer under way, shown as it comes
    $("thread-title").textContent = titleOf(thread);
    for (const message of thread.messages) {
      const kept = { index: message.index, summarised: message.summarised };
      if (message.role === "human") addMessage("user", message.content, kept);
      else if (message.role === "ai" && message.content) {
        const item = addMessage("assistant", message.content, kept);
        if (message.run_id) item.append(Trace.stored(id, message.run_id).element);
      }
      if (message.failed_run) addFailure(id, message.failed_run);
    }
    // What its workflow runs wait for: listed with the thread, for a user without the approve
    // scope too (the card then says it waits for someone who may approve).
    for (const approval of (thread.waiting_approvals ?? []).filter((a) => !run?.approvals.has(a.approval_id))) {
      $("messages").append(el("li", { class: "card" }, approvalCard(approval, decided(id), { canApprove })));
    }
    if (run) $("messages").append(...run.nodes.filter((node) => !early.includes(node)));
    $("messages").append(...early);
    showFiles(thread.attachments);
    scrollDown();
    succeeded();
    if (thread.status) statusOf.set(id, thread.status);
    // A run followed to its end is not joined again, should the thread still say it runs.
    const stale = thread.run_id && followedRuns.has(thread.run_id);
    if (!run && !stale && statusOf.get(id) === "running") rejoin(id, thread.run_id);
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
  const busy = answering.has(current) ? "true" : null;
  return el("button", { type: "button", class: "link edit", "aria-label": `Edit this message: ${text.slice(0, 40)}`, "aria-disabled": busy, onclick: () => startEdit(item, text, index) }, "Edit");
}

/** Delete and Edit wait while the thread answers: said where the composer says it answers. */
function busyNote(what) {
  $("composer-status").textContent = `This thread is answering: stop the answer (or wait for it to end) before ${what}.`;
}

function startEdit(item, text, index) {
  if (answering.has(current)) return busyNote("editing a message");
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
  if (!text || answering.has(current) || resending) return;
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
  const mine = opening;
  const record = await api.threads.create();
  if (mine === opening) {
    // Still the open conversation (not left for another thread meanwhile): it is this one.
    current = record.thread_id;
    sessionStorage.setItem("skilldesk.thread", current);
    $("thread-actions").hidden = false;
    showAddress();
  }
  return record.thread_id;
}

/** Send and not Answering… unless the open thread (or one being made) has an answer under way;
 * then Stop (once the service took the message), and Delete and Edit wait. */
function showComposer() {
  const run = current === null ? undefined : answering.get(current);
  const busy = starting || run !== undefined;
  $("send").disabled = busy;
  $("stop").hidden = !run?.runId;
  const status = $("composer-status");
  if (busy) status.textContent = "Answering…";
  else if (status.textContent === "Answering…" || status.textContent.startsWith("This thread is answering")) {
    status.textContent = "";
  }
  const waits = String(run !== undefined);
  $("delete-thread").setAttribute("aria-disabled", waits);
  for (const button of $("messages").querySelectorAll(".edit")) button.setAttribute("aria-disabled", waits);
}

function newRun() {
  return { nodes: [], approvals: new Set(), ended: false, runId: null };
}

/** Characters as the service counts them (code points, not UTF-16 units). */
function length(text) {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** Whether the message may be sent: a longer one than the service takes is said here. */
function withinLimit(text) {
  const count = length(text);
  if (count <= MAX_CHARS) return true;
  const n = (value) => value.toLocaleString("en");
  $("message").setAttribute("aria-invalid", "true");
  $("composer-status").textContent =
    `Not sent: the message is ${n(count)} characters long, and the limit is ${n(MAX_CHARS)}. Shorten it by ${n(count - MAX_CHARS)}.`;
  return false;
}

async function send() {
  const text = $("message").value.trim();
  if (!text || starting || (current !== null && answering.has(current))) return;
  if (!withinLimit(text)) return;
  $("message").value = ""; // sent once, whatever Enter is pressed meanwhile; put back if refused
  starting = true;
  showComposer();
  const run = newRun();
  const fresh = current === null; // the thread is made for this message
  let id = current;
  let accepted = false;
  let said = null; // the message's bubble
  try {
    id = await ensureThread();
    answering.set(id, run);
    starting = false;
    showComposer();
    if (current === id) said = addMessage("user", text);
    const taken = () => {
      // The service took the message: the thread is titled, and listed, while it answers.
      const title = text.split("\n")[0].slice(0, 60);
      if (current === id && $("thread-title").textContent === NEW_TITLE) $("thread-title").textContent = title;
      if (!fresh) return;
      titles.set(id, title);
      loadThreads().catch(() => {}); // listed once the answer ends anyway
    };
    accepted = await stream(id, run, (onEvent, onRun) => api.runStream(id, { message: text }, onEvent, { onRun }), taken);
    if (!accepted) putBack(id, text);
    await loadThreads();
    if (current === id) {
      const thread = await api.threads.get(id);
      if (current === id) {
        // Still the open thread: its files and its messages' places (another's are not shown here).
        showFiles(thread.attachments || []);
        editable(thread.messages);
      }
    }
    if (accepted) succeeded();
  } catch (error) {
    if (!accepted) {
      said?.remove(); // not sent: the box has it back, not also a bubble
      putBack(id, text);
    }
    if (error.refused) {
      if (current === id) $("composer-status").textContent = `The message was refused: ${error.message} (${error.code})`;
      if (fresh) abandon(id, run); // the thread made for it stays empty: not kept
    }
    if (!error.refused || error.status === 401 || error.status === 403) report(error);
  } finally {
    starting = false;
    if (answering.get(id) === run) answering.delete(id);
    if (run.ended || !accepted) sessionStorage.removeItem(RUN + id);
    showComposer();
    // Back to the message, unless the page asks for a key meanwhile or shows another thread.
    if (current === id && !$("sign-in").contains(document.activeElement)) $("message").focus();
  }
}

/** The thread made for a message the service refused: deleted (it is empty), and the page
 * back on a new conversation, the message still in the box. */
async function abandon(id, run) {
  try {
    await api.threads.remove(id);
  } catch {
    return; // kept, empty: it can be deleted by hand
  }
  titles.delete(id);
  if (answering.get(id) === run) answering.delete(id);
  if (current === id) {
    const status = $("composer-status").textContent;
    await openThread(null);
    $("composer-status").textContent = status;
  }
  await loadThreads().catch(() => {});
}

/** A message not sent (refused, or the service not reached) is not lost: it goes back into the
 * box, if the box is still its thread's and empty. */
function putBack(id, text) {
  if (current === id && !$("message").value.trim()) $("message").value = text;
}

/**
 * A run of the thread under way that this page is not following (the page was reloaded, the
 * service restarted and resumed it, another tab sent the message): joined from its first
 * event by its id (`running`, as the thread says it, else the one this tab started), else
 * said to be on its way; the thread is shown as the service has it once the run ends.
 */
async function rejoin(id, running) {
  const run = newRun();
  answering.set(id, run);
  showComposer();
  const runId = running || sessionStorage.getItem(RUN + id);
  try {
    let followed = false;
    if (runId) {
      try {
        await stream(id, run, (onEvent, onRun) => api.joinStream(id, runId, onEvent, { onRun }));
        followed = true;
        if (run.ended) followedRuns.add(runId); // not one whose stream was lost on the way
      } catch (error) {
        if (error.code !== "run_not_found") throw error; // ended, or its process restarted
      }
    }
    if (!followed && !(await waitFor(id, run))) return; // left for another thread: no more
    sessionStorage.removeItem(RUN + id);
    await loadThreads();
  } catch (error) {
    report(error);
  } finally {
    if (answering.get(id) === run) answering.delete(id);
    showComposer();
  }
  if (current === id) await openThread(id);
}

/** Say an answer is on its way, and watch the thread's status until its run ends (true), or
 * until another thread is opened (false). */
async function waitFor(id, run) {
  const note = el("p", { class: "hint" }, "An answer is on its way; it shows here when it is ready.");
  const item = el(
    "li",
    { class: "message assistant streaming" },
    el("span", { class: "visually-hidden" }, "Answer:"),
    el("div", { class: "answer", "aria-live": "polite", "aria-busy": "true" }, note),
  );
  run.nodes.push(item);
  if (current === id) {
    $("messages").append(item);
    scrollDown();
  }
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 1500));
    if (current !== id) return false;
    const page = await api.threads.list();
    remember(page.data);
    if (page.data.find((t) => t.thread_id === id)?.status !== "running") return true;
  }
}

/** A run that failed after the message before it, as the page said it when it happened. */
function addFailure(threadId, run) {
  const answer = el("div", { class: "answer" }, run.code === STOPPED ? stoppedNote() : el("p", { class: "run-error" }, `The run failed: ${run.message} (${run.code})`));
  const item = el("li", { class: "message assistant failed" }, el("span", { class: "visually-hidden" }, "Answer:"), answer);
  item.append(Trace.stored(threadId, run.run_id).element);
  $("messages").append(item);
}

function stoppedNote() {
  return el("p", { class: "hint stopped" }, "Stopped as asked: the answer ends here.");
}

/**
 * Show a run's answer as its events come: `request(onEvent, onRun)` reads them (a message sent,
 * or a run joined); `taken()` once the service took it (its run's id known). The answer is
 * shown only while its thread is open (it is put back when the thread is opened again).
 * Whether any event came (false: the service was not reached). A request the service refused
 * is thrown (marked `refused`), its answer taken off the thread.
 */
async function stream(id, run, request, taken = () => {}) {
  const trace = new Trace();
  const words = el("div");
  const answer = el("div", { class: "answer", "aria-live": "polite", "aria-busy": "true" }, words);
  const item = el("li", { class: "message assistant streaming" }, el("span", { class: "visually-hidden" }, "Answer:"), answer, trace.element);
  run.nodes.push(item);
  if (current === id) $("messages").append(item);
  const say = (message) => answer.append(el("p", { class: "run-error", role: "alert" }, message));
  let buffer = "";
  let frame = 0;
  let received = 0;
  const paint = () => {
    frame = 0;
    words.replaceChildren(renderMarkdown(buffer));
    if (item.isConnected) scrollDown();
  };
  const onEvent = (type, data) => {
    received++;
    if (type === "token") {
      buffer += data.text;
      frame ||= requestAnimationFrame(paint);
    } else if (type === "reconnect") {
      buffer = ""; // a stopped process's run resumed elsewhere: its answer is written anew
    } else if (type === "approval_required") {
      const card = el("li", { class: "card" }, approvalCard({ ...data, thread_id: id }, decided(id), { canApprove }));
      const last = run.nodes.at(-1);
      if (last.isConnected) last.after(card);
      run.nodes.push(card);
      run.approvals.add(data.approval_id);
      if (canApprove) approvalsChanged();
    } else if (type === "run_finished") {
      buffer = data.answer ?? buffer;
      run.ended = true;
    } else if (type === "run_failed") {
      if (data.code === STOPPED) answer.append(stoppedNote());
      else say(`The run failed: ${data.message} (${data.code})`);
      run.ended = true;
    }
    trace.add(type, data);
  };
  const onRun = (runId) => {
    sessionStorage.setItem(RUN + id, runId);
    const first = run.runId === null;
    run.runId = runId;
    showComposer(); // Stop, now that there is a run to stop
    if (first) taken();
  };
  try {
    await request(onEvent, onRun);
  } catch (error) {
    if (error.code === "run_not_found" || error.status > 0) {
      // Nothing to join (the caller says so another way), or refused: the caller says why.
      item.remove();
      run.nodes.splice(run.nodes.indexOf(item), 1);
      error.refused = error.code !== "run_not_found";
      throw error;
    }
    if (error.code !== "unreachable") say(`The answer could not be shown: ${error.message}`);
    else if (received) say("The connection to the service was lost; the answer will be in the thread once it is back.");
    else say("The message was not sent: the service cannot be reached.");
    if (error.code === "unreachable") report(error);
  } finally {
    if (frame) cancelAnimationFrame(frame);
    paint();
    trace.finish();
    answer.setAttribute("aria-busy", "false");
    item.classList.remove("streaming");
  }
  return received > 0;
}

/** After a decision on a card in the thread: the thread as it is now (the run's outcome, the
 * card gone), and what the card said, in the composer's status line. */
function decided(id) {
  return (record, said) => {
    approvalsChanged();
    if (current !== id || answering.has(id)) return;
    openThread(id).then(() => {
      if (current !== id) return;
      if (said) $("composer-status").textContent = said;
      $("message").focus();
    });
  };
}

/** The open thread as the service has it now (an approval decided elsewhere shows its outcome). */
export function refreshThread() {
  if (current && !answering.has(current)) openThread(current);
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
  if (current && answering.has(current)) return busyNote("deleting it");
  if (!current || !confirm(`Delete “${$("thread-title").textContent}” and its files?`)) return;
  try {
    await api.threads.remove(current);
    await openThread(null);
    await loadThreads();
    $("new-thread").focus();
    succeeded();
  } catch (error) {
    if (error.code !== "thread_busy") return report(error);
    // Answering a message sent from elsewhere (another tab, the API).
    report(new api.ApiError(409, "thread_busy", "This thread is answering a message: stop it, or wait for it to end, then delete the thread."));
  }
}

/** Stop the open thread's answer: the run is cancelled, what it wrote so far stays. */
async function stop() {
  const run = current === null ? undefined : answering.get(current);
  if (!run?.runId) return;
  const button = $("stop");
  button.disabled = true; // once
  try {
    await api.threads.cancelRun(current, run.runId);
  } catch (error) {
    if (error.code !== "run_not_active") report(error); // it ended meanwhile: nothing to stop
  } finally {
    button.disabled = false;
  }
}

let following = false; // a look at the waiting approvals is under way

/**
 * The open thread's waiting approvals: one decided elsewhere (another approver, the CLI) says
 * so on its card, and once its run has ended the thread is shown as it is now (the outcome
 * told to it) and the approvals badge asked for again.
 */
async function followApprovals() {
  const id = current;
  if (following || id === null || answering.has(id) || $("view-chat").hidden || document.visibilityState !== "visible") return;
  following = true;
  try {
    const said = await settleCards($("messages"));
    if (said === null || current !== id) return;
    approvalsChanged();
    if (answering.has(id)) return;
    await openThread(id);
    if (current === id) $("composer-status").textContent = said;
  } catch {
    // looked at again in a while (the service away, or the run not the user's to read)
  } finally {
    following = false;
  }
}

async function upload() {
  const input = $("upload");
  const file = input.files[0];
  if (!file) return;
  $("composer-status").textContent = `Uploading ${file.name}…`;
  attaching += 1; // the page's start must not open another thread over the one it makes
  try {
    const id = await ensureThread();
    await api.threads.upload(id, file);
    const files = (await api.threads.attachments(id)) || [];
    if (current === id) showFiles(files); // not another thread's, opened meanwhile
    await loadThreads();
    $("composer-status").textContent = `${file.name} attached.`;
    succeeded();
  } catch (error) {
    $("composer-status").textContent = `Could not attach ${file.name}: ${error.message}`;
  } finally {
    attaching -= 1;
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
