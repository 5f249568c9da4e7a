// A thread's answers: a message sent from the composer and its run streamed as it comes, a run
// under way rejoined (after a reload), the open thread's run stopped; and the composer's Send,
// Stop and status line as they leave it.
import * as api from "./api.js";
import { el, renderMarkdown } from "./markdown.js";
import { STOPPED, addMessage, scrollDown, stoppedNote } from "./messages.js";
import { answerOf, currentThread, endAnswer, ensureThread, isAnswering, startAnswer } from "./openthread.js";
import { approvalAsked, approvalItem } from "./threadapprovals.js";
import { NEW_TITLE, loadThreads, remember, titles } from "./threadlist.js";
import { Trace } from "./trace.js";

const $ = (id) => document.getElementById(id);
let starting = false; // a first message is making its new thread
const followedRuns = new Set(); // runs this page joined and read to their end
const RUN = "skilldesk.run."; // + thread id: its run under way, kept over a reload
const MAX_CHARS = 100_000; // a message's text, in characters: the API's limit (MAX_MESSAGE_CHARS)
let hooks = { open: async () => {}, report: () => {}, succeeded: () => {}, stored: () => {} };

/** Wire the composer and Stop: `open(id)` opens a thread, `report` and `succeeded` as the
 * chat's, `stored(thread)` shows what the open thread holds once an answer sent from here ends. */
export function initRuns(handlers) {
  hooks = handlers;
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
  $("stop").addEventListener("click", stop);
  $("message").addEventListener("input", () => $("message").removeAttribute("aria-invalid"));
}

/** Whether a first message is making its new thread. */
export const sending = () => starting;

/** Whether this page followed the run to its end (it is not joined again, should its thread
 * still say it runs). */
export const followedToEnd = (runId) => followedRuns.has(runId);

/** Send and not Answering… unless the open thread (or one being made) has an answer under way;
 * then Stop (once the service took the message), and Delete and Edit wait. */
export function showComposer() {
  const current = currentThread();
  const run = current === null ? undefined : answerOf(current);
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

/** Delete and Edit wait while the thread answers: said where the composer says it answers. */
export function busyNote(what) {
  $("composer-status").textContent = `This thread is answering: stop the answer (or wait for it to end) before ${what}.`;
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

/** Send the composer's message to the open thread (a new one made for it) and show its answer. */
export async function send() {
  const text = $("message").value.trim();
  if (!text || starting || (currentThread() !== null && isAnswering(currentThread()))) return;
  if (!withinLimit(text)) return;
  $("message").value = ""; // sent once, whatever Enter is pressed meanwhile; put back if refused
  starting = true;
  showComposer();
  const run = newRun();
  const fresh = currentThread() === null; // the thread is made for this message
  let id = currentThread();
  let accepted = false;
  let said = null; // the message's bubble
  try {
    id = await ensureThread();
    startAnswer(id, run);
    starting = false;
    showComposer();
    if (currentThread() === id) said = addMessage("user", text);
    const taken = () => {
      // The service took the message: the thread is titled, and listed, while it answers.
      const title = text.split("\n")[0].slice(0, 60);
      if (currentThread() === id && $("thread-title").textContent === NEW_TITLE) $("thread-title").textContent = title;
      if (!fresh) return;
      titles.set(id, title);
      loadThreads().catch(() => {}); // listed once the answer ends anyway
    };
    accepted = await stream(id, run, (onEvent, onRun) => api.runStream(id, { message: text }, onEvent, { onRun }), taken);
    if (!accepted) putBack(id, text);
    await loadThreads();
    if (currentThread() === id) {
      const thread = await api.threads.get(id);
      // Still the open thread: its files and its messages' places (another's are not shown here).
      if (currentThread() === id) hooks.stored(thread);
    }
    if (accepted) hooks.succeeded();
  } catch (error) {
    if (!accepted) {
      said?.remove(); // not sent: the box has it back, not also a bubble
      putBack(id, text);
    }
    if (error.refused) {
      if (currentThread() === id) $("composer-status").textContent = `The message was refused: ${error.message} (${error.code})`;
      if (fresh) abandon(id, run); // the thread made for it stays empty: not kept
    }
    if (!error.refused || error.status === 401 || error.status === 403) hooks.report(error);
  } finally {
    starting = false;
    endAnswer(id, run);
    if (run.ended || !accepted) sessionStorage.removeItem(RUN + id);
    showComposer();
    // Back to the message, unless the page asks for a key meanwhile or shows another thread.
    if (currentThread() === id && !$("sign-in").contains(document.activeElement)) $("message").focus();
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
  endAnswer(id, run);
  if (currentThread() === id) {
    const status = $("composer-status").textContent;
    await hooks.open(null);
    $("composer-status").textContent = status;
  }
  await loadThreads().catch(() => {});
}

/** A message not sent (refused, or the service not reached) is not lost: it goes back into the
 * box, if the box is still its thread's and empty. */
function putBack(id, text) {
  if (currentThread() === id && !$("message").value.trim()) $("message").value = text;
}

/**
 * A run of the thread under way that this page is not following (the page was reloaded, the
 * service restarted and resumed it, another tab sent the message): joined from its first
 * event by its id (`running`, as the thread says it, else the one this tab started), else
 * said to be on its way; the thread is shown as the service has it once the run ends.
 */
export async function rejoin(id, running) {
  const run = newRun();
  startAnswer(id, run);
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
    hooks.report(error);
  } finally {
    endAnswer(id, run);
    showComposer();
  }
  if (currentThread() === id) await hooks.open(id);
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
  if (currentThread() === id) {
    $("messages").append(item);
    scrollDown();
  }
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 1500));
    if (currentThread() !== id) return false;
    const page = await api.threads.list();
    remember(page.data);
    if (page.data.find((t) => t.thread_id === id)?.status !== "running") return true;
  }
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
  if (currentThread() === id) $("messages").append(item);
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
      const card = approvalItem({ ...data, thread_id: id }, id);
      const last = run.nodes.at(-1);
      if (last.isConnected) last.after(card);
      run.nodes.push(card);
      run.approvals.add(data.approval_id);
      approvalAsked();
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
    if (error.code === "unreachable") hooks.report(error);
  } finally {
    if (frame) cancelAnimationFrame(frame);
    paint();
    trace.finish();
    answer.setAttribute("aria-busy", "false");
    item.classList.remove("streaming");
  }
  return received > 0;
}

/** Stop the open thread's answer: the run is cancelled, what it wrote so far stays. */
async function stop() {
  const current = currentThread();
  const run = current === null ? undefined : answerOf(current);
  if (!run?.runId) return;
  const button = $("stop");
  button.disabled = true; // once
  try {
    await api.threads.cancelRun(current, run.runId);
  } catch (error) {
    if (error.code !== "run_not_active") hooks.report(error); // it ended meanwhile: nothing to stop
  } finally {
    button.disabled = false;
  }
}
