// Run by test_acc_console_aggregates through WebDriver in the console's page: imports the console's own
// modules as served and hands back what they compute from fixed API-shaped inputs.
const done = arguments[arguments.length - 1];
const keyLine = arguments[0]; // an OpenSSH public-key line whose fingerprint the test computed itself
const base = "/console/static/js/";
const modules = ["tabs/overview.js", "pages/billing.js", "tabs/monitoring.js", "chart.js", "api.js", "fingerprint.js", "dom.js"];
Promise.all(modules.map((m) => import(base + m)))
  .then(async ([overview, billing, monitoring, chart, api, fingerprint, dom]) => {
    const gpu = (util, used) => ({ utilization_pct: util, memory_used_mib: used, memory_total_mib: 1000 });
    const nodes = { items: [
      { orchestrator_state: "IDLE", gpus: [gpu(50, 100), gpu(null, 300)] },
      { orchestrator_state: "ALLOCATED", gpus: [gpu(100, 600)] },
      { orchestrator_state: "DOWN", gpus: null },
    ] };
    // 6 GPUs allocated: the running job's, not the partition's 16 less 10 available (a DOWN node's GPUs
    // are unavailable, not allocated).
    const jobs = { items: [{ state: "running", gpus: 6 }, { state: "pending", gpus: 8 }],
                   counts: { running: 1, pending: 2 }, partitions: [{ gpus_total: 16, gpus_available: 2 }] };
    const now = new Date("2026-11-26T12:00:00Z");
    const line = (day, cluster, usd) => ({ period_start: `${day}T10:00:00Z`, cluster_id: cluster,
                                           resource_type: cluster ? "cluster" : "volume", amount_usd: usd });
    const usage = billing.usageTotals([line("2026-11-26", "cls_a", "1.50"), line("2026-11-26", "cls_b", "4"),
      line("2026-11-25", "cls_a", "2.25"), line("2026-11-25", null, "0.25"), line("2026-10-01", "cls_a", "9")], now);
    const figure = chart.lineChart({ title: "t", timestamps: ["2026-11-26T00:00:00Z", "2026-11-26T00:01:00Z",
      "2026-11-26T00:02:00Z", "2026-11-26T00:03:00Z"], series: [{ name: "n", values: [1, null, 2, 3] }], yMax: 100 });
    const ago = (minutes) => new Date(now - minutes * 60e3).toISOString();
    // Out of order: the older request answers last and is dropped.
    const newest = api.latest();
    let answerOld;
    const old = newest(new Promise((resolve) => { answerOld = resolve; }));
    const fresh = newest(Promise.resolve("new"));
    answerOld("old");
    const answers = await Promise.all([old, fresh]);
    const ticks = (values, yMax, yFormat) => [...chart.lineChart({ title: "t", yMax, yFormat,
      timestamps: values.map((_, i) => `2026-11-26T00:0${i}:00Z`), series: [{ name: "n", values }] })
      .querySelectorAll("text.y-tick")].map((t) => t.textContent);
    // Two cards side by side in 340 px (160 px each): the figure must fit its card.
    const row = dom.h("div", { class: "cards" }, dom.card("Charged", "$190,883.51"), dom.card("Hourly cost", "$12,345.67"));
    row.style.width = "340px";
    document.body.append(row);
    const wideFigure = [...row.children].map((c) => ({ width: c.clientWidth, content: c.scrollWidth }));
    row.remove();
    done({
      wideFigure: { fits: wideFigure.every((c) => c.content <= c.width && c.width < 200), cards: wideFigure },
      fingerprint: await fingerprint.sshFingerprint(keyLine),
      notAKey: await fingerprint.sshFingerprint("ssh-ed25519 not*base64"),
      zeroTicks: ticks([0, 0, 0], undefined, (v, d = 0) => v.toFixed(d)),
      percentTicks: ticks([0, 0], 100, (v, d = 0) => `${v.toFixed(d)}%`),
      smallTicks: ticks([0.1, 0.3], undefined, (v, d = 1) => v.toFixed(d)),
      answers: [answers[0] === api.STALE ? "stale" : answers[0], answers[1]],
      summary: overview.summarise({ num_gpus: 16 }, nodes, jobs),
      days: usage.byDay.length, lastDays: usage.byDay.slice(-2), byCluster: usage.byCluster,
      path: figure.querySelector("path.line").getAttribute("d"),
      windows: [2, 10, 180].map((m) => monitoring.defaultWindow(ago(m), now.getTime())),
    });
  })
  .catch((error) => done({ error: String(error) }));
