// Admins: projects (members, what each uses against its quotas, the resource groups it may
// use), making one, adding and removing members; and the resource groups with their nodes' free
// capacity. The API refuses all of this to other users; the console only hides the link.
import { del, get, post } from "./api.js";
import { bytes, clear, errorLine, fgpu, h, num } from "./dom.js";

const of = (used, limit, f) => (limit === null || limit === undefined ? f(used) : f(used) + " of " + f(limit));

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
    h("div", { class: "table-wrap" }, h("table", { id: "projects" },
      h("thead", null, h("tr", null, ["Project", "Members", "Sessions", "fGPU", "CPU", "Memory", "Resource groups"].map((x) => h("th", null, x)))),
      h("tbody", null, projects.map((p) => h("tr", { dataset: { name: p.name } }, h("td", null, p.name),
        h("td", null, p.personal ? "personal" : p.members.length ? p.members.map((m) => h("span", { class: "member" }, m + " ",
          h("button", { type: "button", class: "link", "aria-label": "Remove " + m + " from " + p.name,
            onclick: () => act(memberProblem, () => del("/projects/" + encodeURIComponent(p.name) + "/members/" + encodeURIComponent(m))) }, "×"),
          " ")) : "–"),
        h("td", null, of(p.usage.sessions, p.max_sessions, String)), h("td", null, of(p.usage.gpu, p.max_gpu, fgpu)),
        h("td", null, of(p.usage.cpu, p.max_cpu, num)), h("td", null, of(p.usage.mem, p.max_mem, bytes)),
        h("td", null, p.groups === null ? "any" : p.groups.join(", "))))))),
    h("h2", null, "Resource groups"),
    h("div", { class: "table-wrap" }, h("table", { id: "groups" },
      h("thead", null, h("tr", null, ["Group", "Nodes", "GPUs", "Models", "fGPU free", "Largest slice", "CPU free", "Memory free"].map((x) => h("th", null, x)))),
      h("tbody", null, groups.map((g) => h("tr", { dataset: { name: g.name } }, h("td", null, g.name), h("td", null, String(g.nodes)),
        h("td", null, String(g.gpus)), h("td", null, g.gpu_models.join(", ") || "–"),
        h("td", null, fgpu(g.gpu_free) + " of " + num(g.gpu_total)), h("td", null, fgpu(g.largest_slice)),
        h("td", null, num(g.cpu_free)), h("td", null, bytes(g.mem_free))))))),
    h("p", { class: "muted" }, "Quotas per GPU model, memory and storage: ", h("code", null, "gpuslice admin project set"),
      "; a node's group: ", h("code", null, "gpuslice node set-group"), "."));
}
