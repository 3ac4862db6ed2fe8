// Building the page without ever parsing data as HTML: every string becomes a text node or an
// attribute value, so a cluster label or a log line holding `<script>` is shown, never run.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function assign(element, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
}

// h("a", {href: "#/x", class: "link"}, "text", child...) -> an element.
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  assign(element, attrs);
  append(element, children);
  return element;
}

export function svg(tag, attrs, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  assign(element, attrs);
  append(element, children);
  return element;
}

export function clear(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

export const fmt = {
  int: (n) => (n === null || n === undefined ? "—" : Math.round(n).toLocaleString("en-US")),
  pct: (n) => (n === null || n === undefined ? "—" : `${Math.round(n)}%`),
  usd: (n) =>
    n === null || n === undefined || n === ""
      ? "—"
      : Number(n).toLocaleString("en-US", { style: "currency", currency: "USD", minimumFractionDigits: 2 }),
  gib: (mib) => (mib === null || mib === undefined ? "—" : `${(mib / 1024).toFixed(mib >= 10240 ? 0 : 1)} GiB`),
  time: (iso) => (iso ? new Date(iso).toLocaleString("en-GB", { hour12: false }) : "—"),
  duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    const d = Math.floor(seconds / 86400);
    const hms = [Math.floor((seconds % 86400) / 3600), Math.floor((seconds % 3600) / 60), seconds % 60]
      .map((n) => String(n).padStart(2, "0"))
      .join(":");
    return d ? `${d}-${hms}` : hms;
  },
};

// A status pill in the lifecycle's colours (PENDING ... RUNNING ... FAILED) or a health state's.
export function badge(value, title) {
  const text = value || "—";
  return h("span", { class: `badge badge-${String(text).toLowerCase().replace(/[^a-z0-9]+/g, "-")}`, title }, text);
}

export function card(label, value, detail) {
  return h("div", { class: "card" }, h("div", { class: "card-label" }, label), h("div", { class: "card-value" }, value),
    detail ? h("div", { class: "card-detail" }, detail) : null);
}

export function section(title, ...children) {
  return h("section", { class: "panel" }, h("h2", null, title), ...children);
}

// A table from column definitions {label, value(row) -> Node|string, numeric?, nowrap?}; nowrap keeps
// a short identifier (a region, an address, an id) on one line instead of breaking it at a hyphen.
export function table(columns, rows, { caption, empty = "Nothing here yet." } = {}) {
  if (!rows.length) return h("p", { class: "muted empty" }, empty);
  return h("div", { class: "table-wrap" },
    h("table", null,
      caption ? h("caption", { class: "visually-hidden" }, caption) : null,
      h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col", class: c.numeric ? "num" : null }, c.label)))),
      h("tbody", null, rows.map((row) =>
        h("tr", null, columns.map((c) => h("td", { class: cellClass(c), "data-label": c.label }, c.value(row))))))));
}

function cellClass(column) {
  return [column.numeric ? "num" : null, column.nowrap ? "nowrap" : null].filter(Boolean).join(" ") || null;
}

// A row of filter tabs (role=tablist); `onSelect(value)` runs on click and arrow keys.
export function filterTabs(label, options, selected, onSelect) {
  const list = h("div", { class: "filter-tabs", role: "tablist", "aria-label": label });
  const buttons = options.map(([value, text]) =>
    h("button", {
      type: "button", role: "tab", class: "filter-tab", "aria-selected": String(value === selected),
      tabindex: value === selected ? "0" : "-1", dataset: { value }, onclick: () => onSelect(value),
    }, text));
  list.addEventListener("keydown", (event) => arrowKeys(event, buttons));
  append(list, buttons);
  return list;
}

// Left/right arrows, Home and End move between tabs (WAI-ARIA tabs pattern).
export function arrowKeys(event, buttons) {
  const index = buttons.indexOf(document.activeElement);
  if (index < 0) return;
  const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: buttons.length - 1 };
  if (!(event.key in moves)) return;
  event.preventDefault();
  const next = buttons[(moves[event.key] + buttons.length) % buttons.length];
  next.focus();
  next.click();
}

export function errorBox(error) {
  const parts = [error.message || String(error)];
  if (error.requestId) parts.push(` (request ${error.requestId})`);
  return h("div", { class: "error", role: "alert" }, parts.join(""));
}

let noticeTimer = null;

export function notify(text, kind = "ok") {
  const box = document.getElementById("notice");
  clear(box, h("div", { class: `notice-${kind}` }, text));
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => box.replaceChildren(), 6000);
}

// The shared confirmation dialog; resolves true when the user confirms.
export function confirmAction(title, text, okLabel = "Confirm") {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

export function copyButton(text, label = "Copy") {
  return h("button", {
    type: "button", class: "button small ghost", "aria-label": `${label}: ${text}`,
    onclick: async (event) => {
      try {
        await navigator.clipboard.writeText(text);
        event.target.textContent = "Copied";
      } catch {
        event.target.textContent = "Select and copy";
      }
    },
  }, label);
}

// A dialog built for one question (scale to N, type the name to delete): `fields` are labelled form
// controls, `check()` returns a sentence saying what to fix (the dialog stays open and shows it) or
// null. Resolves true on confirm, false on cancel or Escape; the dialog is removed when it closes.
export function formDialog({ id, title, text, fields, okLabel, danger = false, check = () => null }) {
  const problem = h("p", { class: "dialog-error", id: `${id}-error`, role: "alert", hidden: true });
  const ok = h("button", { type: "submit", value: "confirm", class: `button ${danger ? "danger" : "primary"}`, id: `${id}-ok` }, okLabel);
  const cancel = h("button", { type: "submit", value: "cancel", class: "button ghost", id: `${id}-cancel`, formnovalidate: true }, "Cancel");
  const form = h("form", { method: "dialog", class: "dialog-body" },
    h("h2", { id: `${id}-title` }, title), text ? h("p", null, text) : null,
    h("div", { class: "dialog-fields" }, fields), problem, h("div", { class: "dialog-actions" }, cancel, ok));
  const dialog = h("dialog", { id, "aria-labelledby": `${id}-title` }, form);
  form.addEventListener("submit", (event) => {
    if (event.submitter !== ok) return;
    const refusal = check();
    if (!refusal) return;
    event.preventDefault();
    problem.textContent = refusal;
    problem.hidden = false;
  });
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "confirm");
    }, { once: true });
    dialog.showModal();
    (form.querySelector("input, select, textarea") || cancel).focus();
  });
}

// A labelled form control for formDialog: {id, label, control, help}.
export function field(label, control, help) {
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control,
    help ? h("p", { class: "muted small" }, help) : null);
}

// A progress bar (a native <progress>, so no inline style is needed under the CSP) with its reading.
export function meter(value, max, text) {
  return h("div", { class: "meter" },
    h("progress", { value: String(Math.min(value, max)), max: String(max), "aria-label": text }), h("span", { class: "small" }, text));
}
