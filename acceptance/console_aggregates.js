// Run by test_acc_console_aggregates through WebDriver in the console's page: imports the console's own
// modules as served and hands back what they compute from fixed API-shaped inputs.
const done = arguments[arguments.length - 1];
const base = "/console/static/js/";
const modules = ["tabs/overview.js", "pages/billing.js", "tabs/monitoring.js", "chart.js", "api.js"];
Promise.all(modules.map((m) => import(base + m)))
  .then(async ([overview, billing, monitoring, chart, api]) => {
    const gpu = (util, used) => ({ utilization_pct: util, memory_used_mib: used, memory_total_mib: 1000 });
    const nodes = { items: [
      { orchestrator_state: "IDLE", gpus: [gpu(50, 100), gpu(null, 300)] },
      { orchestrator_state: "ALLOCATED", gpus: [gpu(100, 600)] },
      { orchestrator_state: "DOWN", gpus: null },
    ] };
    const jobs = { items: [], counts: { running: 1, pending: 2 },
                   partitions: [{ gpus_total: 16, gpus_available: 10 }] };
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
    done({
      answers: [answers[0] === api.STALE ? "stale" : answers[0], answers[1]],
      summary: overview.summarise({ num_gpus: 16 }, nodes, jobs),
      days: usage.byDay.length, lastDays: usage.byDay.slice(-2), byCluster: usage.byCluster,
      path: figure.querySelector("path.line").getAttribute("d"),
      windows: [2, 10, 180].map((m) => monitoring.defaultWindow(ago(m), now.getTime())),
    });
  })
  .catch((error) => done({ error: String(error) }));
