// What the launch dialog says about images and slices, from the API's answers: environments
// by title (internal and test images are not offered, the standard image first), what a slice
// of the cluster's GPU model is worth, and whether a GPU slice would be wasted on an image.
import { bytes, num } from "./dom.js";

const HIDDEN = new Set(["internal", "test"]);
const ORDER = { standard: 0, framework: 1, private: 2, other: 3 };

export function repositoryOf(image) {
  return image.name.replace(/@.*$/, "").replace(/:[^:/]*$/, "");
}

export function versionOf(image) {
  const bare = image.name.replace(/@.*$/, "");
  const tag = /:([^:/]+)$/.exec(bare);
  return tag ? tag[1] : "latest";
}

// An environment's name: its title without version numbers ("scikit-learn 1.5.2 (CPU)" ->
// "scikit-learn (CPU)"), so that versions of one framework read as one choice.
function titleOf(images) {
  const first = images[0];
  if (first.kind === "standard") return "Standard (Python, pip, shell)";
  const titled = images.find((i) => i.title);
  const base = titled ? titled.title.replace(/\s*v?\d+(\.\d+)+\S*/g, "").trim() : repositoryOf(first);
  return first.kind === "private" ? base + " (private)" : base;
}

// [{key, label, images}] in the order offered: standard, frameworks, private, others; each
// environment's versions newest first.
export function environments(images) {
  const byRepo = new Map();
  for (const image of images) {
    if (HIDDEN.has(image.kind)) continue;
    const repo = repositoryOf(image);
    if (!byRepo.has(repo)) byRepo.set(repo, []);
    byRepo.get(repo).push(image);
  }
  const envs = [...byRepo].map(([key, list]) => {
    list.sort((a, b) => newer(versionOf(b), versionOf(a)));
    return { key, label: titleOf(list), rank: ORDER[list[0].kind] ?? 3, images: list };
  });
  return envs.sort((a, b) => a.rank - b.rank || a.label.localeCompare(b.label));
}

// Versions compared as people read them: 1.10 after 1.9, and a release after its
// pre-releases or side builds (0.1.0 before 0.1.0-rc1 in a newest-first list).
function newer(a, b) {
  const [baseA, ...restA] = a.split("-");
  const [baseB, ...restB] = b.split("-");
  const byBase = baseA.localeCompare(baseB, undefined, { numeric: true });
  if (byBase || restA.length === restB.length) return byBase || a.localeCompare(b, undefined, { numeric: true });
  return restA.length ? -1 : 1;
}

// A preset's memory as the Memory field takes it, exactly: 1g, 512m, or bytes.
export function memField(size) {
  const n = Number(size);
  if (n % 2 ** 30 === 0) return n / 2 ** 30 + "g";
  if (n % 2 ** 20 === 0) return n / 2 ** 20 + "m";
  return String(n);
}

// The Memory field's bytes (1g, 512m, 2048), or NaN when it is not a size.
export function memBytes(text) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$/i.exec(text || "");
  return m ? Number(m[1]) * 1024 ** "bkmgt".indexOf((m[2] || "b").toLowerCase()) : NaN;
}

export function versionLabel(image) {
  const parts = [versionOf(image)];
  if (image.title) parts.push(image.title);
  else if (image.frameworks && image.frameworks.python) parts.push("Python " + image.frameworks.python);
  return parts.join(" — ");
}

// "0.5 fGPU = 2 GiB and 25 % of the SMs (27 of 108) of a Mock A100 8 GiB", for each GPU
// model of the alive nodes (a slice of f fGPU gets f / fgpu_per_gpu of one GPU).
export function sliceText(gpu, models) {
  const asked = Number(gpu);
  if (!asked || !models || !models.length) return "";
  return models.map((m) => {
    const share = asked / Number(m.fgpu_per_gpu);
    const gpuName = m.model + " " + bytes(m.mem);
    if (share > 1) return num(asked) + " fGPU = " + num(share) + " whole " + gpuName + " GPUs";
    const sms = m.sms ? " (" + num(m.sms * share, 0) + " of " + m.sms + ")" : "";
    return num(asked) + " fGPU = " + bytes(m.mem * share) + " and " + num(share * 100, 1) +
      " % of the SMs" + sms + " of a " + gpuName;
  }).join("; ");
}

// A warning when a GPU slice is asked for an image that says it cannot use one.
export function gpuWarning(gpu, image) {
  if (!Number(gpu) || !image || !image.cpu_only) return "";
  return (image.title || image.name) + " is a CPU-only image: the " + num(gpu) +
    " fGPU would be held for this session and unused. Pick a GPU image, or set GPU to 0.";
}
