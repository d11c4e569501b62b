// Admins: projects (members, what each uses against its quotas, the resource groups it may
// use, its sessions' time limits), making, renaming and deleting one, adding and removing
// members, setting its time limits; and the resource groups with their nodes' free capacity.
// The API refuses all of this to other users; the console only hides the link.
import { api, del, get, post } from "./api.js";
import { bytes, clear, errorLine, fgpu, h, num } from "./dom.js";

const of = (used, limit, f) => (limit === null || limit === undefined ? f(used) : f(used) + " of " + f(limit));
const QUOTAS = ["max_sessions", "max_gpu", "max_cpu", "max_mem", "max_storage", "max_gpu_models", "groups"];

// Seconds as the CLI shows them: 2h, 1h30m, 1d (format_limit).
export function limitText(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const parts = [[86400, "d"], [3600, "h"], [60, "m"], [1, "s"]];
  let rest = seconds;
  const out = parts.map(([size, unit]) => {
    const n = Math.floor(rest / size);
    rest -= n * size;
    return n ? n + unit : "";
  }).join("");
  return out || "0s";
}

// Seconds as `--time` takes them back (one unit: 90m, not 1h30m), for the form's inputs.
export function limitInput(seconds) {
  const unit = [[86400, "d"], [3600, "h"], [60, "m"]].find(([size]) => seconds % size === 0);
  return unit ? seconds / unit[0] + unit[1] : seconds + "s";
}

// PUT replaces every quota: send the project's own with the new time limits (empty: none).
function withLimits(p, dflt, max) {
  const body = Object.fromEntries(QUOTAS.map((k) => [k, p[k]]));
  body.default_time_limit = dflt.trim() || null;
  body.max_time_limit = max.trim() || null;
  return body;
}

function limitsForm(projects, act) {
  const own = projects.filter((p) => !p.personal);
  const target = h("select", { id: "limits-project", "aria-label": "Project" }, own.map((p) => h("option", { value: p.name }, p.name)));
  const dflt = h("input", { type: "text", id: "limits-default", size: 8, "aria-label": "Default time limit", placeholder: "settings'" });
  const max = h("input", { type: "text", id: "limits-max", size: 8, "aria-label": "Maximum time limit", placeholder: "settings'" });
  const problem = errorLine("err-limits");
  const fill = () => {
    const p = own.find((x) => x.name === target.value);
    dflt.value = p && p.default_time_limit !== null ? limitInput(p.default_time_limit) : "";
    max.value = p && p.max_time_limit !== null ? limitInput(p.max_time_limit) : "";
  };
  target.addEventListener("change", fill);
  fill();
  return h("form", { class: "bar", onsubmit: (event) => {
    event.preventDefault();
    const p = own.find((x) => x.name === target.value);
    if (p) act(problem, () => api("PUT", "/projects/" + encodeURIComponent(p.name), withLimits(p, dflt.value, max.value)));
  } }, h("label", null, "Time limits of", target), h("label", null, "default", dflt), h("label", null, "maximum", max),
  h("button", { type: "submit" }, "Set time limits"), problem);
}

function renameForm(projects, act) {
  const target = h("select", { id: "rename-project", "aria-label": "Project to rename" },
    projects.filter((p) => !p.personal).map((p) => h("option", { value: p.name }, p.name)));
  const to = h("input", { type: "text", id: "rename-to", "aria-label": "New name" });
  const problem = errorLine("err-rename");
  return h("form", { class: "bar", onsubmit: (event) => {
    event.preventDefault();
    act(problem, () => post("/projects/" + encodeURIComponent(target.value) + "/rename", { name: to.value.trim() }));
  } }, h("label", null, "Rename", target), h("label", null, "to", to), h("button", { type: "submit" }, "Rename project"), problem);
}

export async function projectsTab(body) {
  const [projects, groups] = await Promise.all([get("/projects"), get("/groups")]);
  const name = h("input", { type: "text", id: "new-project", "aria-label": "Project name", placeholder: "vision" });
  const gpu = h("input", { type: "text", id: "new-project-gpu", size: 6, "aria-label": "fGPU quota", placeholder: "no limit" });
  const sessions = h("input", { type: "number", id: "new-project-sessions", min: 0, "aria-label": "Sessions quota", placeholder: "no limit" });
  const allowed = h("input", { type: "text", id: "new-project-groups", "aria-label": "Resource groups", placeholder: "any (e.g. a100, t4)" });
  const problem = errorLine("err-project");
  const member = h("input", { type: "text", id: "new-member", "aria-label": "Username" });
  const target = h("select", { id: "member-project", "aria-label": "Project" },
    projects.filter((p) => !p.personal).map((p) => h("option", { value: p.name }, p.name)));
  const memberProblem = errorLine("err-member");
  const deleteProblem = errorLine("err-delete");
  const act = async (line, call) => {
    line.textContent = "";
    try {
      await call();
      await projectsTab(body);
    } catch (err) {
      line.textContent = err.message;
    }
  };
  const quota = () => {
    const out = { name: name.value.trim() };
    if (gpu.value.trim()) out.max_gpu = gpu.value.trim();
    if (sessions.value !== "") out.max_sessions = Number(sessions.value);
    const listed = allowed.value.split(",").map((g) => g.trim()).filter(Boolean);
    if (listed.length) out.groups = listed;
    return out;
  };
  clear(body,
    h("h2", null, "Projects"),
    h("form", { class: "bar", onsubmit: (event) => { event.preventDefault(); act(problem, () => post("/projects", quota())); } },
      h("label", null, "Name", name), h("label", null, "fGPU", gpu), h("label", null, "Sessions", sessions),
      h("label", null, "Resource groups", allowed), h("button", { type: "submit" }, "Create project"), problem),
    h("form", { class: "bar", onsubmit: (event) => {
      event.preventDefault();
      act(memberProblem, () => post("/projects/" + encodeURIComponent(target.value) + "/members", { username: member.value.trim() }));
    } }, h("label", null, "Add", member), h("label", null, "to", target), h("button", { type: "submit" }, "Add member"), memberProblem),
    limitsForm(projects, act), renameForm(projects, act), deleteProblem,
    h("div", { class: "table-wrap" }, h("table", { id: "projects" },
      h("thead", null, h("tr", null, ["Project", "Members", "Sessions", "fGPU", "CPU", "Memory", "Resource groups", "Default time", "Max time", ""].map((x) => h("th", null, x)))),
      h("tbody", null, projects.map((p) => h("tr", { dataset: { name: p.name } }, h("td", null, p.name),
        h("td", null, p.personal ? "personal" : p.members.length ? p.members.map((m) => h("span", { class: "member" }, m + " ",
          h("button", { type: "button", class: "link", "aria-label": "Remove " + m + " from " + p.name,
            onclick: () => act(memberProblem, () => del("/projects/" + encodeURIComponent(p.name) + "/members/" + encodeURIComponent(m))) }, "×"),
          " ")) : "–"),
        h("td", null, of(p.usage.sessions, p.max_sessions, String)), h("td", null, of(p.usage.gpu, p.max_gpu, fgpu)),
        h("td", null, of(p.usage.cpu, p.max_cpu, num)), h("td", null, of(p.usage.mem, p.max_mem, bytes)),
        h("td", null, p.groups === null ? "any" : p.groups.join(", ")),
        h("td", { class: "default-time" }, limitText(p.default_time_limit)), h("td", { class: "max-time" }, limitText(p.max_time_limit)),
        h("td", null, p.personal ? "" : h("button", { type: "button", class: "link", "aria-label": "Delete " + p.name,
          onclick: () => confirm("Delete project " + p.name + "?") && act(deleteProblem, () => del("/projects/" + encodeURIComponent(p.name))) }, "Delete"))))))),
    h("h2", null, "Resource groups"),
    h("div", { class: "table-wrap" }, h("table", { id: "groups" },
      h("thead", null, h("tr", null, ["Group", "Nodes", "GPUs", "Models", "fGPU free", "Largest slice", "CPU free", "Memory free"].map((x) => h("th", null, x)))),
      h("tbody", null, groups.map((g) => h("tr", { dataset: { name: g.name } }, h("td", null, g.name), h("td", null, String(g.nodes)),
        h("td", null, String(g.gpus)), h("td", null, g.gpu_models.join(", ") || "–"),
        h("td", null, fgpu(g.gpu_free) + " of " + num(g.gpu_total)), h("td", null, fgpu(g.largest_slice)),
        h("td", null, num(g.cpu_free)), h("td", null, bytes(g.mem_free))))))),
    h("p", { class: "muted" }, "Quotas per GPU model, memory and storage: ", h("code", null, "gpuslice admin project set"),
      "; time limits as ", h("code", null, "--time"), " takes them (2h, 1d, 1:30:00), empty: the settings'",
      "; a node's group: ", h("code", null, "gpuslice node set-group"), "."));
}
