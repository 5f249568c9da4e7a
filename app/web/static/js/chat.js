// The chat: the open thread's view (its messages, approvals and files as the service has them,
// an answer under way put back) and the wiring of its parts: runs.js sends and streams answers,
// edit.js edits a message, threadactions.js renames and deletes, threadapprovals.js follows
// the thread's approvals, files.js uploads; openthread.js holds the state they share (the
// thread list beside it is threadlist.js).
import * as api from "./api.js";
import { editable, initEdit, offerEdit } from "./edit.js";
import { initFiles, showFiles, uploading } from "./files.js";
import { addFailure, addMessage, scrollDown } from "./messages.js";
import { answerOf, answersUnderWay, currentThread, isAnswering, isLatest, markForgotten, openedSinceForgotten, setOpen } from "./openthread.js";
import { followedToEnd, initRuns, rejoin, sending, showComposer } from "./runs.js";
import { initThreadActions } from "./threadactions.js";
import { approvalItem, initThreadApprovals } from "./threadapprovals.js";
import { NEW_TITLE, clearThreadList, initThreadList, markOpen, statusOf, titleOf } from "./threadlist.js";
import { Trace } from "./trace.js";

export { currentThread, threadAddress } from "./openthread.js";
export { setCanApprove } from "./threadapprovals.js";
export { loadThreads, setSeesAll } from "./threadlist.js";

const $ = (id) => document.getElementById(id);
let report = () => {};
let succeeded = () => {}; // an action the user asked for went through: an earlier error is old news

export function initChat({ onError, onOk, onApprovals }) {
  report = onError;
  succeeded = onOk;
  initRuns({ open: openThread, report, succeeded, stored: showStored });
  initEdit({ open: openThread, report });
  initThreadActions({ open: openThread, report, succeeded });
  initFiles({ succeeded });
  initThreadApprovals({ open: openThread, approvalsChanged: onApprovals });
  $("new-thread").addEventListener("click", () => {
    openThread(null);
    $("message").focus();
  });
  initThreadList({ open: openThread, current: currentThread, report, succeeded });
}

/** Forget the user's threads on screen (signed out, or the key no longer works). */
export function forgetThreads() {
  clearThreadList();
  openThread(null);
  markForgotten(); // what the next user does counts as engagement, not this
}

/** Whether a thread was opened (or a new one started) since the page loaded or the user
 * changed, or a message sent. */
export const engaged = () =>
  openedSinceForgotten() || currentThread() !== null || answersUnderWay() || sending() || uploading();

export async function openThread(id) {
  const mine = setOpen(id);
  $("messages").replaceChildren();
  $("files").hidden = true;
  $("thread-title").textContent = NEW_TITLE;
  markOpen(id);
  showComposer();
  if (!id) return;
  try {
    const thread = await api.threads.get(id);
    if (!isLatest(mine)) return; // another thread (or a new one) was opened meanwhile
    // A message sent while this loaded is answered in this thread: it goes after the thread's.
    const early = [...$("messages").children];
    const run = answerOf(id); // its answer under way, shown as it comes
    $("thread-title").textContent = titleOf(thread);
    for (const message of thread.messages) {
      if (message.role === "human") offerEdit(addMessage("user", message.content, message), message);
      else if (message.role === "ai" && message.content) {
        const item = addMessage("assistant", message.content, message);
        if (message.run_id) item.append(Trace.stored(id, message.run_id).element);
      }
      if (message.failed_run) addFailure(id, message.failed_run);
    }
    // What its workflow runs wait for: listed with the thread, for a user without the approve
    // scope too (the card then says it waits for someone who may approve).
    for (const approval of (thread.waiting_approvals ?? []).filter((a) => !run?.approvals.has(a.approval_id))) {
      $("messages").append(approvalItem(approval, id));
    }
    if (run) $("messages").append(...run.nodes.filter((node) => !early.includes(node)));
    $("messages").append(...early);
    showFiles(thread.attachments);
    scrollDown();
    succeeded();
    if (thread.status) statusOf.set(id, thread.status);
    // A run followed to its end is not joined again, should the thread still say it runs.
    const stale = thread.run_id && followedToEnd(thread.run_id);
    if (!run && !stale && statusOf.get(id) === "running") rejoin(id, thread.run_id);
  } catch (error) {
    if (!isLatest(mine)) return;
    openThread(null);
    if (error.status === 404) {
      // Deleted, or someone else's: the service answers both alike.
      report(new api.ApiError(404, "thread_not_found", "That thread does not exist, or it is not yours."));
    } else report(error);
  }
}

/** The open thread as stored once an answer sent from this page ended: its files, and its
 * messages' places (they can be edited). */
function showStored(thread) {
  showFiles(thread.attachments || []);
  editable(thread.messages);
}

/** The open thread as the service has it now (an approval decided elsewhere shows its outcome). */
export function refreshThread() {
  const id = currentThread();
  if (id && !isAnswering(id)) openThread(id);
}
