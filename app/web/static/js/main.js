// Start-up: views, sign-in (an API key, or development mode without one), service errors.
import * as api from "./api.js";
import { loadInbox, waiting } from "./approvals.js";
import { loadBrowser, initBrowser } from "./browser.js";
import { initChat, loadThreads, openThread } from "./chat.js";

const $ = (id) => document.getElementById(id);

function showError(error) {
  let text = `${error.message} (${error.code || "error"})`;
  if (error.code === "unreachable") text = "Cannot reach the Skilldesk service. Check that it is running, then retry.";
  else if (error.status === 401 && /expired/.test(error.code)) text = "Your API key has expired. Sign in with a new one.";
  else if (error.status === 401 && api.apiKey()) text = `Your API key was refused (${error.message}). Sign in with a valid key.`;
  else if (error.status === 401) text = "This service needs an API key. Sign in with one.";
  else if (error.status === 403) text = `Not allowed: ${error.message}`;
  $("banner-text").textContent = text;
  $("banner").hidden = false;
  if (error.status === 401) showSignIn(true);
}

function clearError() {
  $("banner").hidden = true;
}

function showSignIn(open) {
  $("sign-in").hidden = !open;
  if (open) $("api-key").focus();
}

function showMode() {
  const signedIn = Boolean(api.apiKey());
  $("mode").textContent = signedIn ? "Signed in with a key" : "Development mode (no key)";
  $("sign-out").hidden = !signedIn;
  $("sign-in-toggle").hidden = signedIn;
}

function showCount(count) {
  $("approval-count").textContent = String(count);
  $("approval-count").hidden = count === 0;
}

async function refreshCount() {
  try {
    showCount(await waiting());
  } catch (error) {
    showError(error);
  }
}

async function refreshApprovals() {
  try {
    showCount(await loadInbox($("inbox"), refreshCount));
  } catch (error) {
    showError(error);
  }
}

function showView(name) {
  for (const tab of document.querySelectorAll(".tab")) {
    tab.toggleAttribute("aria-current", tab.dataset.view === name);
    if (tab.dataset.view === name) tab.setAttribute("aria-current", "page");
  }
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== `view-${name}`;
  if (name === "approvals") refreshApprovals();
  if (name === "browser") loadBrowser().catch(showError);
  location.hash = name === "chat" ? "" : name;
}

async function start() {
  clearError();
  try {
    await api.health();
    await loadThreads();
    const last = sessionStorage.getItem("skilldesk.thread");
    if (last) await openThread(last);
    await refreshCount();
  } catch (error) {
    showError(error);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  initChat({ onError: showError, onApprovals: refreshCount });
  initBrowser({ onError: showError });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  $("refresh-approvals").addEventListener("click", refreshApprovals);
  $("banner-retry").addEventListener("click", start);
  $("sign-in-toggle").addEventListener("click", () => showSignIn($("sign-in").hidden));
  $("sign-out").addEventListener("click", () => {
    api.signOut();
    showMode();
    start();
  });
  $("sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    api.signIn($("api-key").value);
    $("api-key").value = "";
    showSignIn(false);
    showMode();
    start();
  });
  showMode();
  const view = location.hash.slice(1);
  showView(["approvals", "browser"].includes(view) ? view : "chat");
  start();
});
