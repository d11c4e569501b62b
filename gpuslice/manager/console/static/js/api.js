// The console's only way to the manager: /api/v1, as the CLI and the SDK use it, with the
// login cookie the browser sends by itself (and the Origin header it adds to writes, which the
// manager checks). Errors are the API's own {code, message, field}.

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || "the manager answered " + status);
    this.status = status;
    this.code = (body && body.code) || "error";
    this.field = (body && body.field) || null;
  }
}

export function toLogin() {
  const next = location.pathname + location.hash;
  location.assign("/login?next=" + encodeURIComponent(next));
}

export async function api(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let answer;
  try {
    answer = await fetch("/api/v1" + path, init);
  } catch (err) {
    throw new ApiError(0, { code: "unreachable", message: "the manager does not answer" });
  }
  if (answer.status === 401) {
    toLogin();
    throw new ApiError(401, { code: "unauthorized", message: "logged out" });
  }
  if (answer.status === 204) return null;
  const data = await answer.json().catch(() => null);
  if (!answer.ok) throw new ApiError(answer.status, data);
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body === undefined ? {} : body);
export const del = (path) => api("DELETE", path);

export function query(params) {
  const out = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    for (const item of [].concat(value)) {
      if (item !== undefined && item !== null && item !== "") out.append(key, item);
    }
  }
  const text = out.toString();
  return text ? "?" + text : "";
}

// Every page of a listing: ``onPage(items so far, total, done)`` sees each page as it comes
// (the first one is painted before the others are asked for).
export async function pages(path, params, onPage) {
  const items = [];
  let offset = 0;
  for (;;) {
    // a short first page is on screen soonest; the rest come in the API's largest pages
    const page = await get(path + query({ ...params, limit: offset ? 500 : 100, offset }));
    items.push(...page.items);
    offset += page.items.length;
    const done = page.items.length === 0 || offset >= page.total;
    if (onPage) onPage(items, page.total, done);
    if (done) return items;
  }
}

let me = null;
export async function whoami() {
  if (!me) me = await get("/auth/me");
  return me;
}
