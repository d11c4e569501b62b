// Admins: nodes with their GPUs and each slice (who holds it, fGPU, memory, live usage), users
// and policies, projects and resource groups (admin_projects.js), the image catalog, join
// tokens, usage charts (by user or by project) and the audit log (admin_audit.js). The API
// refuses all of this to other users; the console only hides the link.
import { api, del, get, post } from "./api.js";
import { add, age, badge, bytes, clear, errorLine, fgpu, h, num, toast, when } from "./dom.js";
import { bars, precise } from "./charts.js";
import { projectsTab } from "./admin_projects.js";
import { auditTab } from "./admin_audit.js";

const TABS = { nodes: "Nodes and GPUs", users: "Users and policies", projects: "Projects and groups", images: "Images",
  tokens: "Join tokens", usage: "Usage", audit: "Audit" };

export function adminPage(main, parts, me) {
  if (me.role !== "admin") {
    add(main, h("p", { class: "error" }, "Only admins see this page."));
    return { stop() {} };
  }
  const tab = TABS[parts[0]] ? parts[0] : "nodes";
  const body = h("div", { id: "admin-body" });
  add(main, h("h1", null, "Admin"), h("div", { class: "tabs", role: "tablist" },
    Object.entries(TABS).map(([key, label]) => h("button", { type: "button", role: "tab", "aria-selected": String(key === tab),
      onclick: () => { location.hash = "#/admin/" + key; } }, label))), body);
  let timer = null;
  const show = { nodes, users, projects: projectsTab, images, tokens, usage, audit: auditTab }[tab];
  async function loop() {
    try {
      await show(body);
    } catch (err) {
      clear(body, h("p", { class: "error" }, err.message));
    }
    if (tab === "nodes") timer = setTimeout(loop, 3000);
  }
  loop();
  return { stop() { clearTimeout(timer); } };
}

async function nodes(body) {
  const [top, list] = await Promise.all([get("/top"), get("/nodes")]);
  const byId = new Map(list.map((n) => [n.id, n]));
  clear(body, top.nodes.length === 0 ? h("p", { class: "muted" }, "No node has joined yet (Join tokens).") : null,
    top.nodes.map((n) => {
      const node = byId.get(n.id) || {};
      return h("div", { class: "card node", dataset: { name: n.name } },
        h("h2", null, n.name + " ", badge(n.status)),
        h("p", { class: "muted" }, "CPU " + num(n.cpu_used) + " of " + num(n.cpu) + " cores allocated · memory " +
          bytes(n.mem_used) + " of " + bytes(n.mem) + " · 1 GPU = " + num(node.fgpu_per_gpu) + " fGPU · heartbeat " +
          (n.last_heartbeat_at ? age(n.last_heartbeat_at) + " ago" : "never")),
        node.engine_error ? h("p", { class: "error" }, node.engine_error) : null,
        n.devices.map((d) => device(d)),
        n.cpu_only.length ? [h("h3", null, "CPU-only sessions"), sliceTable(n.cpu_only, null)] : null);
    }));
}

function device(d) {
  const capacity = Number(d.capacity);
  return h("div", { class: "gpu", dataset: { uuid: d.uuid } },
    h("strong", null, "GPU " + d.index + ": " + d.model), " ",
    h("span", { class: "muted" }, bytes(d.mem) + " · " + fgpu(d.used) + " of " + fgpu(d.capacity) + " allocated · in use " +
      (d.mem_used === null ? "–" : bytes(d.mem_used)) + " · busy " + (d.utilization === null ? "–" : d.utilization + "%")),
    h("div", { class: "slices", "aria-hidden": "true" }, d.slices.map((s) => {
      const part = h("span", { title: s.name + " (" + s.user + ")" }, s.name);
      part.style.width = (Number(s.fgpu) / capacity) * 100 + "%";
      return part;
    })),
    d.slices.length ? sliceTable(d.slices, d) : h("p", { class: "muted" }, "No slices held."));
}

function sliceTable(slices, d) {
  return h("div", { class: "table-wrap" }, h("table", { class: "slice-table" },
    h("thead", null, h("tr", null, ["Session", "User", "Status", "fGPU", "Slice memory", "GPU memory used", "GPU busy", "CPU busy", "Memory"].map((x) => h("th", null, x)))),
    h("tbody", null, slices.map((s) => h("tr", null,
      h("td", null, h("a", { href: "#/sessions/" + s.session_id }, s.name)), h("td", null, s.user), h("td", null, badge(s.status)),
      h("td", null, fgpu(s.fgpu)), h("td", null, d ? bytes(Math.floor((Number(s.fgpu) / Number(d.capacity)) * d.mem)) : "–"),
      h("td", null, s.gpu_mem === null ? "–" : bytes(s.gpu_mem)), h("td", null, s.gpu_util === null ? "–" : s.gpu_util + "%"),
      h("td", null, s.cpu === null ? "–" : num(s.cpu) + " / " + num(s.cpu_alloc)),
      h("td", null, (s.mem === null ? "–" : bytes(s.mem)) + " / " + bytes(s.mem_alloc)))))));
}

// Where a user signs in (UserPublic.source), in words.
const SOURCES = { local: "a password", oidc: "single sign-on", ldap: "the directory" };

async function users(body) {
  const [people, policies] = await Promise.all([get("/users"), get("/policies")]);
  const names = new Map(policies.map((p) => [p.id, p.name]));
  const username = h("input", { type: "text", id: "new-user", "aria-label": "Username" });
  const password = h("input", { type: "password", id: "new-password", "aria-label": "Password", autocomplete: "new-password" });
  const role = h("select", { id: "new-role", "aria-label": "Role" }, h("option", { value: "user" }, "user"), h("option", { value: "admin" }, "admin"));
  const problem = errorLine("err-user");
  const limit = (v, f) => (v === null || v === undefined ? "no limit" : f(v));
  clear(body,
    h("h2", null, "Users"),
    h("form", { class: "bar", onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = "";
      try {
        await post("/users", { username: username.value.trim(), password: password.value, role: role.value });
        await users(body);
      } catch (err) {
        problem.textContent = err.message;
      }
    } }, h("label", null, "Username", username), h("label", null, "Password", password), h("label", null, "Role", role),
      h("button", { type: "submit" }, "Create user"), problem),
    h("div", { class: "table-wrap" }, h("table", { id: "users" },
      h("thead", null, h("tr", null, ["User", "Role", "Signs in with", "Active", "Policy", "Created"].map((x) => h("th", null, x)))),
      h("tbody", null, people.map((u) => h("tr", null, h("td", null, u.username), h("td", null, u.role),
        h("td", { class: "source" }, SOURCES[u.source] || u.source),
        h("td", { class: "active" }, u.is_active ? "yes" : "no" + (u.disabled_reason ? " (" + u.disabled_reason + ")" : "")),
        h("td", null, names.get(u.policy_id) || "–"), h("td", null, when(u.created_at))))))),
    h("h2", null, "Policies"),
    h("div", { class: "table-wrap" }, h("table", { id: "policies" },
      h("thead", null, h("tr", null, ["Policy", "Sessions", "fGPU", "CPU", "Memory", "Storage", "Pending", "Idle rule", "Lifetime"].map((x) => h("th", null, x)))),
      h("tbody", null, policies.map((p) => h("tr", null, h("td", null, p.name), h("td", null, limit(p.max_sessions, String)),
        h("td", null, limit(p.max_gpu, fgpu)), h("td", null, limit(p.max_cpu, num)), h("td", null, limit(p.max_mem, bytes)),
        h("td", null, limit(p.max_storage, bytes)), h("td", null, limit(p.max_pending, String)),
        h("td", null, p.idle ? "idle " + p.idle.window + " s" + (p.idle.gpu_util !== null ? ", GPU < " + p.idle.gpu_util + "%" : "") +
          (p.idle.cpu_util !== null ? ", CPU < " + p.idle.cpu_util + "%" : "") : "never"),
        h("td", null, limit(p.max_lifetime, (s) => s + " s"))))))),
    h("p", { class: "muted" }, "Quotas are set with ", h("code", null, "gpuslice admin policy"), " on the command line."));
}

async function images(body) {
  const [list, aliases] = await Promise.all([get("/images"), get("/images/aliases")]);
  const add1 = h("input", { type: "text", id: "allow-image", "aria-label": "Image reference" });
  const problem = errorLine("err-image-admin");
  const act = async (call) => {
    try {
      await call();
      await images(body);
    } catch (err) {
      toast(err.message);
    }
  };
  clear(body,
    h("form", { class: "bar", onsubmit: (event) => { event.preventDefault(); problem.textContent = "";
      post("/images", { name: add1.value.trim() }).then(() => images(body), (err) => { problem.textContent = err.message; }); } },
      h("label", null, "Allow an image", add1), h("button", { type: "submit" }, "Allow"),
      h("button", { type: "button", onclick: () => act(() => post("/images/rescan")) }, "Rescan nodes"), problem),
    h("div", { class: "table-wrap" }, h("table", { id: "images" },
      h("thead", null, h("tr", null, ["Image", "Title", "Frameworks", "Minimums", "Apps", "Size", "Visibility", "Nodes", ""].map((x) => h("th", null, x)))),
      h("tbody", null, list.map((i) => h("tr", null, h("td", null, i.name, i.aliases.map((a) => h("span", { class: "chip" }, a))),
        h("td", null, i.title), h("td", null, Object.entries(i.frameworks).map(([k, v]) => h("span", { class: "chip" }, k + " " + v))),
        h("td", null, [Number(i.min_gpu) ? fgpu(i.min_gpu) : null, Number(i.min_cpu) ? num(i.min_cpu) + " CPU" : null,
          i.min_mem ? bytes(i.min_mem) : null].filter(Boolean).join(", ") || "–"),
        h("td", null, i.apps.map((a) => a.name).join(", ")), h("td", null, bytes(i.size)),
        h("td", null, i.public ? "public" : "private (" + (i.owner || "?") + ")"), h("td", null, i.nodes.join(", ")),
        h("td", null,
          h("button", { type: "button", onclick: () => act(() => api("PATCH", "/images/" + i.name, { public: !i.public })) }, i.public ? "Make private" : "Publish"),
          h("button", { type: "button", class: "danger", onclick: () => confirm("Remove " + i.name + " from the catalog?") &&
            act(() => del("/images/" + i.name)) }, "Remove"))))))),
    h("h2", null, "Aliases"),
    h("ul", null, aliases.map((a) => h("li", null, a.name + " → " + a.reference + " ",
      h("button", { type: "button", onclick: () => act(() => del("/images/aliases/" + encodeURIComponent(a.name))) }, "Delete")))),
    h("p", { class: "muted" }, "Builds: ", h("code", null, "gpuslice image build <recipe>"), " on a node (", h("code", null, "scripts/build-images.sh"), " builds the standard ones)."));
}

async function tokens(body) {
  const list = await get("/join-tokens");
  const name = h("input", { type: "text", id: "token-name", "aria-label": "What the token is for" });
  const node = h("input", { type: "text", id: "token-node", "aria-label": "Only for the node named (optional)" });
  const secret = h("div", { id: "token-secret" });
  const problem = errorLine("err-token");
  clear(body,
    h("form", { class: "bar", onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = "";
      try {
        const made = await post("/join-tokens", { name: name.value.trim(), node: node.value.trim() || null });
        await tokens(body);
        clear(document.getElementById("token-secret"), h("p", null, "The token (shown once): "), h("pre", { class: "logs" },
          "GPUSLICE_AGENT_MANAGER_URL=" + location.origin + (made.node ? " GPUSLICE_AGENT_NODE_NAME=" + made.node : "") +
          " GPUSLICE_AGENT_JOIN_TOKEN=" + made.token + " gpuslice agent serve"));
      } catch (err) {
        problem.textContent = err.message;
      }
    } }, h("label", null, "Token for", name), h("label", null, "Node (optional)", node), h("button", { type: "submit" }, "Create join token"), problem),
    secret,
    h("div", { class: "table-wrap" }, h("table", { id: "tokens" },
      h("thead", null, h("tr", null, ["Name", "Node", "Status", "Created", "Expires", ""].map((x) => h("th", null, x)))),
      h("tbody", null, list.map((t) => h("tr", null, h("td", null, t.name), h("td", null, t.node || "any"), h("td", null, t.status),
        h("td", null, when(t.created_at)), h("td", null, when(t.expires_at)),
        // Only an active token can still admit a node: a used or expired one has nothing to revoke.
        h("td", null, t.status === "active" ? h("button", { type: "button", class: "danger", "aria-label": "Revoke " + t.name,
          onclick: async () => { await del("/join-tokens/" + t.id); await tokens(body); } }, "Revoke") : null)))))));
}

async function usage(body, by = "user") {
  const report = await get("/usage?since=14d&by=" + by);
  const key = (r) => (by === "project" ? r.project : r.user);
  const who = by === "project" ? "project" : "user";
  const days = [];
  for (let d = new Date(report.since + "T00:00:00Z"); d <= new Date(report.until + "T00:00:00Z"); d.setUTCDate(d.getUTCDate() + 1)) {
    days.push(d.toISOString().slice(0, 10));
  }
  const people = [...new Set(report.rows.map(key))].sort();
  const series = (figure) => people.map((user) => ({ name: user, values: days.map((day) => {
    const row = report.rows.find((r) => key(r) === user && r.day === day);
    return row ? Number(row.totals[figure]) : 0;
  }) }));
  const toggle = h("select", { id: "usage-by", "aria-label": "Usage by", onchange: () => usage(body, toggle.value) },
    h("option", { value: "user" }, "by user"), h("option", { value: "project" }, "by project"));
  toggle.value = by;
  clear(body, h("div", { class: "bar" }, h("label", null, "Usage ", toggle)),
    h("h2", null, "fGPU-hours per day"), usageBars(days, series("fgpu_hours"), "fGPU-hours per day and " + who, "usage-fgpu"),
    h("h2", null, "CPU core-hours per day"), usageBars(days, series("cpu_hours"), "CPU core-hours per day and " + who, "usage-cpu"),
    h("div", { class: "table-wrap" }, h("table", { id: "usage" },
      h("thead", null, h("tr", null, ["Day", by === "project" ? "Project" : "User", "Sessions", "fGPU-h", "CPU-h", "Memory GiB-h", "GPU memory GiB-h"].map((x) => h("th", null, x)))),
      h("tbody", null, report.rows.map((r) => h("tr", null, h("td", null, r.day), h("td", null, key(r)), h("td", null, r.sessions),
        h("td", null, precise(r.totals.fgpu_hours)), h("td", null, precise(r.totals.cpu_hours)), h("td", null, precise(r.totals.mem_gib_hours)),
        h("td", null, precise(r.totals.gpu_mem_gib_hours))))))));
}

// A usage chart, or a line saying there is nothing to draw (empty axes read as a fault).
function usageBars(days, series, label, id) {
  const any = series.some((s) => s.values.some((v) => v > 0));
  if (!any) return h("p", { class: "muted", id }, "Nothing used in these days.");
  const chart = bars(days, series, label);
  chart.id = id;
  return chart;
}
