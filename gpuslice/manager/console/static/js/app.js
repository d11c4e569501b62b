// The console's shell: who is logged in, the navigation, and hash routes to pages
// (#/sessions, #/sessions/<id>, #/folders, #/models, #/notifications, #/admin). A page is a function of
// (main element, route parts) returning { stop() } to end its streams and timers.
import { post, whoami } from "./api.js";
import { clear, h, scrollCues } from "./dom.js";
import { sessionsPage } from "./sessions.js";

const lazy = {
  session: () => import("./detail.js").then((m) => m.detailPage),
  folders: () => import("./storage.js").then((m) => m.foldersPage),
  models: () => import("./storage.js").then((m) => m.modelsPage),
  admin: () => import("./admin.js").then((m) => m.adminPage),
  notifications: () => import("./notify.js").then((m) => m.notifyPage),
};

let current = null;
let generation = 0;

async function route() {
  const main = document.getElementById("main");
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  let name = parts[0] || "sessions";
  if (name === "sessions" && parts[1]) name = "session";
  for (const link of document.querySelectorAll(".top nav a")) {
    const on = link.dataset.page === (name === "session" ? "sessions" : name);
    if (on) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (current && current.stop) current.stop();
  current = null;
  const mine = ++generation;
  const me = await whoami();
  let page = sessionsPage;
  if (lazy[name]) page = await lazy[name]();
  if (mine !== generation) return; // another route was asked for meanwhile
  clear(main);
  current = page(main, parts.slice(1), me);
}

async function start() {
  const me = await whoami();
  document.getElementById("who").textContent = me.username + (me.role === "admin" ? " (admin)" : "");
  document.querySelector('[data-page="admin"]').hidden = me.role !== "admin";
  document.getElementById("logout").addEventListener("click", async () => {
    let next = "/login?next=/";
    try {
      const done = await post("/auth/logout");
      // signed in with single sign-on: sign out at the provider too (it comes back to /login)
      if (done && typeof done.redirect === "string" && /^https?:\/\//.test(done.redirect)) next = done.redirect;
    } finally {
      location.assign(next);
    }
  });
  window.addEventListener("hashchange", route);
  scrollCues(document.getElementById("main"));
  await route();
}

start().catch((err) => {
  clear(document.getElementById("main"), h("p", { class: "error" }, "The console could not start: " + err.message));
});
