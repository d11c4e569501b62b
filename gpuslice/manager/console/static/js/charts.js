// Charts drawn as SVG by hand: a line and stacked-free bars are all the console needs, and a
// charting library would outweigh the rest of the console.
const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

export function sparkline(values, label) {
  const width = 600;
  const height = 120;
  const max = Math.max(...values, 1e-9);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = values.map((v, i) => (i * step).toFixed(1) + "," + (height - (v / max) * (height - 10) - 5).toFixed(1));
  const chart = svg("svg", { class: "chart", viewBox: "0 0 " + width + " " + height, role: "img",
    "aria-label": label, preserveAspectRatio: "none" });
  chart.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: "#2456c9", "stroke-width": 2 }));
  const title = svg("title");
  title.textContent = label + " (max " + Number(max.toFixed(2)) + ")";
  chart.append(title);
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
      tip.textContent = s.name + " " + day + ": " + Number(value.toFixed(2));
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
