// The one place the page talks to the service: endpoints, the API key and its header, errors.

const KEY = "skilldesk.key";

/** An error from the service (or from reaching it), with a stable code. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function signIn(key) {
  sessionStorage.setItem(KEY, key.trim());
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function send(method, path, { json, form, extraHeaders } = {}) {
  const init = { method, headers: headers(extraHeaders) };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (form) {
    init.body = form;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, "unreachable", "The Skilldesk service cannot be reached.");
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function errorOf(response) {
  let error = {};
  try {
    error = (await response.json()).error || {};
  } catch {
    // not JSON: a proxy's page, say
  }
  const code = error.code || (response.status === 401 ? "unauthorized" : `http_${response.status}`);
  return new ApiError(response.status, code, error.message || response.statusText);
}

async function json(method, path, options) {
  const response = await send(method, path, options);
  return response.status === 204 ? null : response.json();
}

const enc = encodeURIComponent;

export const threads = {
  /** A page of the user's threads; `all`: every user's (admins). */
  list: (cursor, { all = false } = {}) =>
    json("GET", `/v1/threads?limit=50${all ? "&all=true" : ""}${cursor ? `&cursor=${enc(cursor)}` : ""}`),
  create: () => json("POST", "/v1/threads", { json: {} }),
  get: (id) => json("GET", `/v1/threads/${enc(id)}`),
  rename: (id, title) => json("PATCH", `/v1/threads/${enc(id)}`, { json: { title } }),
  remove: (id) => json("DELETE", `/v1/threads/${enc(id)}`),
  /** A new thread holding what came before message `index`: there, an edited one is sent. The
   * service names it "<title> (edited)", "(edited 2)"... to tell it from its source. */
  forkBefore: (id, index) => json("POST", `/v1/threads/${enc(id)}/fork`, { json: { before_message: index, edit: true } }),
  attachments: (id) => json("GET", `/v1/threads/${enc(id)}/attachments`),
  /** How an earlier answer was reached: its run's kept events (tokens left out). */
  trace: (id, runId) => json("GET", `/v1/threads/${enc(id)}/runs/${enc(runId)}/trace`),
  /** Stop a run under way (it ends with `run_failed`, code `run_cancelled_by_request`). */
  cancelRun: (id, runId) => json("POST", `/v1/threads/${enc(id)}/runs/${enc(runId)}/cancel`),
  upload(id, file) {
    const form = new FormData();
    form.append("file", file);
    return json("POST", `/v1/threads/${enc(id)}/attachments`, { form });
  },
};

export const approvals = {
  // A thread's own waiting approvals come with it (`waiting_approvals` of threads.get).
  list: ({ limit = 500, cursor = null } = {}) =>
    json("GET", `/v1/approvals?limit=${limit}${cursor === null ? "" : `&cursor=${enc(cursor)}`}`),
  decide: (id, decision, comment) =>
    json("POST", `/v1/approvals/${enc(id)}`, { json: { decision, comment } }),
};

export const keys = {
  list: (cursor = null) => json("GET", cursor === null ? "/v1/admin/keys" : `/v1/admin/keys?cursor=${enc(cursor)}`),
  create: (body) => json("POST", "/v1/admin/keys", { json: body }),
  revoke: (id) => json("DELETE", `/v1/admin/keys/${enc(id)}`),
};

export const workflowRuns = {
  /** A workflow run's record: `status` WAITING while its approval waits. */
  get: (id) => json("GET", `/v1/workflow-runs/${enc(id)}`),
};

export const skills = {
  list: () => json("GET", "/v1/skills"),
  get: (name) => json("GET", `/v1/skills/${enc(name)}`),
  search: (q) => json("GET", `/v1/skills/search?k=5&q=${enc(q)}`),
};

export const workflows = {
  list: () => json("GET", "/v1/workflows"),
  get: (name) => json("GET", `/v1/workflows/${enc(name)}`),
};

export const health = () => json("GET", "/healthz");

/** Who the key acts as: `{user, scopes, auth}` (`auth` is `api_keys`, or open in development). */
export const me = () => json("GET", "/v1/me");

/** A file the service serves, as an object URL (an <audio> or <img> cannot send the key). */
export async function fileUrl(url) {
  const response = await send("GET", url);
  return URL.createObjectURL(await response.blob());
}

/**
 * Run one turn and hand each typed event to `onEvent(type, data)`; `onRun(runId)` is told the
 * run's id as soon as it is known (and again when the run goes on as another).
 *
 * Events are read from the response body as they arrive (Server-Sent Events over fetch, so the
 * key travels as a header). When the stream ends before the run did, it is read again from
 * where it stopped: `GET /v1/threads/{id}/runs/{run_id}/stream` (the run's id from `X-Run-Id`)
 * with `Last-Event-ID`, a few times; then the drop is an `unreachable` error. A `reconnect` event
 * says where to read on: the same run elsewhere (its process stops), or the run that took over
 * one a stopped process cut off; following it is not a failed attempt.
 */
export async function runStream(threadId, body, onEvent, { signal, onRun } = {}) {
  const path = `/v1/threads/${enc(threadId)}/runs/stream`;
  const first = () => send("POST", path, { json: body, extraHeaders: { Accept: "text/event-stream" } });
  await follow(threadId, null, first, onEvent, { signal, onRun });
}

/**
 * Join a run under way (started elsewhere, or before a reload) from its first event, then read
 * it as `runStream` does. A run the service no longer has is a `run_not_found` error.
 */
export async function joinStream(threadId, runId, onEvent, { signal, onRun } = {}) {
  const first = () => send("GET", `/v1/threads/${enc(threadId)}/runs/${enc(runId)}/stream`);
  await follow(threadId, runId, first, onEvent, { signal, onRun });
}

async function follow(threadId, runId, first, onEvent, { signal, onRun = () => {} }) {
  const state = { lastId: null, runId, ended: false, moves: 0, onRun };
  try {
    const response = await first();
    state.runId = response.headers.get("X-Run-Id") || state.runId;
    if (state.runId) onRun(state.runId);
    await readEvents(response, state, onEvent, signal);
  } catch (error) {
    if (error instanceof ApiError && error.status !== 0) throw error;
  }
  for (let attempt = 0; !state.ended && attempt < 3; attempt++) {
    if (!state.lastId || !state.runId) break;
    const again = `/v1/threads/${enc(threadId)}/runs/${enc(state.runId)}/stream`;
    state.moved = false;
    try {
      const response = await send("GET", again, { extraHeaders: { "Last-Event-ID": state.lastId } });
      await readEvents(response, state, onEvent, signal);
      if (state.moved && state.moves++ < 5) {
        attempt--; // told where to read on: not a failed attempt (a few times at most)
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 500 * (attempt + 1)));
    }
  }
  if (!state.ended) {
    throw new ApiError(0, "unreachable", "The connection to the service dropped before the answer ended.");
  }
}

async function readEvents(response, state, onEvent, signal) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    if (signal?.aborted) return;
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      dispatch(block, state, onEvent);
    }
  }
}

function dispatch(block, state, onEvent) {
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
    else if (field === "id") state.lastId = value;
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join("\n"));
  if (type === "reconnect") {
    Object.assign(state, { runId: payload.run_id, lastId: payload.last_event_id, moved: true });
    state.onRun(payload.run_id);
    if (payload.reason === "resumed") onEvent(type, payload); // the answer starts again
    return;
  }
  if (type === "run_finished" || type === "run_failed") state.ended = true;
  onEvent(type, payload);
}
