// Charts drawn as SVG by hand: a figure over time and stacked bars are all the console needs, and a
// charting library would outweigh the rest of the console.
const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

// Small amounts as people need them: a 4-minute session's 0.0042 fGPU-hours, not "0".
// Two significant digits below 1, two decimals above.
export function precise(value) {
  const n = Number(value);
  if (value === null || value === undefined || Number.isNaN(n)) return "–";
  if (n === 0) return "0";
  return String(Math.abs(n) < 1 ? Number(n.toPrecision(2)) : Number(n.toFixed(2)));
}

function text(x, y, content, attrs) {
  const el = svg("text", { x, y, "font-size": 11, fill: "#5d6677", ...attrs });
  el.textContent = content;
  return el;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// One figure over time with labelled axes: y from 0 to `max` (ticks at 0, half and max, in
// `unit`), x the points' times (first and last). Each point is a dot with its value as a
// tooltip, so a session's first minute shows too; an unmeasured point (null) leaves a gap.
export function timeChart(points, { id, label, unit, max, format }) {
  const W = 420, H = 170, left = 58, right = 10, top = 10, bottom = 34;
  const measured = points.filter((p) => p.value !== null);
  const ceiling = Math.max(max || 0, ...measured.map((p) => p.value), 1e-9);
  const times = points.map((p) => Date.parse(p.at));
  const t0 = Math.min(...times), span = Math.max(...times) - t0;
  const x = (t) => left + (span > 0 ? (t - t0) / span : 0.5) * (W - left - right);
  const y = (v) => top + (1 - v / ceiling) * (H - top - bottom);
  const chart = svg("svg", { class: "chart time-chart", id, viewBox: "0 0 " + W + " " + H, role: "img",
    "aria-label": label + " (" + unit + ") over time" });
  const axis = { stroke: "#5d6677", "stroke-width": 1 };
  chart.append(svg("line", { x1: left, y1: top, x2: left, y2: H - bottom, ...axis }),
    svg("line", { x1: left, y1: H - bottom, x2: W - right, y2: H - bottom, ...axis }));
  for (const share of [0, 0.5, 1]) {
    chart.append(text(left - 4, y(ceiling * share) + 4, format(ceiling * share), { "text-anchor": "end", class: "tick-y" }));
  }
  chart.append(text(12, (H - bottom + top) / 2, label + " (" + unit + ")", { class: "axis-y",
    "text-anchor": "middle", transform: "rotate(-90 12 " + (H - bottom + top) / 2 + ")" }));
  if (points.length) {
    chart.append(text(x(t0), H - bottom + 14, clock(t0), { "text-anchor": span > 0 ? "start" : "middle", class: "tick-x" }));
    if (span > 0) chart.append(text(W - right, H - bottom + 14, clock(t0 + span), { "text-anchor": "end", class: "tick-x" }));
  }
  chart.append(text((left + W - right) / 2, H - 4, "time", { class: "axis-x", "text-anchor": "middle" }));
  let run = [];
  const line = () => {
    if (run.length > 1) chart.append(svg("polyline", { points: run.join(" "), fill: "none", stroke: "#2456c9", "stroke-width": 2 }));
    run = [];
  };
  points.forEach((p, i) => {
    if (p.value === null) { line(); return; }
    const at = x(times[i]).toFixed(1) + "," + y(p.value).toFixed(1);
    run.push(at);
    const dot = svg("circle", { cx: x(times[i]).toFixed(1), cy: y(p.value).toFixed(1), r: 3, fill: "#2456c9", class: "point" });
    const tip = svg("title");
    tip.textContent = clock(times[i]) + ": " + format(p.value) + " " + unit;
    dot.append(tip);
    chart.append(dot);
  });
  line();
  return chart;
}

// Bars per day (x) of one figure, one colour per series (e.g. per user); a legend below.
export function bars(days, series, label) {
  const width = 700;
  const height = 200;
  const colours = ["#2456c9", "#19794a", "#9a5b00", "#b3261e", "#6b3fb5", "#0b7285"];
  const totals = days.map((_, i) => series.reduce((sum, s) => sum + (s.values[i] || 0), 0));
  const max = Math.max(...totals, 1e-9);
  const slot = width / Math.max(days.length, 1);
  const chart = svg("svg", { class: "chart", viewBox: "0 0 " + width + " " + (height + 20), role: "img", "aria-label": label });
  days.forEach((day, i) => {
    let y = height;
    series.forEach((s, k) => {
      const value = s.values[i] || 0;
      const tall = (value / max) * (height - 10);
      y -= tall;
      const rect = svg("rect", { x: i * slot + 4, y, width: Math.max(slot - 8, 2), height: tall, fill: colours[k % colours.length] });
      const tip = svg("title");
      tip.textContent = s.name + " " + day + ": " + precise(value);
      rect.append(tip);
      chart.append(rect);
    });
    const text = svg("text", { x: i * slot + slot / 2, y: height + 15, "text-anchor": "middle", "font-size": 10, fill: "#5d6677" });
    text.textContent = day.slice(5);
    chart.append(text);
  });
  const legend = document.createElement("div");
  legend.className = "muted";
  series.forEach((s, k) => {
    const key = document.createElement("span");
    key.className = "chip";
    key.style.borderLeft = "10px solid " + colours[k % colours.length];
    key.textContent = s.name;
    legend.append(key);
  });
  const box = document.createElement("div");
  box.append(chart, legend);
  return box;
}
