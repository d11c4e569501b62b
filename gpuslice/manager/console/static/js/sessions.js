// The Sessions page: every session the API shows the caller (an admin: everyone's), live,
// with filters, destroy (one or many) and the launch dialog.
import { get, pages, post, query } from "./api.js";
import { add, age, badge, bytes, clear, fgpu, h, num, toast } from "./dom.js";
import { openLaunch } from "./launch.js";
import { watch } from "./live.js";

const ACTIVE = ["PENDING", "SCHEDULED", "PREPARING", "RUNNING", "TERMINATING"];
const MOVING = new Set(["PENDING", "SCHEDULED", "PREPARING", "TERMINATING"]);
const STATUS_FILTERS = {
  active: ACTIVE,
  all: [],
  PENDING: ["PENDING"],
  RUNNING: ["RUNNING"],
  ended: ["TERMINATED", "ERROR", "CANCELLED"],
};

export function configuration(s) {
  const r = s.resources;
  const gpu = r.gpu_mem && !s.placement ? bytes(r.gpu_mem) + " GPU memory" : fgpu(r.gpu);
  return [gpu, num(r.cpu) + " CPU", bytes(r.mem), imageName(s.image)].join(" · ");
}

export function imageName(ref) {
  return ref.replace(/^.*\//, "").replace(":", " ");
}

// "1h20m left" (RUNNING with a time limit), "starts 22:00" (PENDING, asked to start later)
export function timeText(s) {
  if (s.ends_at) {
    const left = Math.round((new Date(s.ends_at) - Date.now()) / 1000);
    return left > 0 ? span(left) + " left" : "ending";
  }
  if (s.begin_at && s.status === "PENDING" && new Date(s.begin_at) > Date.now()) {
    const at = new Date(s.begin_at);
    const today = at.toDateString() === new Date().toDateString();
    const clock = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return "starts " + (today ? clock : at.toLocaleDateString() + " " + clock);
  }
  return "";
}

export function span(seconds) {
  const d = Math.floor(seconds / 86400), hr = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), sec = seconds % 60;
  const parts = [[d, "d"], [hr, "h"], [m, "m"], [sec, "s"]].filter(([n]) => n).map(([n, u]) => n + u);
  return parts.slice(0, 2).join("") || "0s";
}

export function waitText(s) {
  if (s.status !== "PENDING") return s.status === "RUNNING" ? "" : s.status_reason;
  const position = s.queue_position ? "#" + s.queue_position + " in queue · " : "";
  return position + s.status_reason;
}

export function sessionsPage(main, _parts, me) {
  const admin = me.role === "admin";
  const rows = new Map(); // id -> { tr, key }
  const selected = new Set();
  let painted = false;
  const status = h("select", { id: "filter-status", onchange: () => live.now() },
    h("option", { value: "active" }, "Active"), h("option", { value: "all" }, "All"),
    h("option", { value: "PENDING" }, "Pending"), h("option", { value: "RUNNING" }, "Running"),
    h("option", { value: "ended" }, "Ended"));
  const type = h("select", { id: "filter-type", onchange: () => live.now() },
    h("option", { value: "" }, "Any"), h("option", { value: "interactive" }, "Interactive"),
    h("option", { value: "batch" }, "Batch"));
  const search = h("input", { id: "filter-name", type: "search", placeholder: "name contains",
    oninput: () => applySearch() });
  const destroyMany = h("button", { type: "button", class: "danger", disabled: true,
    onclick: () => destroy([...selected]) }, "Destroy selected");
  const count = h("span", { class: "muted", id: "session-count" });
  const all = h("input", { type: "checkbox", "aria-label": "Select all shown",
    onchange: () => selectAll(all.checked) });
  const body = h("tbody", { id: "session-rows" });
  const heads = ["Name", "Status", "Configuration", "Type", "Node", admin ? "Owner" : null, "Age", ""];
  add(main,
    h("div", { class: "bar" },
      h("h1", null, "Sessions"), h("span", { class: "spacer" }),
      h("button", { type: "button", class: "primary", id: "launch", onclick: () => openLaunch(me) }, "Launch")),
    h("div", { class: "bar", role: "search" },
      h("label", null, "Status", status), h("label", null, "Type", type),
      h("label", null, "Name", search), destroyMany, h("span", { class: "spacer" }), count),
    h("div", { class: "table-wrap" },
      h("table", { id: "sessions" },
        h("thead", null, h("tr", null, h("th", null, all),
          heads.filter((x) => x !== null).map((x) => h("th", { scope: "col" }, x)))),
        body)));

  function row(s) {
    const box = h("input", { type: "checkbox", "aria-label": "Select " + s.name,
      checked: selected.has(s.id), onchange: () => select(s.id, box.checked) });
    const ended = !ACTIVE.includes(s.status);
    return h("tr", { dataset: { id: s.id, name: s.name, status: s.status } },
      h("td", null, box),
      h("td", null, h("a", { href: "#/sessions/" + s.id }, s.name)),
      h("td", { class: "status-cell" }, badge(s.status), h("span", { class: "reason" }, waitText(s)),
        timeText(s) ? h("span", { class: "time-left" }, timeText(s)) : null),
      h("td", { class: "config" }, configuration(s)),
      h("td", null, s.type),
      h("td", null, s.placement ? s.placement.node_name : "–"),
      admin ? h("td", null, s.owner) : null,
      h("td", { class: "age", title: s.created_at, dataset: { since: s.created_at } }, age(s.created_at)),
      h("td", null, ended ? null : h("button", { type: "button", class: "danger",
        "aria-label": "Destroy " + s.name, onclick: () => destroy([s.id]) }, "Destroy")));
  }

  function render(items, total, done) {
    const seen = new Set();
    let cursor = body.firstChild;
    for (const s of items) {
      seen.add(s.id);
      const key = s.status + s.updated_at + s.queue_position + s.status_reason + (s.placement ? 1 : 0) +
        timeText(s);
      let entry = rows.get(s.id);
      if (!entry || entry.key !== key) {
        const tr = row(s);
        if (entry) {
          if (cursor === entry.tr) cursor = tr;
          entry.tr.replaceWith(tr);
        }
        entry = { tr, key, name: s.name };
        rows.set(s.id, entry);
      }
      if (entry.tr === cursor) cursor = cursor.nextSibling;
      else body.insertBefore(entry.tr, cursor);
    }
    for (const [id, entry] of rows) {
      if (done && !seen.has(id)) {
        entry.tr.remove();
        rows.delete(id);
        selected.delete(id);
      }
    }
    count.textContent = total + (total === 1 ? " session" : " sessions");
    applySearch();
    syncSelection();
    if (!painted && items.length) {
      painted = true;
      requestAnimationFrame(() => {
        // read by the browser tests and bench/console.py: ms from navigation to the list shown
        document.body.dataset.listPaintMs = String(Math.round(performance.now()));
      });
    }
  }

  function applySearch() {
    const text = search.value.trim().toLowerCase();
    for (const entry of rows.values()) entry.tr.hidden = text !== "" && !entry.name.includes(text);
  }
  function select(id, on) {
    if (on) selected.add(id);
    else selected.delete(id);
    syncSelection();
  }
  function selectAll(on) {
    for (const [id, entry] of rows) {
      if (entry.tr.hidden) continue;
      select(id, on);
      entry.tr.querySelector("input[type=checkbox]").checked = on;
    }
  }
  function syncSelection() {
    destroyMany.disabled = selected.size === 0;
    destroyMany.textContent = selected.size ? "Destroy selected (" + selected.size + ")" : "Destroy selected";
  }

  async function destroy(ids) {
    const names = ids.map((id) => (rows.get(id) || { name: id }).name);
    if (!confirm("Destroy " + names.join(", ") + "?")) return;
    try {
      await post("/sessions/destroy", { ids });
      ids.forEach((id) => selected.delete(id));
      toast("Destroying " + names.join(", "));
      live.now();
    } catch (err) {
      toast("Could not destroy: " + err.message);
    }
  }

  async function refresh() {
    const params = { status: STATUS_FILTERS[status.value], type: type.value || undefined };
    await pages("/sessions", params, render);
  }

  const live = watch(refresh, {
    poll: () => [...rows.values()].some((e) => MOVING.has(e.tr.dataset.status)),
  });
  live.now();
  const ticker = tickAges(body);
  return { now: live.now, stop() { live.stop(); clearInterval(ticker); } };
}

// Ages keep counting between refreshes: a row is redrawn only when its session changes, so
// without this a list left open showed the age it had when last redrawn.
function tickAges(body) {
  return setInterval(() => {
    const now = Date.now();
    for (const cell of body.querySelectorAll("td.age")) {
      const text = age(cell.dataset.since, now);
      if (cell.textContent !== text) cell.textContent = text;
    }
  }, 1000);
}

