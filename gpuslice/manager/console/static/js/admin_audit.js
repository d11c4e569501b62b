// Admins: the audit log, newest first, with the CLI's filters (who, action or a prefix with *,
// target TYPE:ID, outcome, a time window), and the hash chain's check. The API refuses all of
// this to other users; the console only hides the link.
import { get, query } from "./api.js";
import { clear, errorLine, h, when } from "./dom.js";

const FIELDS = [["user", "User"], ["action", "Action (auth.*)"], ["target", "Target (session:ID)"]];

export async function auditTab(body) {
  const inputs = Object.fromEntries(FIELDS.map(([key, label]) => [key, h("input", { id: "audit-" + key, "aria-label": label, placeholder: label })]));
  inputs.outcome = h("select", { id: "audit-outcome", "aria-label": "Outcome" },
    ["", "success", "failure", "denied"].map((o) => h("option", { value: o }, o || "any outcome")));
  inputs.since = h("input", { id: "audit-since", type: "datetime-local", "aria-label": "Since" });
  inputs.until = h("input", { id: "audit-until", type: "datetime-local", "aria-label": "Until" });
  const rows = h("div", { id: "audit-rows" });
  const chain = h("p", { id: "audit-chain", "aria-live": "polite" });
  const err = errorLine("err-audit");
  async function show() {
    err.textContent = "";
    const params = Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value.trim()]));
    for (const key of ["since", "until"]) if (params[key]) params[key] = new Date(params[key]).toISOString();
    try {
      const page = await get("/audit" + query({ ...params, limit: 200 }));
      clear(rows, table(page.items));
    } catch (e) {
      err.textContent = e.message;
    }
  }
  async function verify() {
    try {
      const v = await get("/audit/verify");
      chain.className = v.intact ? "muted" : "error";
      chain.textContent = v.intact ? "Chain intact: " + v.sealed_through + " rows sealed, " + v.unsealed + " not sealed yet."
        : "Chain broken at position " + v.first_break + ": " + v.problem;
    } catch (e) {
      chain.className = "error";
      chain.textContent = e.message;
    }
  }
  const form = h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); show(); } },
    Object.values(inputs), h("button", { type: "submit" }, "Filter"),
    h("button", { type: "button", onclick: verify }, "Check the chain"));
  clear(body, form, err, chain, rows);
  await show();
}

function table(items) {
  if (!items.length) return h("p", { class: "muted" }, "No audit row matches.");
  return h("div", { class: "table-wrap" }, h("table", { id: "audit-table" },
    h("thead", null, h("tr", null, ["Time", "Actor", "Action", "Outcome", "Target", "From", "Request"].map((x) => h("th", null, x)))),
    h("tbody", null, items.map((e) => h("tr", { dataset: { action: e.action } },
      h("td", null, when(e.at)), h("td", null, e.actor_name || e.actor_id || e.actor_type),
      h("td", { class: "action" }, e.action),
      h("td", { class: "outcome" }, e.outcome + (e.reason ? " (" + e.reason + ")" : "")),
      h("td", null, e.target_id ? e.target_type + ":" + e.target_id : "–"), h("td", null, e.source_ip || "–"),
      h("td", null, e.request_id || "–"))))));
}
