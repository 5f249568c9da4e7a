// Approvals in the open thread: their cards, the thread shown anew after a decision, and
// cards decided elsewhere followed (the inbox and the badge are main.js and approvals.js).
import { approvalCard, settleCards } from "./approvals.js";
import { el } from "./markdown.js";
import { currentThread, isAnswering } from "./openthread.js";

const $ = (id) => document.getElementById(id);
const FOLLOW_MS = 3000; // how often a waiting approval shown in the open thread is looked at
let canApprove = true;
let following = false; // a look at the waiting approvals is under way
let hooks = { open: async () => {}, approvalsChanged: () => {} };

/** Follow the open thread's approvals: `open(id)` opens a thread, `approvalsChanged()` asks
 * for the approvals badge again. */
export function initThreadApprovals(handlers) {
  hooks = handlers;
  setInterval(followApprovals, FOLLOW_MS);
}

/** Whether the signed-in user may decide approvals (the `approve` scope). */
export function setCanApprove(value) {
  canApprove = value;
}

/** The card, in the thread's list, of an approval a run of thread `threadId` waits for (for a
 * user without the approve scope too: it then says it waits for someone who may approve). */
export function approvalItem(approval, threadId) {
  return el("li", { class: "card" }, approvalCard(approval, decided(threadId), { canApprove }));
}

/** A run of the thread asked for an approval: the badge is asked for again, if the user may
 * decide it. */
export function approvalAsked() {
  if (canApprove) hooks.approvalsChanged();
}

/** After a decision on a card in the thread: the thread as it is now (the run's outcome, the
 * card gone), and what the card said, in the composer's status line. */
function decided(id) {
  return (record, said) => {
    hooks.approvalsChanged();
    if (currentThread() !== id || isAnswering(id)) return;
    hooks.open(id).then(() => {
      if (currentThread() !== id) return;
      if (said) $("composer-status").textContent = said;
      $("message").focus();
    });
  };
}

/**
 * The open thread's waiting approvals: one decided elsewhere (another approver, the CLI) says
 * so on its card, and once its run has ended the thread is shown as it is now (the outcome
 * told to it) and the approvals badge asked for again.
 */
async function followApprovals() {
  const id = currentThread();
  if (following || id === null || isAnswering(id) || $("view-chat").hidden || document.visibilityState !== "visible") return;
  following = true;
  try {
    const said = await settleCards($("messages"));
    if (said === null || currentThread() !== id) return;
    hooks.approvalsChanged();
    if (isAnswering(id)) return;
    await hooks.open(id);
    if (currentThread() === id) $("composer-status").textContent = said;
  } catch {
    // looked at again in a while (the service away, or the run not the user's to read)
  } finally {
    following = false;
  }
}
