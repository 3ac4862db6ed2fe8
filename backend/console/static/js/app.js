// The console's entry: a hash router (#/clusters, #/clusters/ID/nodes, ...), the theme toggle and
// sign-in state. Each page module exports render(main, params) and may return a cleanup function
// (stops its timers) that runs before the next page is drawn.

import { apiKey, forgetApiKey, whenUnauthorized } from "./api.js";
import { clear, errorBox, h, notify } from "./dom.js";
import * as billing from "./pages/billing.js";
import * as budgets from "./pages/budgets.js";
import * as clusterDetail from "./pages/cluster.js";
import * as clusters from "./pages/clusters.js";
import * as hostPools from "./pages/host-pools.js";
import * as login from "./pages/login.js";
import * as reservations from "./pages/reservations.js";
import * as reservedIps from "./pages/reserved-ips.js";
import * as securityGroups from "./pages/security-groups.js";
import * as sshKeys from "./pages/ssh-keys.js";
import * as volumes from "./pages/volumes.js";

const ROUTES = [
  [/^\/login$/, login, "login"],
  [/^\/clusters$/, clusters, "clusters"],
  [/^\/clusters\/([a-z0-9_]+)(?:\/([a-z-]+))?$/, clusterDetail, "clusters"],
  [/^\/volumes$/, volumes, "volumes"],
  [/^\/ssh-keys$/, sshKeys, "ssh-keys"],
  [/^\/security-groups$/, securityGroups, "security-groups"],
  [/^\/reserved-ips$/, reservedIps, "reserved-ips"],
  [/^\/reservations$/, reservations, "reservations"],
  [/^\/host-pools(?:\/([a-z0-9_]+))?$/, hostPools, "host-pools"],
  [/^\/budgets$/, budgets, "budgets"],
  [/^\/billing$/, billing, "billing"],
];

let cleanup = null;
let drawn = null;
let generation = 0; // counts navigations: a page that finishes loading after the next one started stops

function route() {
  const path = location.hash.replace(/^#/, "") || "/clusters";
  if (!apiKey() && path !== "/login") {
    location.replace("#/login");
    return;
  }
  const found = ROUTES.map(([pattern, page, section]) => [path.match(pattern), page, section]).find(([m]) => m);
  const main = document.getElementById("main");
  if (cleanup) cleanup();
  cleanup = null;
  showChrome(found ? found[2] : null);
  if (!found) {
    clear(main, h("h1", null, "Not found"), h("p", null, "No page at ", h("code", null, path), ". ",
      h("a", { href: "#/clusters" }, "Back to clusters"), "."));
    return;
  }
  const [match, page] = found;
  const samePage = drawn && drawn.page === page && drawn.params[0] === match[1];
  drawn = { page, params: match.slice(1) };
  const mine = ++generation;
  try {
    const result = page.render(main, match.slice(1), { samePage });
    Promise.resolve(result).then((fn) => {
      if (typeof fn !== "function") return;
      if (mine === generation) cleanup = fn;
      else fn(); // the user moved on while this page loaded: stop its timers at once
    }).catch((error) => {
      if (mine === generation) clear(main, errorBox(error));
    });
  } catch (error) {
    clear(main, errorBox(error));
  }
  if (!samePage) main.focus({ preventScroll: true });
}

function showChrome(section) {
  const signedIn = Boolean(apiKey());
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("sign-out").hidden = !signedIn;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

// Light or dark: the system's preference until the user picks one (remembered in localStorage; the
// choice is not a secret, unlike the key).
function setupTheme() {
  const button = document.getElementById("theme-toggle");
  const system = window.matchMedia("(prefers-color-scheme: dark)");
  const apply = () => {
    const chosen = localStorage.getItem("gpucloud.theme");
    const dark = chosen ? chosen === "dark" : system.matches;
    document.documentElement.dataset.theme = dark ? "dark" : "light";
    button.setAttribute("aria-pressed", String(dark));
    button.textContent = dark ? "Light theme" : "Dark theme";
  };
  button.addEventListener("click", () => {
    localStorage.setItem("gpucloud.theme", document.documentElement.dataset.theme === "dark" ? "light" : "dark");
    apply();
  });
  system.addEventListener("change", apply);
  apply();
}

function start() {
  setupTheme();
  document.getElementById("sign-out").addEventListener("click", () => {
    forgetApiKey();
    drawn = null;
    location.hash = "#/login";
  });
  whenUnauthorized(() => {
    forgetApiKey();
    drawn = null;
    notify("The API key was refused (revoked or expired): sign in again.", "error");
    location.hash = "#/login";
  });
  window.addEventListener("hashchange", route);
  route();
  // Seen by start-watch.js, which reloads a tab whose modules never started (once per tab).
  document.documentElement.setAttribute("data-console-started", "");
  sessionStorage.removeItem("gpucloud.consoleReloaded");
}

start();
