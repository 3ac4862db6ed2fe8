// Sign in with an API key: checked against the API, then kept in sessionStorage for this tab only.

import { request, saveApiKey } from "../api.js";
import { clear, errorBox, h } from "../dom.js";

export function render(main) {
  const input = h("input", {
    id: "api-key", name: "api-key", type: "password", autocomplete: "off", spellcheck: "false",
    required: true, placeholder: "gpc_…", "aria-describedby": "api-key-help",
  });
  const status = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "login-form", novalidate: true },
    h("label", { for: "api-key" }, "API key"), input,
    h("p", { id: "api-key-help", class: "muted" },
      "Kept in this browser tab's session storage only, and sent as a bearer token to the API. ",
      "Create one with ", h("code", null, "gpucloud-backend create-api-key --project NAME"), "."),
    h("button", { type: "submit", class: "button primary", id: "sign-in" }, "Sign in"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) {
      clear(status, errorBox(new Error("Enter an API key (it starts with gpc_).")));
      input.focus();
      return;
    }
    clear(status, h("p", { class: "muted" }, "Checking the key…"));
    try {
      await request("GET", "/clusters", { params: { page_size: 1 }, key });
      saveApiKey(key);
      location.hash = "#/clusters";
    } catch (error) {
      clear(status, errorBox(error));
      input.focus();
    }
  });
  clear(main, h("div", { class: "login" }, h("h1", null, "Sign in to the gpucloud console"), form));
  input.focus();
}
