// One session: what it asked for and got (the slice on its device), why it is in its status,
// its history, its apps (the terminal in the page; web apps in a new tab), live usage and its
// logs (following).
import { get, post } from "./api.js";
import { add, badge, bytes, clear, errorLine, fgpu, h, num, toast, when } from "./dom.js";
import { watch } from "./live.js";
import { usageCard } from "./usage.js";
import { openTerminal } from "./terminal.js";
import { configuration, span, timeText, waitText } from "./sessions.js";

const FINAL = new Set(["TERMINATED", "ERROR", "CANCELLED"]);

export function detailPage(main, parts) {
  const id = parts[0];
  const head = h("div", { class: "bar" });
  const summary = h("div", { class: "card", id: "session-summary" });
  const allocation = h("div", { class: "card", id: "session-allocation" });
  const apps = h("div", { class: "card", id: "session-apps" });
  const usage = h("div", { class: "card", id: "session-usage" });
  const history = h("div", { class: "card", id: "session-history" });
  const follow = h("input", { type: "checkbox", id: "logs-follow", checked: true });
  const logs = h("pre", { class: "logs empty", id: "session-logs", tabindex: 0 }, "Loading the logs…");
  const logsCard = h("div", { class: "card" },
    h("div", { class: "bar" }, h("h2", null, "Logs"), h("label", null, follow, " Follow")), logs);
  add(main, h("p", null, h("a", { href: "#/sessions" }, "← Sessions")), head, summary, allocation, apps,
    usage, history, logsCard);
  let session = null;
  let appsShown = "";
  let terminal = null;

  async function refresh() {
    try {
      session = await get("/sessions/" + encodeURIComponent(id));
    } catch (err) {
      clear(head, h("p", { class: "error", id: "session-error" }, err.message));
      return;
    }
    document.title = session.name + ": gpuslice";
    clear(head, h("h1", null, session.name + " "), badge(session.status), h("span", { class: "spacer" }),
      session.status === "RUNNING" ? h("button", { type: "button", id: "commit-open", onclick: () => commitDialog(session) }, "Commit") : null,
      FINAL.has(session.status) || session.status === "TERMINATING" ? null :
        h("button", { type: "button", class: "danger", id: "destroy-one", onclick: destroy }, "Destroy"));
    showSummary();
    showAllocation();
    showHistory();
    await showApps();
  }

  function showSummary() {
    const s = session;
    const rows = [
      ["Status", [badge(s.status), " ", waitText(s)]],
      ["Configuration", configuration(s)],
      ["Image", s.image], ["Type", s.type + (s.command ? ": " + s.command.join(" ") : "")],
      ["Owner", s.owner], ["Node", s.placement ? s.placement.node_name : "–"],
      ["Created", when(s.created_at)], ["Id", s.id],
    ];
    if (s.result) rows.push(["Result", s.result + " (exit code " + s.exit_code + ")"]);
    if (s.priority_class) {
      rows.push(["Priority", s.priority_class + (s.preemptions ? " (preempted " + s.preemptions +
        (s.preemptions === 1 ? " time)" : " times)") : "")]);
    }
    if (s.folders.length) rows.push(["Folders", s.folders.map((f) => f.name + (f.read_only ? " (ro)" : "")).join(", ")]);
    if (s.time_limit) rows.push(["Time limit", span(s.time_limit)]);
    if (s.ends_at) rows.push(["Ends", when(s.ends_at) + " (" + timeText(s) + ")"]);
    if (s.begin_at) rows.push(["Starts", when(s.begin_at)]);
    if (s.reclaim) rows.push(["Reclaimed", when(s.reclaim.at) + ": " + s.reclaim.reason]);
    clear(summary, h("dl", { class: "kv" }, rows.map(([k, v]) => [h("dt", null, k), h("dd", null, v)])));
  }

  function showAllocation() {
    const devices = session.placement ? session.placement.devices : [];
    clear(allocation, h("h2", null, "Allocation"), devices.length === 0 ?
      h("p", { class: "muted" }, session.placement ? "No GPU (CPU only)" : "Not placed") :
      h("div", { class: "table-wrap" }, h("table", { id: "allocation" },
        h("thead", null, h("tr", null, ["GPU", "Model", "Slice", "Share", "GPU memory", "SMs", "UUID"].map((x) => h("th", null, x)))),
        h("tbody", null, devices.map((d) => h("tr", null,
          h("td", null, d.device_index), h("td", null, d.device_model), h("td", null, fgpu(d.gpu)),
          h("td", null, num(d.fraction * 100, 1) + "%"), h("td", { class: "slice-mem" }, bytes(d.mem)),
          h("td", null, d.sms), h("td", { class: "muted" }, d.device_uuid)))))));
  }

  function showHistory() {
    clear(history, h("h2", null, "Status history"), h("table", { id: "history" },
      h("tbody", null, (session.history || []).map((c) => h("tr", null,
        h("td", null, when(c.at)), h("td", null, badge(c.status)), h("td", { class: "muted" }, c.reason))))));
  }

  async function showApps() {
    if (session.status !== "RUNNING") {
      appsShown = "";
      if (terminal) { terminal.close(); terminal = null; }
      clear(apps, h("h2", null, "Apps"), h("p", { class: "muted" }, "Apps open once the session is RUNNING."));
      return;
    }
    let list;
    try {
      list = await get("/sessions/" + encodeURIComponent(id) + "/apps");
    } catch (err) {
      clear(apps, h("h2", null, "Apps"), h("p", { class: "error" }, err.message));
      return;
    }
    const key = JSON.stringify(list.apps.map((a) => [a.name, a.state, a.message, a.process]));
    if (key === appsShown) return;
    appsShown = key;
    const box = terminal ? terminal.box : null;
    clear(apps, h("h2", null, "Apps"), h("div", { class: "bar", id: "app-buttons" }, list.apps.map(appButton)),
      list.apps.filter((a) => a.state === "failed").map((a) =>
        h("div", { class: "error" }, a.name + " failed" + (a.exit_code !== null && a.exit_code !== undefined ? " (exit code " + a.exit_code + ")" : "") +
          ": " + (a.message || ""), a.logs ? h("pre", { class: "logs" }, a.logs) : null)),
      box);
  }

  function appButton(app) {
    // A port a process serves (no app declares it) says which process; a declared app its state.
    const note = app.discovered ? "port " + app.port + (app.process ? " · " + app.process : "") : app.state;
    const state = h("span", { class: "muted", title: app.command || null }, " " + note);
    if (app.name === "terminal") {
      return h("span", null, h("button", { type: "button", id: "open-terminal", onclick: showTerminal }, "Terminal"), state);
    }
    // Opened as a link, in a tab of its own: through this origin's /s/ path, which hands the
    // login to the app's own origin (app.url) by a single-use code; the proxy starts the app
    // on first open.
    const enter = "/s/" + encodeURIComponent(id) + "/" + encodeURIComponent(app.name) + "/";
    return h("span", null, h("a", { href: enter, target: "_blank", rel: "noopener", id: "open-" + app.name,
      class: "button", onclick: () => setTimeout(() => { appsShown = ""; showApps(); }, 1500) }, "Open " + app.name), state);
  }

  async function showTerminal() {
    if (terminal) { terminal.focus(); return; }
    const status = h("div", { class: "muted", id: "terminal-status" }, "loading the terminal…");
    const box = h("div", { id: "terminal-wrap" }, h("div", { id: "terminal-box" }), status);
    apps.append(box);
    try {
      terminal = await openTerminal(box.firstChild, id, (text) => { status.textContent = text; });
      terminal.box = box;
    } catch (err) {
      status.textContent = err.message;
    }
  }

  async function destroy() {
    if (!confirm("Destroy " + session.name + "?")) return;
    try {
      await post("/sessions/destroy", { ids: [id] });
      live.now();
    } catch (err) {
      toast("Could not destroy: " + err.message);
    }
  }

  let logTimer = null;
  async function pollLogs() {
    if (session && session.status === "PENDING") {
      showLogs(logs, "", session);
    } else if (follow.checked && session) {
      try {
        const answer = await get("/sessions/" + encodeURIComponent(id) + "/logs?tail=2000");
        showLogs(logs, answer.logs, session);
      } catch (err) {
        logs.textContent = err.message;
      }
    }
    if (session) logTimer = setTimeout(pollLogs, FINAL.has(session.status) ? 10000 : 2000);
  }

  let usageTimer = null;
  async function pollUsage() {
    if (!session) return;
    try {
      const stats = await get("/sessions/" + encodeURIComponent(id) + "/stats?since=1h");
      clear(usage, usageCard(stats, session));
    } catch (err) {
      clear(usage, h("h2", null, "Usage"), h("p", { class: "muted" }, err.message));
    }
    usageTimer = setTimeout(pollUsage, 5000);
  }

  const live = watch(refresh, { sessionId: id, poll: () => session && !FINAL.has(session.status) });
  live.now().then(() => { pollLogs(); pollUsage(); });
  return {
    stop() {
      live.stop();
      clearTimeout(logTimer);
      clearTimeout(usageTimer);
      if (terminal) terminal.close();
    },
  };
}

// The logs box: the session's output, or a line saying why there is none yet (an empty box
// read as a broken page). Kept at the bottom if the reader was there.
function showLogs(box, text, session) {
  const empty = !text;
  const shown = empty ? placeholder(session) : text;
  if (box.textContent === shown) return;
  const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
  box.textContent = shown;
  box.classList.toggle("empty", empty);
  if (atEnd && !empty) box.scrollTop = box.scrollHeight;
}

function placeholder(session) {
  if (session.status === "PENDING") return "No logs yet: the session has not started. Its output appears here once it runs.";
  if (FINAL.has(session.status)) return "No logs: the session ended without printing anything.";
  return "No logs yet: nothing printed so far. Output appears here as the session writes it.";
}

// Commit: the running session saved as a private image of its owner's (a name and a tag),
// to launch from the dialog. The API answers once the image exists (seconds to a minute),
// so the dialog shows that it is working until then, and the refusal in words if any.
function commitDialog(session) {
  const name = h("input", { type: "text", id: "commit-name", value: "custom", required: true, autocomplete: "off",
    "aria-describedby": "commit-error" });
  const tag = h("input", { type: "text", id: "commit-tag", value: session.name, autocomplete: "off",
    "aria-describedby": "commit-error" });
  const progress = h("div", { id: "commit-progress", "aria-live": "polite" });
  const problem = errorLine("commit-error");
  const submit = h("button", { type: "submit", class: "primary", id: "commit-submit" }, "Commit");
  const close = h("button", { type: "button", id: "commit-cancel", onclick: () => dialog.close() }, "Cancel");
  const form = h("form", { onsubmit: go },
    h("h2", { id: "commit-title" }, "Commit " + session.name + " as an image"),
    h("p", { class: "hint" }, "Saves what you changed in the session (e.g. packages you installed) as a private image you can " +
      "launch. Files in storage folders are not part of it."),
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "commit-name" }, "Image name"), name),
      h("div", { class: "field" }, h("label", { for: "commit-tag" }, "Tag"), tag)),
    progress, problem, h("div", { class: "actions" }, close, submit));
  const dialog = h("dialog", { id: "commit-dialog", "aria-labelledby": "commit-title" }, form);
  document.body.append(dialog);
  dialog.addEventListener("close", () => dialog.remove());
  dialog.showModal();

  async function go(event) {
    event.preventDefault();
    problem.textContent = "";
    submit.disabled = true;
    clear(progress, h("progress", { "aria-label": "Committing" }), " Committing… this takes from seconds to a minute.");
    const wanted = name.value.trim() + (tag.value.trim() ? ":" + tag.value.trim() : "");
    try {
      const made = await post("/sessions/" + encodeURIComponent(session.id) + "/commit", { name: wanted });
      clear(progress, h("p", null, "Saved as ", h("strong", { id: "commit-image" }, made.image.name),
        made.image.title ? " (" + made.image.title + ")" : "", ". Launch it from Launch sessions."));
      submit.hidden = true;
      close.textContent = "Close";
    } catch (err) {
      clear(progress);
      problem.textContent = err.message;
      submit.disabled = false;
    }
  }
}
