// Folders (list, create, browse, upload many files and directories with progress, download,
// share) and Models (list, download): the API's storage routes, the caller's own objects and
// those shared with them, nothing else.
import { del, get, post, api, query } from "./api.js";
import { add, age, bytes, clear, errorLine, h, toast } from "./dom.js";

const PARALLEL = 4; // uploads at once: enough to keep the link busy, few enough for the server

function folderUrl(id, rest) {
  return "/folders/" + encodeURIComponent(id) + rest;
}

export function foldersPage(main, parts, me) {
  if (parts[0]) return folderPage(main, parts[0], parts.slice(1).join("/"), me);
  const list = h("tbody", { id: "folder-rows" });
  const name = h("input", { id: "new-folder", type: "text", required: true, "aria-describedby": "err-folder" });
  const problem = errorLine("err-folder");
  add(main, h("h1", null, "Folders"),
    h("form", { class: "bar", onsubmit: create },
      h("label", null, "New folder", name), h("button", { type: "submit", class: "primary" }, "Create"), problem),
    h("div", { class: "table-wrap" }, h("table", { id: "folders" },
      h("thead", null, h("tr", null, ["Name", "Owner", "Access", "Size", "Files", "Shared with", ""].map((x) => h("th", null, x)))),
      list)));

  async function create(event) {
    event.preventDefault();
    problem.textContent = "";
    try {
      await post("/folders", { name: name.value.trim() });
      name.value = "";
      await refresh();
    } catch (err) {
      problem.textContent = err.message;
    }
  }
  async function remove(folder) {
    if (!confirm("Delete folder " + folder.name + " and all its files?")) return;
    try {
      await del(folderUrl(folder.id, ""));
      await refresh();
    } catch (err) {
      toast(err.message);
    }
  }
  async function refresh() {
    const folders = await get("/folders");
    clear(list, folders.map((f) => h("tr", { dataset: { name: f.name } },
      h("td", null, h("a", { href: "#/folders/" + f.id }, f.name)), h("td", null, f.owner), h("td", null, f.access),
      h("td", null, bytes(f.size)), h("td", null, f.files === null ? "–" : f.files),
      h("td", null, (f.grants || []).map((g) => h("span", { class: "chip" }, g.username + " " + g.permission))),
      h("td", null, f.access === "owner" ? h("button", { type: "button", class: "danger", onclick: () => remove(f) }, "Delete") : null))));
  }
  refresh();
  return { stop() {} };
}

function folderPage(main, id, path, me) {
  const crumbs = h("p", { id: "crumbs" });
  const rows = h("tbody", { id: "file-rows" });
  const files = h("input", { type: "file", id: "upload-files", multiple: true });
  const dirs = h("input", { type: "file", id: "upload-dir", webkitdirectory: true, multiple: true });
  const bar = h("span");
  const progress = h("div", { class: "progress", hidden: true }, bar);
  const progressText = h("div", { class: "muted", id: "upload-progress", "aria-live": "polite" });
  const share = h("div", { class: "card", id: "share" });
  const dirName = h("input", { type: "text", id: "new-dir", "aria-label": "New directory name" });
  add(main, h("p", null, h("a", { href: "#/folders" }, "← Folders")), h("h1", { id: "folder-title" }, "Folder"), crumbs,
    h("div", { class: "card" },
      h("div", { class: "bar" },
        h("label", null, "Upload files", files), h("label", null, "Upload a directory", dirs),
        h("form", { class: "bar", onsubmit: makeDir }, h("label", null, "New directory", dirName), h("button", { type: "submit" }, "Create"))),
      progress, progressText),
    h("div", { class: "table-wrap" }, h("table", { id: "files" },
      h("thead", null, h("tr", null, ["Name", "Size", "Modified", ""].map((x) => h("th", null, x)))), rows)),
    share);
  let folder = null;
  const href = (p) => "#/folders/" + id + (p ? "/" + p.split("/").map(encodeURIComponent).join("/") : "");
  // A name a session wrote that is not UTF-8 is named by its raw form (bytes percent-encoded).
  const named = (e) => (e.raw_path ? { raw_path: e.raw_path } : { path: e.path });
  const content = (e) => "/api/v1" + folderUrl(id, "/content" + query(named(e)));

  async function refresh() {
    folder = await get(folderUrl(id, ""));
    document.getElementById("folder-title").textContent = folder.name;
    const segments = path ? path.split("/") : [];
    clear(crumbs, h("a", { href: href("") }, folder.name), segments.map((s, i) =>
      [" / ", h("a", { href: href(segments.slice(0, i + 1).join("/")) }, s)]));
    const listing = await get(folderUrl(id, "/files" + query({ path })));
    clear(rows, listing.entries.map((e) => {
      const base = e.path.split("/").pop();
      const open = e.type === "dir" && !e.raw_path ? h("a", { href: href(e.path) }, base + "/") : base + (e.type === "dir" ? "/" : "");
      const down = e.type === "dir"
        ? h("a", { href: "/api/v1" + folderUrl(id, "/archive" + query(named(e))), download: base + ".tar" }, "Download (tar)")
        : h("a", { href: content(e), download: base }, "Download");
      return h("tr", { dataset: { path: e.path } }, h("td", null, open), h("td", null, e.type === "file" ? bytes(e.size) : ""),
        h("td", null, age(e.modified_at) + " ago"), h("td", null, down));
    }), listing.truncated ? h("tr", null, h("td", { colspan: 4, class: "muted" }, "More entries than shown")) : null);
    showShare();
  }

  function showShare() {
    if (folder.access !== "owner" || folder.auto_mount) {
      clear(share, h("p", { class: "muted" }, "Access: " + folder.access));
      return;
    }
    const user = h("input", { type: "text", id: "share-user", "aria-label": "Username" });
    const perm = h("select", { id: "share-permission", "aria-label": "Permission" },
      h("option", { value: "ro" }, "read-only"), h("option", { value: "rw" }, "read-write"));
    const problem = errorLine("err-share");
    clear(share, h("h2", null, "Share"),
      h("form", { class: "bar", onsubmit: async (event) => {
        event.preventDefault();
        problem.textContent = "";
        try {
          await api("PUT", folderUrl(id, "/grants"), { user: user.value.trim(), permission: perm.value });
          await refresh();
        } catch (err) {
          problem.textContent = err.message;
        }
      } }, h("label", null, "User", user), h("label", null, "Permission", perm), h("button", { type: "submit" }, "Share"), problem),
      h("ul", null, (folder.grants || []).map((g) => h("li", null, g.username + " (" + g.permission + ") ",
        h("button", { type: "button", onclick: async () => {
          await del(folderUrl(id, "/grants/" + encodeURIComponent(g.username)));
          await refresh();
        } }, "Revoke")))));
  }

  async function makeDir(event) {
    event.preventDefault();
    try {
      await post(folderUrl(id, "/dirs" + query({ path: join(path, dirName.value.trim()) })));
      dirName.value = "";
      await refresh();
    } catch (err) {
      toast(err.message);
    }
  }

  async function upload(list) {
    const items = [...list].map((file) => ({ file, to: join(path, file.webkitRelativePath || file.name) }));
    if (!items.length) return;
    const total = items.reduce((sum, i) => sum + i.file.size, 0) || 1;
    const moved = new Map();
    let done = 0;
    const failed = [];
    progress.hidden = false;
    const show = () => {
      const sent = [...moved.values()].reduce((a, b) => a + b, 0);
      bar.style.width = Math.round((sent / total) * 100) + "%";
      progressText.textContent = "Uploaded " + done + " of " + items.length + " files (" + bytes(sent) + " of " + bytes(total) + ")" +
        (failed.length ? "; failed: " + failed.join("; ") : "");
    };
    const queue = items.slice();
    async function worker() {
      while (queue.length) {
        const item = queue.shift();
        try {
          await put(item, (n) => { moved.set(item, n); show(); });
          moved.set(item, item.file.size);
          done += 1;
        } catch (err) {
          failed.push(item.to + ": " + err.message);
        }
        show();
      }
    }
    await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
    show();
    files.value = "";
    dirs.value = "";
    await refresh();
  }

  function put(item, onProgress) {
    // XMLHttpRequest, not fetch: only it reports an upload's progress.
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", "/api/v1" + folderUrl(id, "/content" + query({ path: item.to, size: item.file.size })));
      xhr.upload.onprogress = (event) => onProgress(event.loaded);
      xhr.onload = () => {
        if (xhr.status === 201) return resolve();
        let message = "the manager answered " + xhr.status;
        try { message = JSON.parse(xhr.responseText).message; } catch (err) { /* not JSON */ }
        reject(new Error(message));
      };
      xhr.onerror = () => reject(new Error("the connection failed"));
      xhr.send(item.file);
    });
  }

  files.addEventListener("change", () => upload(files.files));
  dirs.addEventListener("change", () => upload(dirs.files));
  refresh().catch((err) => clear(main, h("p", { class: "error" }, err.message)));
  return { stop() {} };
}

function join(dir, name) {
  return dir ? dir + "/" + name : name;
}

export function modelsPage(main) {
  const rows = h("tbody", { id: "model-rows" });
  add(main, h("h1", null, "Models"), h("div", { class: "table-wrap" }, h("table", { id: "models" },
    h("thead", null, h("tr", null, ["Name", "Version", "Size", "Files", "Saved", "From session", ""].map((x) => h("th", null, x)))), rows)));
  async function refresh() {
    const models = await get("/models");
    if (!models.length) {
      clear(rows, h("tr", null, h("td", { colspan: 7, class: "muted" }, "No models yet: ", h("code", null, "gpuslice run train.py"), " or ", h("code", null, "gpuslice-save"), " in a session saves one.")));
      return;
    }
    clear(rows, models.map((m) => {
      const files = h("td");
      // every version is a row of its own; the bare name would mean only the latest
      return h("tr", { dataset: { name: m.name, ref: m.ref } }, h("td", null, m.name),
        h("td", null, m.version + (m.latest ? " (latest)" : "")), h("td", null, bytes(m.size)), h("td", null, m.files),
        h("td", null, age(m.saved_at) + " ago"), h("td", null, m.session_name || "–"),
        h("td", null, h("button", { type: "button", onclick: () => showFiles(m, files) }, "Files"), files));
    }));
  }
  async function showFiles(model, cell) {
    const detail = await get("/models/" + encodeURIComponent(model.ref));
    clear(cell, h("ul", null, detail.file_list.map((f) => h("li", null,
      h("a", { href: "/api/v1/models/" + encodeURIComponent(model.ref) + "/files" + query({ path: f.path }), download: f.path.split("/").pop() }, f.path),
      " (" + bytes(f.size) + ")"))));
  }
  refresh();
  return { stop() {} };
}
