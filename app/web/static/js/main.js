// Start-up: views, sign-in (an API key, or development mode without one), service errors.
import * as api from "./api.js";
import { clearInbox, loadInbox, waiting } from "./approvals.js";
import { initBrowser, loadBrowser } from "./browser.js";
import {
  engaged,
  forgetThreads,
  initChat,
  loadThreads,
  openThread,
  refreshThread,
  setCanApprove,
  setSeesAll,
  threadAddress,
} from "./chat.js";
import { clearKeys, initKeys, loadKeys, setKeyContext } from "./keys.js";

const $ = (id) => document.getElementById(id);
let canApprove = false;
const COUNT_EVERY_MS = 10_000; // how often the approvals badge is asked for again
// A link to a thread (#thread=ID), read before the views rewrite the address.
let linked = linkedThread();

/** The thread a `#thread=ID` address names; null for none, or for a malformed escape (a
 * thread id is never one: the service answers an unknown id as not found). */
function linkedThread() {
  if (!location.hash.startsWith("#thread=")) return null;
  try {
    return decodeURIComponent(location.hash.slice(8));
  } catch {
    return null;
  }
}

// A key that worked and no longer does: said plainly, and the page asks for another.
const KEY_ENDED = {
  api_key_expired: ["Your API key has expired — sign in again with a new key.", "Key expired"],
  api_key_revoked: ["Your API key was revoked — sign in again with another key.", "Key revoked"],
};

let keyEnded = false; // the banner says the key ran out: later refusals of no key keep it
let wanted = null; // a view the address asked for that needs the user's scopes (keys)

/** Say what went wrong in the banner; `retry` offers to start the page again (when it could
 * not start, or the service could not be reached: starting again may then help). */
function showError(error, { retry = false } = {}) {
  if (keyEnded && error.code === "missing_credentials") return;
  let text = `${error.message} (${error.code || "error"})`;
  const ended = error.status === 401 && KEY_ENDED[error.code];
  if (error.code === "unreachable") text = "Cannot reach the Skilldesk service. Check that it is running, then retry.";
  else if (ended) {
    text = ended[0];
    keyEnded = true;
    api.signOut();
    clearKeys();
    showMode(null);
    $("mode").textContent = ended[1];
  } else if (error.status === 401 && api.apiKey()) text = `Your API key was refused (${error.message}). Sign in with a valid key.`;
  else if (error.status === 401) text = "This service needs an API key. Sign in with one.";
  // The header no longer says what is not so (development mode, or a key that worked).
  if (error.status === 401 && !ended) $("mode").textContent = api.apiKey() ? "Key refused" : "Not signed in";
  else if (error.status === 403) text = `Not allowed: ${error.message}`;
  $("banner-text").textContent = text;
  $("banner-retry").hidden = !(retry || error.code === "unreachable" || error.status === 401);
  $("banner").hidden = false;
  if (error.status === 401) {
    forgetThreads(); // nothing of the user's is left on screen for whoever signs in next
    // Nor a key they made, shown once, nor their approvals; a first key made in development
    // mode (no key signed in: no user to forget) stays, to be copied or signed in with.
    if (api.apiKey() || ended) {
      clearKeys();
      clearInbox($("inbox"));
    }
    showSignIn(true);
  }
}

function clearError() {
  $("banner").hidden = true;
}

function showSignIn(open) {
  $("sign-in").hidden = !open;
  $("sign-in-toggle").setAttribute("aria-expanded", String(open));
  if (open) $("api-key").focus();
}

/** Sign in with `key`; `keepMade`: the key was just made in this page, and stays shown. */
function signInWith(key, { keepMade = false } = {}) {
  api.signIn(key);
  keyEnded = false;
  $("api-key").value = "";
  showSignIn(false);
  switchUser({ keepMade });
}

function showMode(me) {
  const signedIn = Boolean(api.apiKey());
  // A key's user, even while the service has not yet noticed that the first key was made.
  const keyed = Boolean(me && me.user !== null);
  if (!me) $("mode").textContent = signedIn ? "Key refused" : "Not signed in";
  else if (!keyed) $("mode").textContent = "Development mode (no key needed)";
  else $("mode").textContent = `Signed in as ${me.user} (${me.scopes.join(", ")})`;
  $("sign-out").hidden = !signedIn;
  $("sign-in-toggle").hidden = signedIn;
  canApprove = Boolean(me && (me.scopes.includes("approve") || me.scopes.includes("admin")));
  setCanApprove(canApprove);
  document.querySelector('.tab[data-view="approvals"]').hidden = !canApprove;
  const isAdmin = Boolean(me && me.scopes.includes("admin"));
  document.querySelector('.tab[data-view="keys"]').hidden = !isAdmin;
  setKeyContext({ open: Boolean(me && me.auth.startsWith("open") && !keyed), keyId: me?.key_id });
  // Without keys everyone sees every thread already; an admin's key may ask for all of them.
  setSeesAll(isAdmin && keyed);
  if (!isAdmin && !$("view-keys").hidden) showView("chat");
  if (wanted === "keys" && isAdmin) showView("keys"); // asked for by the address: now allowed
  wanted = null;
}

function showCount(count) {
  $("approval-count").textContent = String(count);
  $("approval-count").hidden = count === 0;
}

/** Ask how many approvals wait; `quietly`: a look of the page's own, whose failure is not said
 * (the next action the user takes says it). */
async function refreshCount({ quietly = false } = {}) {
  if (!canApprove) return;
  try {
    showCount(await waiting());
  } catch (error) {
    if (!quietly) showError(error);
  }
}

async function refreshApprovals() {
  try {
    showCount(await loadInbox($("inbox"), refreshCount));
    clearError();
  } catch (error) {
    showError(error);
  }
}

function showView(name) {
  const back = name === "chat" && $("view-chat").hidden; // from another view: it may be stale
  for (const tab of document.querySelectorAll(".tab")) {
    if (tab.dataset.view === name) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== `view-${name}`;
  if (back) refreshThread(); // an approval decided in the inbox shows its outcome
  if (name === "approvals") refreshApprovals();
  if (name === "browser") loadBrowser().then(clearError, showError);
  if (name === "keys") loadKeys().then(clearError, showError);
  history.replaceState(null, "", name === "chat" ? threadAddress() : `#${name}`);
}

async function start() {
  clearError();
  let me = null;
  try {
    await api.health();
    me = await api.me();
  } catch (error) {
    showMode(null);
    showError(error, { retry: true });
    return;
  }
  showMode(me);
  try {
    await loadThreads();
    const last = linked || sessionStorage.getItem("skilldesk.thread");
    linked = null;
    // A message sent while the page was still loading: its thread is open already. Else
    // (Retry, the service back) the open thread as the service has it now.
    if (!engaged()) await openThread(last || null);
    else refreshThread();
    if (!$("view-keys").hidden) loadKeys().catch(showError);
    await refreshCount();
  } catch (error) {
    showError(error, { retry: true });
  }
}

function switchUser({ keepMade = false } = {}) {
  clearKeys({ keepMade }); // a key shown once is not left for the next user, in the page or its DOM
  clearInbox($("inbox")); // nor another user's approvals
  sessionStorage.removeItem("skilldesk.thread");
  forgetThreads(); // nor their threads
  start();
}

// A thread link typed or pasted into the address of an open page opens that thread.
window.addEventListener("hashchange", () => {
  const id = linkedThread();
  if (id === null) return;
  showView("chat");
  openThread(id);
});

document.addEventListener("DOMContentLoaded", () => {
  initChat({ onError: showError, onOk: clearError, onApprovals: refreshCount });
  initBrowser({ onError: showError, onOk: clearError });
  initKeys({
    onError: showError,
    // The first key was made: the admin signs in with it, and sees the threads made so far.
    onSignIn: (key) => {
      sessionStorage.setItem("skilldesk.all", "true");
      signInWith(key, { keepMade: true });
    },
    onClosed: () => {
      $("mode").textContent = "Not signed in";
      $("sign-in-toggle").hidden = false;
      // The threads and approvals shown were development mode's: they need a key from now
      // on (an admin's shows them again as everyone's).
      forgetThreads();
      clearInbox($("inbox"));
      showCount(0);
    },
  });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  $("refresh-approvals").addEventListener("click", refreshApprovals);
  $("banner-retry").addEventListener("click", start);
  $("banner-close").addEventListener("click", () => {
    clearError();
    if ($("message").checkVisibility()) $("message").focus(); // not left on a button that is gone
  });
  // Opens the form, or goes to its field when it is open already (never closes it: Cancel does).
  $("sign-in-toggle").addEventListener("click", () => showSignIn(true));
  $("sign-in-cancel").addEventListener("click", () => {
    showSignIn(false);
    $("sign-in-toggle").focus();
  });
  $("sign-out").addEventListener("click", () => {
    api.signOut();
    $("message").value = ""; // a draft is not left for whoever signs in next
    sessionStorage.removeItem("skilldesk.all");
    switchUser();
  });
  $("sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    signInWith($("api-key").value);
  });
  // Decided elsewhere (another approver, the CLI): the badge follows, while the page is seen.
  const look = () => document.visibilityState === "visible" && refreshCount({ quietly: true });
  setInterval(look, COUNT_EVERY_MS);
  document.addEventListener("visibilitychange", look);
  const view = location.hash.slice(1);
  if (view === "keys") wanted = view; // opened once /v1/me says the user is an admin
  showView(["approvals", "browser"].includes(view) ? view : "chat");
  start();
});
