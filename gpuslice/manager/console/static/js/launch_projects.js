// The launch dialog's project and resource group: the projects the user may launch in (their
// personal one first and preselected) and the groups the chosen project may use, each with its
// free capacity now (GET /groups: hardware only, never who uses it).
import { get } from "./api.js";
import { clear, fgpu, h } from "./dom.js";

function groupLabel(g) {
  if (!g) return "any group it may use";
  return g.name + " — " + fgpu(g.gpu_free) + " of " + fgpu(g.gpu_total) + " free · largest slice " +
    fgpu(g.largest_slice) + (g.gpu_models.length ? " · " + g.gpu_models.join(", ") : "");
}

export async function projectFields(errors, changed) {
  const [projects, groups] = await Promise.all([get("/projects").catch(() => []), get("/groups").catch(() => [])]);
  projects.sort((a, b) => (b.personal - a.personal) || a.name.localeCompare(b.name));
  const project = h("select", { id: "launch-project", "aria-describedby": "err-project" },
    projects.map((p) => h("option", { value: p.name }, p.personal ? p.name + " (personal)" : p.name)));
  const group = h("select", { id: "launch-group", "aria-describedby": "err-group" });
  const free = h("div", { class: "hint", id: "launch-groups" });
  function fillGroups() {
    const picked = projects.find((p) => p.name === project.value);
    const allowed = groups.filter((g) => !picked || picked.groups === null || picked.groups.includes(g.name));
    const before = group.value;
    clear(group, h("option", { value: "" }, groupLabel(null)), allowed.map((g) => h("option", { value: g.name }, groupLabel(g))));
    group.value = allowed.some((g) => g.name === before) ? before : "";
    free.textContent = allowed.length ? "Free now: " + allowed.map((g) => g.name + " " + fgpu(g.gpu_free)).join(" · ")
      : "No node of this project's groups is up now: sessions will queue";
  }
  project.addEventListener("change", () => { fillGroups(); changed(); });
  group.addEventListener("change", changed);
  fillGroups();
  const fields = h("div", { class: "row" },
    h("div", { class: "field" }, h("label", { for: "launch-project" }, "Project"), project, errors.project),
    h("div", { class: "field" }, h("label", { for: "launch-group" }, "Resource group"), group, free, errors.group));
  return {
    fields,
    values() {
      const out = {};
      if (project.value) out.project = project.value;
      if (group.value) out.group = group.value;
      return out;
    },
    restore(saved) {
      if (saved.project && projects.some((p) => p.name === saved.project)) project.value = saved.project;
      fillGroups();
      group.value = saved.group || "";
    },
  };
}
