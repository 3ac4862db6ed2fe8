// The console's only way to the backend: the same /v1 API every client uses, with the user's key.
// The key lives in sessionStorage (this tab only, gone when it closes): never a cookie, never a URL.

const KEY_NAME = "gpucloud.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME);
}

export function saveApiKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function forgetApiKey() {
  sessionStorage.removeItem(KEY_NAME);
}

// An API error: the problem document's detail, code, field and request id, for the user to quote.
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || null;
    this.field = problem.field || null;
    this.requestId = problem.request_id || null;
  }
}

let onUnauthorized = () => {};

// What to do when the key stops working (revoked, or typed wrong): the app sends the user to login.
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

// One request; `key` overrides the stored key (the login page checks a key before saving it).
export async function request(method, path, { body, params, key } = {}) {
  const headers = { Accept: "application/json" };
  const token = key || apiKey();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method === "POST") headers["Idempotency-Key"] = crypto.randomUUID();
  const response = await fetch(`/v1${path}${query(params)}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => ({ detail: `HTTP ${response.status}` }));
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401 && !key) onUnauthorized(error);
    throw error;
  }
  return data;
}

export const get = (path, params) => request("GET", path, { params });
export const post = (path, body) => request("POST", path, { body });
export const patch = (path, body) => request("PATCH", path, { body });
export const del = (path) => request("DELETE", path);

// Every item of a paginated list (follows next_page_token; stops at `limit` items).
export async function listAll(path, params = {}, limit = 2000) {
  const items = [];
  let token = null;
  do {
    const page = await get(path, { ...params, page_size: 200, page_token: token });
    items.push(...page.items);
    token = page.next_page_token;
  } while (token && items.length < limit);
  return items;
}

// Answers can arrive out of order (a filter picked while an auto-refresh is in flight): a view asks
// through one `latest()` and drops any answer that is not its newest request's.
export const STALE = Symbol("stale");

export function latest() {
  let counter = 0;
  return async (pending) => {
    const mine = ++counter;
    const value = await pending;
    return mine === counter ? value : STALE;
  };
}
