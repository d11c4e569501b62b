// The launch dialog: environment then version (the image catalog by title, internal and test
// images not offered, the standard image first) or any image name typed, a resource preset
// (the admins'; the default preselected), a GPU slider that says what the slice is in memory
// and SMs of the cluster's GPU model (and warns on a CPU-only image), a GPU slider in the cluster's fGPU step that says what fits now and what will
// queue (POST /sessions/preview; the slider is never disabled: queueing is allowed), CPU,
// memory, how many, type and command, folders, the project and resource group (each group's
// free capacity), and recent launches to relaunch. The API's
// errors are shown next to the field they name; nothing is created unless LAUNCH succeeds.
import { get, post } from "./api.js";
import { bytes, clear, errorLine, fgpu, h, num, toast } from "./dom.js";
import { environments, gpuWarning, memBytes, memField, repositoryOf, sliceText, versionLabel }
  from "./launch_catalog.js";
import { projectFields } from "./launch_projects.js";

const RECENT = 5;
const FIELDS = { image: "image", gpu: "gpu", gpu_mem: "gpu", cpu: "cpu", mem: "mem", count: "count",
  name: "name", command: "command", command_line: "command", folders: "folders", type: "command",
  project: "project", group: "group", time_limit: "time", begin_at: "begin" };

function fieldOf(apiField) {
  if (!apiField) return "form";
  const parts = apiField.split(".");
  const last = parts[0] === "resources" ? parts[1] || "gpu" : parts[0];
  return FIELDS[last] || "form";
}

function presetOptions(presets) {
  return [...presets.map((p) => h("option", { value: p.name },
    p.name + " — " + num(p.cpu) + " CPU, " + bytes(p.mem) + (Number(p.gpu) ? ", " + fgpu(p.gpu) : ""))),
  h("option", { value: "" }, "custom")];
}

function recentKey(me) {
  return "gpuslice.recent." + me.username;
}

export async function openLaunch(me) {
  const [images, folders, presets] = await Promise.all([get("/images"),
    get("/folders").catch(() => []), get("/presets").catch(() => [])]);
  const envs = environments(images);
  const byEnv = new Map(envs.map((e) => [e.key, e.images]));
  let gpuModels = [];
  const errors = {};
  for (const key of ["image", "gpu", "cpu", "mem", "count", "name", "command", "folders", "project",
    "group", "time", "begin", "form"]) {
    errors[key] = errorLine("err-" + key);
  }
  const team = await projectFields(errors, () => schedulePreview());
  const env = h("select", { id: "launch-env", "aria-describedby": "err-image" },
    envs.map((e) => h("option", { value: e.key }, e.label)));
  const version = h("select", { id: "launch-version", "aria-describedby": "err-image" });
  const typed = h("input", { type: "text", id: "launch-image", size: 32, "aria-describedby": "err-image",
    placeholder: "e.g. u/" + me.username + "/my-env:1", autocomplete: "off", spellcheck: "false" });
  const minimums = h("div", { class: "hint", id: "launch-minimums" });
  const preset = h("select", { id: "launch-preset" }, presetOptions(presets));
  const slice = h("div", { class: "hint", id: "launch-slice" });
  const warning = h("div", { class: "warn", id: "launch-warning", role: "status" });
  const gpuRange = h("input", { type: "range", id: "launch-gpu-range", min: 0, max: 2, step: 0.01, value: 0,
    "aria-label": "GPU (fGPU) slider" });
  const gpu = h("input", { type: "number", id: "launch-gpu", min: 0, step: 0.01, value: 0, "aria-describedby": "err-gpu launch-fit" });
  const shape = h("div", { class: "hint", id: "launch-shape" });
  const fit = h("div", { class: "fit", id: "launch-fit", "aria-live": "polite" });
  const countRange = h("input", { type: "range", id: "launch-count-range", min: 1, max: 10, step: 1, value: 1,
    "aria-label": "Sessions slider" });
  const count = h("input", { type: "number", id: "launch-count", min: 1, max: 100, step: 1, value: 1, "aria-describedby": "err-count" });
  const cpu = h("input", { type: "number", id: "launch-cpu", min: 0, step: 0.25, value: 1, "aria-describedby": "err-cpu" });
  const mem = h("input", { type: "text", id: "launch-mem", value: "1g", size: 8, "aria-describedby": "err-mem" });
  const first = presets.find((p) => p.default) || presets[0];
  const name = h("input", { type: "text", id: "launch-name", placeholder: "optional", "aria-describedby": "err-name" });
  const timeLimit = h("input", { type: "text", id: "launch-time", size: 10, placeholder: "optional",
    "aria-describedby": "err-time", autocomplete: "off", spellcheck: "false" });
  const begin = h("input", { type: "datetime-local", id: "launch-begin", "aria-describedby": "err-begin" });
  const interactive = h("input", { type: "radio", name: "type", id: "launch-type-interactive", value: "interactive", checked: true });
  const batch = h("input", { type: "radio", name: "type", id: "launch-type-batch", value: "batch" });
  const command = h("input", { type: "text", id: "launch-command", size: 40, "aria-describedby": "err-command",
    placeholder: "python3 train.py --epochs 3" });
  const commandField = h("div", { class: "field", hidden: true },
    h("label", { for: "launch-command" }, "Command"), command, errors.command);
  const folderBoxes = folders.filter((f) => !f.auto_mount).map((f) => {
    const use = h("input", { type: "checkbox", id: "folder-" + f.id, value: f.name });
    const ro = h("input", { type: "checkbox", id: "folder-ro-" + f.id, "aria-label": "read-only " + f.name,
      checked: f.access === "ro" });
    return { use, ro, row: h("div", null, use, h("label", { for: "folder-" + f.id }, " " + f.name + " "),
      h("label", { class: "muted" }, ro, " read-only")) };
  });
  // What the GPU slider says comes and goes with each preview and each refusal: the block it
  // sits in never grows shorter while the dialog is open (holdHeight, before each change), so
  // that nothing below it moves up under the user's pointer as an answer lands.
  const feedback = h("div", { class: "feedback", id: "launch-gpu-feedback" }, slice, warning, shape, fit, errors.gpu);
  function holdHeight() {
    const now = feedback.offsetHeight;  // 0 until the dialog shows: the stylesheet's least height
    if (now > (parseFloat(feedback.style.minHeight) || 0)) feedback.style.minHeight = now + "px";
  }
  const recent = h("div", { class: "recent", id: "launch-recent" });
  const submit = h("button", { type: "submit", class: "primary", id: "launch-submit" }, "LAUNCH");
  const form = h("form", { novalidate: true },
    h("h2", { id: "launch-title" }, "Launch sessions"),
    recent,
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "launch-env" }, "Environment"), env),
      h("div", { class: "field" }, h("label", { for: "launch-version" }, "Version"), version)),
    minimums,
    h("div", { class: "field" }, h("label", { for: "launch-image" }, "…or an image name"), typed,
      h("div", { class: "hint" }, "any image you may use (your commits are u/" + me.username + "/…); it replaces the choice above"),
      errors.image),
    team.fields,
    h("div", { class: "field" }, h("label", { for: "launch-preset" }, "Resource preset"), preset,
      h("div", { class: "hint" }, "CPU and memory below; change them for a custom size")),
    h("div", { class: "field" }, h("label", { for: "launch-gpu" }, "GPU (fGPU)"),
      gpuRange, " ", gpu, feedback),
    h("div", { class: "field" }, h("label", { for: "launch-count" }, "Sessions"), countRange, " ", count, errors.count),
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "launch-cpu" }, "CPU (cores)"), cpu, errors.cpu),
      h("div", { class: "field" }, h("label", { for: "launch-mem" }, "Memory"), mem,
        h("div", { class: "hint" }, "e.g. 512m, 2g"), errors.mem),
      h("div", { class: "field" }, h("label", { for: "launch-name" }, "Name"), name, errors.name)),
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "launch-time" }, "Time limit"), timeLimit,
        h("div", { class: "hint" }, "e.g. 30m, 2h, 1:30:00; ended then"), errors.time),
      h("div", { class: "field" }, h("label", { for: "launch-begin" }, "Start at"), begin,
        h("div", { class: "hint" }, "optional; waits until then"), errors.begin)),
    h("fieldset", { class: "field" }, h("legend", null, "Type"),
      interactive, h("label", { for: "launch-type-interactive" }, " Interactive "),
      batch, h("label", { for: "launch-type-batch" }, " Batch (runs a command and ends)")),
    commandField,
    folderBoxes.length ? h("fieldset", { class: "field" }, h("legend", null, "Folders (mounted at /home/work/<name>)"),
      folderBoxes.map((f) => f.row), errors.folders) : null,
    errors.form,
    h("div", { class: "actions" },
      h("button", { type: "button", id: "launch-cancel", onclick: () => dialog.close() }, "Cancel"), submit));
  const dialog = h("dialog", { id: "launch-dialog", "aria-labelledby": "launch-title" }, form);
  document.body.append(dialog);
  dialog.addEventListener("close", () => dialog.remove());

  function imageName() {
    return typed.value.trim() || version.value;
  }
  function chosen() {
    return images.find((i) => i.name === imageName() || (i.aliases || []).includes(imageName()));
  }
  function fillVersions() {
    clear(version, (byEnv.get(env.value) || []).map((i) => h("option", { value: i.name }, versionLabel(i))));
    showMinimums();
  }
  function showSlice() {
    holdHeight();
    slice.textContent = sliceText(gpu.value, gpuModels);
    warning.textContent = gpuWarning(gpu.value, chosen());
  }
  function applyPreset() {
    const picked = presets.find((p) => p.name === preset.value);
    if (!picked) return;
    cpu.value = num(picked.cpu);
    mem.value = memField(picked.mem);
    if (Number(picked.gpu)) gpu.value = gpuRange.value = num(picked.gpu);
    showMinimums();
  }
  function showMinimums() {
    showSlice();
    const image = chosen();
    if (!image) {
      minimums.textContent = typed.value.trim() ? "The manager checks the typed name when you launch" : "";
      return;
    }
    const parts = [];
    if (Number(image.min_gpu)) parts.push("≥ " + fgpu(image.min_gpu));
    if (Number(image.min_cpu)) parts.push("≥ " + num(image.min_cpu) + " CPU");
    if (image.min_mem) parts.push("≥ " + bytes(image.min_mem) + " memory");
    const apps = image.apps.map((a) => a.name);
    minimums.textContent = (parts.length ? "Needs " + parts.join(", ") : "No minimums") +
      (apps.length ? " · apps: " + apps.join(", ") : "") + (image.cpu_only ? " · CPU only" : "");
    // an image's minimums lift the preset's values, so that LAUNCH is not refused for them
    if (Number(cpu.value) < Number(image.min_cpu)) { cpu.value = num(image.min_cpu); preset.value = ""; }
    if (memBytes(mem.value) < image.min_mem) { mem.value = memField(image.min_mem); preset.value = ""; }
  }
  function body() {
    const type = batch.checked ? "batch" : "interactive";
    const chosenFolders = folderBoxes.filter((f) => f.use.checked).map((f) => f.use.value + (f.ro.checked ? ":ro" : ""));
    const out = { image: imageName(), count: Number(count.value || 0), type,
      resources: { gpu: gpu.value === "" ? 0 : gpu.value, cpu: cpu.value === "" ? 0 : cpu.value, mem: mem.value.trim() },
      folders: chosenFolders, ...team.values() };
    if (name.value.trim()) out.name = name.value.trim();
    if (type === "batch" && command.value.trim()) out.command_line = command.value.trim();
    if (timeLimit.value.trim()) out.time_limit = timeLimit.value.trim();
    // the browser's local time, sent with its offset (as UTC)
    if (begin.value) out.begin_at = new Date(begin.value).toISOString();
    return out;
  }
  function showErrors(err) {
    holdHeight();
    for (const line of Object.values(errors)) line.textContent = "";
    if (err) errors[fieldOf(err.field)].textContent = err.message;
  }
  let previewTimer = null;
  let asked = 0;
  function schedulePreview() {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(preview, 150);
  }
  async function preview() {
    const mine = ++asked;
    try {
      const answer = await post("/sessions/preview", body());
      if (mine !== asked) return;
      showErrors(null);
      const max = Math.max(Number(answer.max_gpu), Number(gpu.value) || 0);
      gpuRange.max = String(max || Number(answer.fgpu_per_gpu[0]));
      gpuRange.step = String(answer.fgpu_step);
      gpu.step = String(answer.fgpu_step);
      shape.textContent = "1 GPU = " + answer.fgpu_per_gpu.map(num).join(" or ") + " fGPU · step " +
        num(answer.fgpu_step) + " · largest free slice now " + fgpu(answer.largest_free);
      gpuModels = answer.gpu_models || [];
      showSlice();
      clear(fit, h("span", { class: "now" }, "Fits now: " + answer.fits_now), " · ",
        h("span", { class: "queue" }, "Will queue: " + answer.will_queue),
        answer.reason ? h("span", { class: "reason" }, "#" + answer.queue_position + ": " + answer.reason) : null);
    } catch (err) {
      if (mine !== asked) return;
      holdHeight();
      clear(fit);
      showErrors(err);
    }
  }
  function link(range, box) {
    range.addEventListener("input", () => { box.value = range.value; schedulePreview(); });
    box.addEventListener("input", () => { range.value = box.value; schedulePreview(); });
  }
  link(gpuRange, gpu);
  link(countRange, count);
  for (const el of [gpuRange, gpu]) el.addEventListener("input", showSlice);
  for (const el of [name, command]) el.addEventListener("input", schedulePreview);
  // a size typed by hand is no longer the preset's
  for (const el of [cpu, mem]) el.addEventListener("input", () => { preset.value = ""; schedulePreview(); });
  preset.addEventListener("change", () => { applyPreset(); schedulePreview(); });
  typed.addEventListener("input", () => { showMinimums(); schedulePreview(); });
  for (const f of folderBoxes) { f.use.addEventListener("change", schedulePreview); f.ro.addEventListener("change", schedulePreview); }
  env.addEventListener("change", () => { fillVersions(); schedulePreview(); });
  version.addEventListener("change", () => { showMinimums(); schedulePreview(); });
  for (const radio of [interactive, batch]) {
    radio.addEventListener("change", () => { commandField.hidden = !batch.checked; schedulePreview(); });
  }

  function restore(saved) {
    const image = images.find((i) => i.name === saved.image && byEnv.has(repositoryOf(i)));
    typed.value = image ? "" : saved.image;
    if (image) { env.value = repositoryOf(image); fillVersions(); version.value = image.name; }
    preset.value = "";
    gpu.value = gpuRange.value = saved.resources.gpu;
    count.value = countRange.value = saved.count;
    cpu.value = saved.resources.cpu;
    mem.value = saved.resources.mem;
    name.value = saved.name || "";
    batch.checked = saved.type === "batch";
    interactive.checked = !batch.checked;
    commandField.hidden = !batch.checked;
    command.value = saved.command_line || "";
    team.restore(saved);
    showMinimums();
    for (const f of folderBoxes) {
      const hit = (saved.folders || []).find((x) => x.replace(/:ro$/, "") === f.use.value);
      f.use.checked = Boolean(hit);
      f.ro.checked = Boolean(hit && hit.endsWith(":ro"));
    }
    schedulePreview();
  }
  const history = JSON.parse(localStorage.getItem(recentKey(me)) || "[]");
  if (history.length) {
    recent.append(h("span", { class: "muted" }, "Recent: "));
    for (const saved of history) {
      recent.append(h("button", { type: "button", onclick: () => restore(saved) },
        (saved.name ? saved.name + ": " : "") + saved.count + " × " + fgpu(saved.resources.gpu) + " " + saved.image.replace(/^.*\//, "")));
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    // a preview asked before LAUNCH answers for an older form: dropped, so that its answer,
    // landing after LAUNCH's refusal, cannot wipe the refusal's error away
    clearTimeout(previewTimer);
    asked += 1;
    const request = body();
    submit.disabled = true;
    try {
      const created = await post("/sessions", request);
      const kept = [request, ...history.filter((x) => JSON.stringify(x) !== JSON.stringify(request))];
      localStorage.setItem(recentKey(me), JSON.stringify(kept.slice(0, RECENT)));
      toast("Launched " + created.map((s) => s.name).join(", "));
      dialog.close();
    } catch (err) {
      showErrors(err);
      const line = errors[fieldOf(err.field)];
      line.scrollIntoView({ block: "nearest" });
    } finally {
      submit.disabled = false;
    }
  });

  if (first) { preset.value = first.name; applyPreset(); }
  fillVersions();
  dialog.showModal();
  env.focus();
  schedulePreview();
  return dialog;
}
