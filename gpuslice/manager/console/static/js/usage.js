// A session's usage card: what it uses now, its totals (precise enough for a short session)
// and charts over time with labelled axes: GPU memory and GPU utilisation of its own
// processes, and CPU, from GET /sessions/{id}/stats.
import { bytes, h, num } from "./dom.js";
import { precise, timeChart } from "./charts.js";

const MiB = 1024 * 1024;

export function usageCard(stats, session) {
  const now = stats.now;
  const gpus = now && now.gpus ? now.gpus : [];
  const devices = session.placement ? session.placement.devices : [];
  const sliceMem = devices.reduce((sum, d) => sum + Number(d.mem || 0), 0);
  const t = stats.totals;
  return [
    h("h2", null, "Usage"),
    h("div", { class: "grid", id: "usage-now" },
      h("div", null, "CPU busy: ", now && now.cpu !== null ? num(now.cpu) + " cores" : "–"),
      h("div", null, "Memory: ", now ? bytes(now.mem) : "–"),
      gpus.map((g) => h("div", null, "GPU memory: ", bytes(g.mem_used), " · util ",
        g.utilization === null ? "–" : g.utilization + "%"))),
    h("p", { id: "usage-totals" }, "Totals over ", duration(Number(t.seconds)), ": ",
      precise(t.fgpu_hours) + " fGPU-h · " + precise(t.cpu_hours) + " CPU core-h · " +
      precise(t.gpu_mem_gib_hours) + " GPU memory GiB-h"),
    stats.points.length === 0 ? h("p", { class: "muted" }, "No usage measured yet: charts appear after the first sample.") :
      h("div", { class: "charts" }, devices.length ? [
        chartBox("GPU memory", timeChart(series(stats, (p) => p.gpu_mem === null ? null : p.gpu_mem / MiB),
          { id: "chart-gpu-mem", label: "GPU memory", unit: "MiB", max: sliceMem / MiB, format: (v) => num(v, 0) })),
        chartBox("GPU utilisation", timeChart(series(stats, (p) => p.gpu_util === null ? null : Number(p.gpu_util)),
          { id: "chart-gpu-util", label: "GPU util", unit: "%", max: 100, format: (v) => num(v, 0) })),
      ] : null,
      chartBox("CPU", timeChart(series(stats, (p) => p.cpu === null ? null : Number(p.cpu)),
        { id: "chart-cpu", label: "CPU", unit: "cores", max: Number(session.resources.cpu), format: (v) => num(v, 2) }))),
    stats.points.length ? h("p", { class: "muted" }, "One point per minute (its average) over the last hour; " +
      "point at one for its value.") : null,
  ];
}

function series(stats, pick) {
  return stats.points.map((p) => ({ at: p.at, value: pick(p) }));
}

function chartBox(title, chart) {
  return h("figure", { class: "chart-box" }, h("figcaption", null, title), chart);
}

function duration(seconds) {
  if (seconds < 120) return num(seconds, 0) + " s";
  if (seconds < 7200) return num(seconds / 60, 0) + " min";
  return num(seconds / 3600, 1) + " h";
}
