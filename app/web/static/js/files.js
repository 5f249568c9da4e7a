// The open thread's files: uploading one, and the list of them, each with its player or
// picture and a download link.
import * as api from "./api.js";
import { el } from "./markdown.js";
import { currentThread, ensureThread } from "./openthread.js";
import { loadThreads } from "./threadlist.js";

const $ = (id) => document.getElementById(id);
let attaching = 0; // uploads under way (one may be making its new thread)
let hooks = { succeeded: () => {} };

/** Wire the upload field: `succeeded` as the chat's. */
export function initFiles(handlers) {
  hooks = handlers;
  $("upload").addEventListener("change", upload);
}

/** Whether an upload is under way. */
export const uploading = () => attaching > 0;

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
    if (currentThread() === id) showFiles(files); // not another thread's, opened meanwhile
    await loadThreads();
    $("composer-status").textContent = `${file.name} attached.`;
    hooks.succeeded();
  } catch (error) {
    $("composer-status").textContent = `Could not attach ${file.name}: ${error.message}`;
  } finally {
    attaching -= 1;
    input.value = "";
  }
}

export function showFiles(files) {
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
