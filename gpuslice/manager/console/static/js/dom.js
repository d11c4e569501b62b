// Building the page: every piece of API data enters the document as text (Node.append of a
// string, textContent, setAttribute), never as HTML, so nothing an API answer holds can run.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value" || key === "checked") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  add(el, children);
  return el;
}

export function add(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

// Numbers as people read them: 0.5 fGPU, 2 GiB, 5 min.
export function num(value, digits = 2) {
  if (value === null || value === undefined) return "–";
  return String(Number(Number(value).toFixed(digits)));
}

export function fgpu(value) {
  return num(value) + " fGPU";
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

export function bytes(value) {
  if (value === null || value === undefined) return "–";
  let n = Number(value);
  let unit = 0;
  while (n >= 1024 && unit < UNITS.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return num(n, n >= 100 || unit === 0 ? 0 : 1) + " " + UNITS[unit];
}

export function age(iso, now = Date.now()) {
  const seconds = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (seconds < 60) return Math.floor(seconds) + " s";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min";
  if (seconds < 86400) return Math.floor(seconds / 3600) + " h";
  return Math.floor(seconds / 86400) + " d";
}

export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}

export function badge(status) {
  return h("span", { class: "status status-" + status }, status);
}

export function toast(text) {
  const box = document.getElementById("toast");
  const item = h("div", null, text);
  box.append(item);
  setTimeout(() => item.remove(), 6000);
}

// A field's error line: shown under its control, named by aria-describedby.
export function errorLine(id) {
  return h("div", { class: "error", id, "aria-live": "polite" });
}

let counter = 0;
export function uid(prefix) {
  counter += 1;
  return prefix + "-" + counter;
}

// Wide tables scroll sideways inside their box (.table-wrap). Where one is wider than its box
// (a phone), it is marked "scrolls" (a "scroll →" hint and a fade at the edge, in the style
// sheet) until it is scrolled to its end. Watched for the whole page, so no page has to ask.
export function scrollCues(root) {
  const mark = (wrap) => {
    const more = wrap.scrollWidth - wrap.clientWidth > 1;
    wrap.classList.toggle("scrolls", more);
    wrap.classList.toggle("at-end", more && wrap.scrollLeft + wrap.clientWidth >= wrap.scrollWidth - 1);
  };
  const all = () => root.querySelectorAll(".table-wrap").forEach(mark);
  new MutationObserver(all).observe(root, { childList: true, subtree: true });
  window.addEventListener("resize", all);
  root.addEventListener("scroll", (event) => {
    if (event.target.classList && event.target.classList.contains("table-wrap")) mark(event.target);
  }, true);
  all();
}
