// The state the chat's modules share, read and changed only through these functions: which
// thread is open (and whether an opening of it is still the latest), and the answers under way
// this page shows, by thread.
import * as api from "./api.js";

const $ = (id) => document.getElementById(id);
let current = null; // the open thread's id
let opening = 0; // which opening is the latest: an earlier one still loading gives way
let forgotAt = 0; // `opening` when the last user's threads were forgotten (sign-out)
// The answers under way this page shows, by thread: the nodes showing one (the answer, its
// approval cards) go back in when its thread is opened again. Only that thread is busy.
const answering = new Map();

export function currentThread() {
  return current;
}

/** The page's address for the open thread (`#thread=ID`, to copy), or none. */
export function threadAddress() {
  return current ? `#thread=${encodeURIComponent(current)}` : location.pathname;
}

function showAddress() {
  if (!$("view-chat").hidden) history.replaceState(null, "", threadAddress());
}

/** Make `id` the open thread (null: a new conversation), kept over a reload and in the address;
 * gives the opening's number, which `isLatest` tells is still the latest. */
export function setOpen(id) {
  const mine = ++opening;
  current = id;
  sessionStorage.setItem("skilldesk.thread", id || "");
  $("thread-actions").hidden = !id;
  showAddress();
  return mine;
}

/** Whether no thread (nor a new conversation) was opened since opening number `mine`. */
export const isLatest = (mine) => mine === opening;

/** The open thread's id, the thread made first when the open conversation is a new one. */
export async function ensureThread() {
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

/** The user's threads were forgotten: what the next user opens counts as engagement. */
export function markForgotten() {
  forgotAt = opening;
}

/** Whether a thread (or a new conversation) was opened since the user's threads were last
 * forgotten (or the page loaded). */
export const openedSinceForgotten = () => opening > forgotAt;

/** The answer under way in a thread (`{ nodes, approvals, ended, runId }`), if any. */
export const answerOf = (id) => answering.get(id);

/** Whether the thread has an answer under way in this page. */
export const isAnswering = (id) => answering.has(id);

/** Whether any thread has an answer under way in this page. */
export const answersUnderWay = () => answering.size > 0;

/** The thread's answer under way is `run`. */
export function startAnswer(id, run) {
  answering.set(id, run);
}

/** The thread's answer `run` is over; a later one in its place stays. */
export function endAnswer(id, run) {
  if (answering.get(id) === run) answering.delete(id);
}
