// Notifications (#/notifications): your channels (a webhook or a Slack-compatible webhook,
// with the events each sends), a Test button showing the receiver's answer, and the recent
// deliveries with their status and next attempt. E-mail channels are set by admins (CLI).
import { api, del, get, post } from "./api.js";
import { add, clear, errorLine, h, when } from "./dom.js";

const EVENTS = ["started", "finished", "failed", "preempted", "cancelled", "time_limit_warning",
  "idle_warning", "pending_long"];
const DEFAULT = new Set(EVENTS.filter((e) => e !== "pending_long"));

export function notifyPage(main) {
  const body = h("div", { id: "notify-body" });
  add(main, h("h1", null, "Notifications"), body);
  show(body).catch((err) => clear(body, h("p", { class: "error" }, err.message)));
  return { stop() {} };
}

async function show(body) {
  const [channels, deliveries] = await Promise.all([get("/notifications/channels"), get("/notifications/deliveries?limit=20")]);
  const kind = h("select", { id: "notify-kind", "aria-label": "Kind" },
    h("option", { value: "webhook" }, "Webhook (signed JSON)"), h("option", { value: "slack" }, "Slack-compatible webhook"));
  const target = h("input", { type: "url", id: "notify-url", "aria-label": "URL", placeholder: "https://…" });
  const after = h("input", { type: "number", id: "notify-pending-after", min: "1", value: "30", "aria-label": "Pending after (minutes)" });
  const boxes = EVENTS.map((e) => h("input", { type: "checkbox", value: e, id: "notify-ev-" + e, checked: DEFAULT.has(e) }));
  const secret = h("div", { id: "notify-secret" });
  const problem = errorLine("err-notify");
  clear(body,
    h("form", { class: "bar", onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = "";
      try {
        const made = await post("/notifications/channels", { kind: kind.value, target: target.value.trim(),
          events: boxes.filter((b) => b.checked).map((b) => b.value), pending_after: Math.round(Number(after.value) * 60) });
        await show(body);
        if (made.secret) {
          clear(document.getElementById("notify-secret"), h("p", null, "Signing secret (shown once; check each POST's webhook-signature with it): "),
            h("pre", { class: "logs", id: "notify-secret-value" }, made.secret));
        }
      } catch (err) {
        problem.textContent = err.message;
      }
    } },
    h("label", null, "Kind", kind), h("label", null, "URL", target),
    h("fieldset", { class: "choices" }, h("legend", null, "Events"), EVENTS.map((e, i) => h("label", null, boxes[i], e.replace(/_/g, " ")))),
    h("label", null, "Pending after (min)", after), h("button", { type: "submit" }, "Add channel"), problem),
    secret,
    h("div", { class: "table-wrap" }, h("table", { id: "channels" },
      h("thead", null, h("tr", null, ["Name", "Kind", "For", "Target", "Events", "State", "Test", ""].map((x) => h("th", null, x)))),
      h("tbody", null, channels.map((c) => channelRow(body, c))))),
    h("h2", null, "Recent deliveries"),
    deliveries.length === 0 ? h("p", { class: "muted" }, "Nothing sent yet.") : h("div", { class: "table-wrap" }, h("table", { id: "deliveries" },
      h("thead", null, h("tr", null, ["Time", "Event", "Session", "Channel", "Status", "Attempts", "Answer", "Error", "Next attempt"].map((x) => h("th", null, x)))),
      h("tbody", null, deliveries.map((d) => h("tr", null, h("td", null, when(d.created_at)), h("td", null, d.event.replace(/^session\./, "")),
        h("td", null, d.session || "–"), h("td", null, d.channel), h("td", { class: "status" }, d.status), h("td", null, String(d.attempts)),
        h("td", null, d.last_status || "–"), h("td", null, d.last_error || "–"), h("td", null, d.next_attempt_at ? when(d.next_attempt_at) : "–")))))));
}

function channelRow(body, c) {
  const result = h("span", { class: "test-result" });
  const name = c.name || c.kind;
  return h("tr", { "data-id": c.id }, h("td", null, name), h("td", null, c.kind), h("td", null, c.owner || "project " + c.project),
    h("td", null, c.target), h("td", null, c.events.map((e) => e.replace(/^session\./, "")).join(", ")),
    h("td", { class: "state" }, c.enabled ? "enabled" : "disabled: " + c.disabled_reason),
    h("td", null, h("button", { type: "button", "aria-label": "Test " + name, onclick: async () => {
      result.textContent = "sending…";
      try {
        const r = await post("/notifications/channels/" + c.id + "/test");
        result.textContent = r.ok ? "delivered: " + r.status : "not delivered: " + r.status + (r.error ? ": " + r.error : "");
      } catch (err) {
        result.textContent = err.message;
      }
    } }, "Test"), " ", result),
    h("td", null, c.enabled ? null : h("button", { type: "button", onclick: async () => {
      await api("PATCH", "/notifications/channels/" + c.id, { enabled: true });
      await show(body);
    } }, "Enable"), h("button", { type: "button", class: "danger", "aria-label": "Remove " + name, onclick: async () => {
      await del("/notifications/channels/" + c.id);
      await show(body);
    } }, "Remove")));
}
