// Approval cards (in the chat where a run waits, and in the inbox) and the inbox itself.
import * as api from "./api.js";
import { codeBlock, el, pretty } from "./markdown.js";

let counter = 0;

/**
 * A card to approve or reject one waiting run; `onDecided(record, said)` after a decision
 * (`said`: what the card says of it). Without
 * the `approve` scope it only says that the run waits for an approver.
 */
export function approvalCard(approval, onDecided = () => {}, { canApprove = true } = {}) {
  const id = `approval-${++counter}`;
  const comment = el("textarea", { id: `${id}-comment`, rows: 2 });
  const status = el("p", { class: "status", role: "status" });
  const buttons = [];
  const decide = async (decision) => {
    buttons.forEach((b) => (b.disabled = true));
    status.textContent = decision === "approve" ? "Approving…" : "Rejecting…";
    try {
      const record = await api.approvals.decide(approval.approval_id, decision, comment.value);
      const message = record.outputs?.message;
      status.textContent = `${decision === "approve" ? "Approved" : "Rejected"}. Run ${record.status.toLowerCase()}${message ? `: ${message}` : "."}`;
      card.classList.add("decided");
      onDecided(record, status.textContent);
    } catch (error) {
      // already_decided: decided by someone else, or its run ended (cancelled) without a decision; the server says which.
      status.textContent = error.code === "already_decided" ? error.message : `Could not decide: ${error.message}`;
      buttons.forEach((b) => (b.disabled = error.code === "already_decided"));
    }
  };
  buttons.push(
    el("button", { type: "button", class: "approve", onclick: () => decide("approve") }, "Approve"),
    el("button", { type: "button", class: "reject", onclick: () => decide("reject") }, "Reject"),
  );
  const context = [approval.workflow && `workflow ${approval.workflow}`, approval.node && `step ${approval.node}`]
    .filter(Boolean)
    .join(", ");
  const card = el(
    "section",
    { class: "approval", "aria-labelledby": `${id}-title`, "data-approval": approval.approval_id, "data-run": approval.run_id },
    el("h3", { id: `${id}-title` }, "Approval needed"),
    el("p", { class: "approval-summary" }, approval.summary),
    context || approval.asked ? el("p", { class: "hint approval-context" }, context, askedAt(approval.asked, context)) : null,
    approval.data !== null && approval.data !== undefined ? codeBlock(pretty(approval.data), "What is to be approved") : null,
    ...(canApprove
      ? [el("label", { for: `${id}-comment` }, "Comment"), comment, el("div", { class: "approval-actions" }, buttons), status]
      : [el("p", { class: "hint" }, "It waits for someone with the approve scope."), status]),
  );
  return card;
}

/** When the approval was asked (its run came to wait), in local time; none when the service
 * does not say (approvals asked before it kept the time). The approval does not say who asked:
 * its thread's owner, which the inbox does not carry. */
function askedAt(asked, after) {
  if (typeof asked !== "number") return null;
  const when = new Date(asked * 1000);
  const time = el("time", { datetime: when.toISOString() }, when.toLocaleString());
  return el("span", { class: "approval-asked" }, after ? ", asked " : "Asked ", time);
}

const ENDED = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]); // a workflow run's last statuses

/**
 * The waiting cards in `container`, as their workflow runs stand now: a card decided elsewhere
 * (another approver, the CLI) says so. What the card of a run that has ended says; null while
 * none has (one decided and going on is looked at again next time).
 */
export async function settleCards(container) {
  const cards = [...container.querySelectorAll(".approval[data-run]:not(.decided)")];
  for (const runId of new Set(cards.map((card) => card.dataset.run))) {
    const record = await api.workflowRuns.get(runId);
    if (record.status === "WAITING") continue;
    const ended = ENDED.has(record.status);
    let said = "";
    for (const card of cards.filter((c) => c.dataset.run === runId)) said = settleCard(card, record, ended);
    if (ended) return said;
  }
  return null;
}

/** A card whose approval was decided elsewhere: says how its run stands now (`record`: the
 * workflow run), its buttons off; `ended`: the run is over. */
function settleCard(card, record, ended) {
  const message = record.outputs?.message;
  const status = card.querySelector(".status");
  status.textContent = ended
    ? `Decided. Run ${record.status.toLowerCase()}${message ? `: ${message}` : "."}`
    : "Decided: the run goes on…";
  for (const button of card.querySelectorAll(".approval-actions button")) button.disabled = true;
  if (ended) card.classList.add("decided");
  return status.textContent;
}

/** How many approvals wait. */
export async function waiting() {
  return (await api.approvals.list({ limit: 1 })).total;
}

const PAGE = 50; // cards a page of the inbox shows
let olderFrom = null; // `next_cursor` of the inbox's last page
let shown = 0; // which filling of the inbox is on screen: a reply for an older one is dropped

/** Fill the inbox, newest first (a decided card stays until the next refresh; older pages on
 * request); returns how many wait. */
export async function loadInbox(container, onDecided) {
  const filling = ++shown;
  const page = await api.approvals.list({ limit: PAGE });
  if (filling !== shown) return page.total;
  const more = el("button", { type: "button", class: "inbox-more" }, "Show older approvals");
  more.addEventListener("click", async () => {
    more.disabled = true; // one page at a time
    try {
      const older = await api.approvals.list({ limit: PAGE, cursor: olderFrom });
      if (filling !== shown) return; // refreshed meanwhile
      more.before(...older.approvals.map((a) => approvalCard(a, onDecided)));
      olderFrom = older.next_cursor ?? null;
      more.hidden = olderFrom === null;
    } finally {
      more.disabled = false;
    }
  });
  olderFrom = page.next_cursor ?? null;
  more.hidden = olderFrom === null;
  container.replaceChildren(
    ...(page.approvals.length
      ? page.approvals.map((a) => approvalCard(a, onDecided))
      : [el("p", {}, "Nothing waits for a decision.")]),
    more,
  );
  return page.total;
}

/** Forget the inbox (the user changed): its cards, and a page of it still on its way. */
export function clearInbox(container) {
  shown += 1;
  olderFrom = null;
  container.replaceChildren();
}
