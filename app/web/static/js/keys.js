// API keys, for admins: make one (shown once), list them, revoke one.
import * as api from "./api.js";
import { el } from "./markdown.js";

const $ = (id) => document.getElementById(id);
let onError = () => {};
let onSignIn = () => {};
let onClosed = () => {};
let open = false; // development mode: no key exists yet, the next one made is the first
let ownKey = null; // the id of the key the page is signed in with

function state(key) {
  if (key.revoked) return `revoked ${new Date(key.revoked * 1000).toLocaleString()}`;
  if (key.expires && key.expires * 1000 <= Date.now()) return "expired";
  if (key.expires) return `in force, until ${new Date(key.expires * 1000).toLocaleString()}`;
  return "in force";
}

function row(key) {
  const own = key.id === ownKey;
  const revoke = el("button", { type: "button", "aria-label": `Revoke ${key.id} (${key.user})` }, "Revoke");
  revoke.disabled = Boolean(key.revoked) || key.source !== "store";
  if (key.source !== "store") revoke.title = "From SKILLDESK_API_KEYS or the keys file: change it there";
  revoke.addEventListener("click", async () => {
    const question = own
      ? `Revoke ${key.id}, the key this page is signed in with? You are signed out, and requests with it are refused from now on.`
      : `Revoke ${key.id} (${key.user})? Requests with it are refused from now on; this cannot be undone.`;
    if (!confirm(question)) return;
    revoke.disabled = true;
    try {
      const revoked = await api.keys.revoke(key.id);
      $("key-status").textContent = `Revoked ${key.id}: requests with it are refused from now on.`;
      line.replaceWith(row(revoked)); // in place: older keys shown stay shown
    } catch (error) {
      revoke.disabled = false;
      onError(error);
    }
  });
  const line = el(
    "tr",
    { "data-key": key.id },
    el("td", {}, key.id, own ? el("strong", { class: "own-key" }, " (this key)") : null),
    el("td", {}, key.user),
    el("td", {}, key.scopes.join(", ")),
    el("td", {}, key.name || (key.source === "store" ? "" : "settings")),
    el("td", {}, state(key)),
    el("td", {}, revoke),
  );
  return line;
}

let olderFrom = null; // `next_cursor` of the page shown last
let shown = 0; // which listing the view shows: a reply for an older one is dropped

/** Fill the table with the service's newest keys (older ones a page at a time, on request). */
export async function loadKeys() {
  const listing = ++shown;
  const page = await api.keys.list();
  if (listing !== shown) return;
  $("key-table").querySelector("tbody").replaceChildren(
    ...(page.data.length ? page.data.map(row) : [el("tr", {}, el("td", { colspan: "6" }, "No keys yet."))]),
  );
  showMore(page);
}

async function loadOlder() {
  const listing = shown;
  const button = $("key-more");
  button.disabled = true; // one page at a time
  try {
    const page = await api.keys.list(olderFrom);
    if (listing !== shown) return; // signed out, or the listing was loaded again meanwhile
    $("key-table").querySelector("tbody").append(...page.data.map(row));
    showMore(page);
  } finally {
    button.disabled = false;
  }
}

function showMore(page) {
  olderFrom = page.next_cursor ?? null;
  $("key-more").hidden = olderFrom === null;
}

async function create(event) {
  event.preventDefault();
  const scopes = [...document.querySelectorAll('#key-form input[name="scope"]:checked')].map((b) => b.value);
  const days = Number($("key-days").value);
  const body = { user: $("key-user").value.trim(), scopes, name: $("key-name").value.trim() };
  if (days > 0) body.expires_in_s = days * 86400;
  if (!scopes.length) {
    $("key-status").textContent = "Choose at least one scope.";
    return;
  }
  const first = open;
  if (first && !scopes.includes("admin")) {
    // Without it nobody could manage keys, nor see the threads made so far, from the page.
    $("key-status").textContent =
      "The first key must include admin: once it exists the page needs a key, and only an admin key can make others here.";
    $("admin-scope").focus();
    return;
  }
  $("key-status").textContent = "Creating…";
  try {
    const made = await api.keys.create(body);
    $("key-made-user").textContent = `${made.user} (${made.scopes.join(", ")})`;
    $("key-made-value").textContent = made.key;
    $("key-made").hidden = false;
    $("key-status").textContent = `Created ${made.id}.`;
    $("key-form").reset();
    if (first) {
      // Development mode has ended (at once in this process; the others within seconds): the
      // listing would be refused. The page says so, and offers to sign in with the key at once.
      setOpen(false);
      $("key-made-next").hidden = false;
      $("key-sign-in").hidden = false;
      $("key-sign-in").onclick = () => onSignIn(made.key);
      $("key-table").querySelector("tbody").replaceChildren(row(made));
      onClosed();
      return;
    }
    await loadKeys();
  } catch (error) {
    $("key-status").textContent = `Could not create the key: ${error.message}`;
    if (error.status === 401) onError(error); // the admin's own key ended: sign in again
  }
}

/** Forget what the view shows (a key shown once, the listing): the user changed. */
export function clearKeys({ keepMade = false } = {}) {
  if (!keepMade) {
    $("key-made").hidden = true;
    $("key-made-value").textContent = "";
    $("key-made-user").textContent = "";
  }
  $("key-made-next").hidden = true;
  $("key-sign-in").hidden = true;
  $("key-status").textContent = "";
  $("key-table").querySelector("tbody").replaceChildren();
  shown += 1; // a listing still on its way is not shown
  showMore({ next_cursor: null });
  $("key-form").reset();
}

/**
 * Who the page acts as: `open` in development mode (no key yet: the first one made ends it),
 * `keyId` the key it is signed in with (marked in the listing).
 */
export function setKeyContext({ open: isOpen, keyId }) {
  ownKey = keyId ?? null;
  setOpen(isOpen);
}

function setOpen(isOpen) {
  open = isOpen;
  $("key-first").hidden = !open;
  if (open) $("admin-scope").checked = true;
}

/** Wire the form; `handlers.onError(error)` shows what the service refused, `onSignIn(key)`
 * signs in with a key just made, `onClosed()` is told that the first key ended development
 * mode. */
export function initKeys(handlers) {
  onError = handlers.onError;
  onSignIn = handlers.onSignIn;
  onClosed = handlers.onClosed;
  $("key-form").addEventListener("reset", () => setTimeout(() => setOpen(open)));
  $("key-form").addEventListener("submit", create);
  $("key-more").addEventListener("click", () => loadOlder().catch(onError));
}
