// The chat: thread list, messages, the streamed answer with its trace, files.
import * as api from "./api.js";
import { approvalCard } from "./approvals.js";
import { el, renderMarkdown } from "./markdown.js";
import { Trace } from "./trace.js";

const $ = (id) => document.getElementById(id);
let current = null; // the open thread's id
// The answers under way this page shows, by thread: the nodes showing one (the answer, its
// approval cards) go back in when its thread is opened again. Only that thread is busy.
const answering = new Map();
let starting = false; // a first message is making its new thread
let attaching = 0; // uploads under way (one may be making its new thread)
const statusOf = new Map(); // thread id: its status (`running`...) as the last listing said
const followedRuns = new Set(); // runs this page joined and read to their end
const RUN = "skilldesk.run."; // + thread id: its run under way, kept over a reload
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
  remember(page.data);
  $("thread-list").replaceChildren(...page.data.map(threadItem));
  if (!page.data.length) $("thread-list").append(el("li", { class: "hint" }, "No threads yet."));
  addOlder(page);
}

/** Forget the user's threads on screen (signed out, or the key no longer works). */
export function forgetThreads() {
  $("thread-list").replaceChildren();
  openThread(null);
  forgotAt = opening; // what the next user does counts as engagement, not this
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

function remember(threads) {
  for (const t of threads) statusOf.set(t.thread_id, t.status);
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
            remember(older.data);
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
  $("thread-title").textContent = "New conversation";
  $("thread-list").classList.remove("open");
  $("threads-toggle").setAttribute("aria-expanded", "false");
  for (const button of document.querySelectorAll(".thread")) {
    button.toggleAttribute("aria-current", button.dataset.thread === id);
  }
  showComposer();
  if (!id) return;
  try {
    const [thread, { approvals }] = await Promise.all([
      api.threads.get(id),
      canApprove ? api.approvals.list({ thread: id }) : { approvals: [] },
    ]);
    if (mine !== opening) return; // another thread (or a new one) was opened meanwhile
    // A message sent while this loaded is answered in this thread: it goes after the thread's.
    const early = [...$("messages").children];
    const run = answering.get(id); // its answer under way, shown as it comes
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
    for (const approval of approvals.filter((a) => a.thread_id === id && !run?.approvals.has(a.approval_id))) {
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
  return el("button", { type: "button", class: "link edit", "aria-label": `Edit this message: ${text.slice(0, 40)}`, onclick: () => startEdit(item, text, index) }, "Edit");
}

function startEdit(item, text, index) {
  if (answering.has(current)) return;
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
  }
  return record.thread_id;
}

/** Send and not Answering… unless the open thread (or one being made) has an answer under way. */
function showComposer() {
  const busy = starting || (current !== null && answering.has(current));
  $("send").disabled = busy;
  const status = $("composer-status");
  if (busy) status.textContent = "Answering…";
  else if (status.textContent === "Answering…") status.textContent = "";
}

function newRun() {
  return { nodes: [], approvals: new Set(), ended: false };
}

async function send() {
  const text = $("message").value.trim();
  if (!text || starting || (current !== null && answering.has(current))) return;
  $("message").value = ""; // sent once, whatever Enter is pressed meanwhile; put back if refused
  starting = true;
  showComposer();
  const run = newRun();
  let id = current;
  let accepted = false;
  try {
    id = await ensureThread();
    answering.set(id, run);
    starting = false;
    showComposer();
    if (current === id) {
      addMessage("user", text);
      if ($("thread-title").textContent === "New conversation") $("thread-title").textContent = text.split("\n")[0].slice(0, 60);
    }
    accepted = await stream(id, run, (onEvent, onRun) => api.runStream(id, { message: text }, onEvent, { onRun }));
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
    if (!accepted) putBack(id, text);
    report(error);
  } finally {
    starting = false;
    if (answering.get(id) === run) answering.delete(id);
    if (run.ended || !accepted) sessionStorage.removeItem(RUN + id);
    showComposer();
    // Back to the message, unless the page asks for a key meanwhile or shows another thread.
    if (current === id && !$("sign-in").contains(document.activeElement)) $("message").focus();
  }
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
  const answer = el("div", { class: "answer" }, el("p", { class: "run-error" }, `The run failed: ${run.message} (${run.code})`));
  const item = el("li", { class: "message assistant failed" }, el("span", { class: "visually-hidden" }, "Answer:"), answer);
  item.append(Trace.stored(threadId, run.run_id).element);
  $("messages").append(item);
}

/**
 * Show a run's answer as its events come: `request(onEvent, onRun)` reads them (a message sent,
 * or a run joined). The answer is shown only while its thread is open (it is put back when
 * the thread is opened again). Whether any event came (false: the message was not taken).
 */
async function stream(id, run, request) {
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
      say(`The run failed: ${data.message} (${data.code})`);
      run.ended = true;
    }
    trace.add(type, data);
  };
  try {
    await request(onEvent, (runId) => sessionStorage.setItem(RUN + id, runId));
  } catch (error) {
    if (error.code === "run_not_found") {
      item.remove(); // nothing to join: the caller says so another way
      run.nodes.splice(run.nodes.indexOf(item), 1);
      throw error;
    }
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
