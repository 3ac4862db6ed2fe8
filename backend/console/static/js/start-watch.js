// A classic script loaded before the console's modules and not deferred, so it runs even when they never
// do: if the app has not started START_SECONDS after the page was read (seen in CI: a tab whose module
// requests stalled and never reached the server while the others were answered at once), reload once,
// as a user would; if it still does not start, say so instead of "Loading the console…" for ever.
// app.js marks the start (data-console-started on <html>) and forgets the reload.
(function () {
  "use strict";
  var START_SECONDS = 20;
  var RELOADED = "gpucloud.consoleReloaded";

  function started() {
    return document.documentElement.hasAttribute("data-console-started");
  }

  function giveUp() {
    var main = document.getElementById("main");
    if (!main) return;
    var box = document.createElement("div");
    box.className = "error";
    box.setAttribute("role", "alert");
    box.textContent = "The console did not start: its scripts did not all load, twice. Reload the page; " +
      "if it keeps happening, check what stands between this browser and the backend (a proxy or " +
      "firewall in front of /console/static/).";
    main.textContent = "";
    main.appendChild(box);
  }

  // Timed from here, not from the page's load event: that waits for the modules, which may never come.
  setTimeout(function () {
    if (started()) return;
    if (!sessionStorage.getItem(RELOADED)) {
      sessionStorage.setItem(RELOADED, "1");
      location.reload();
      return;
    }
    sessionStorage.removeItem(RELOADED);
    giveUp();
  }, START_SECONDS * 1000);
})();
