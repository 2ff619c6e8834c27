// Curves: any logged metric against step, rollouts or wall time; several runs overlaid;
// smoothing; evaluations marked; new points appear as the runs log them.
import { useState } from "./vendor/htm-preact-standalone.module.js";
import { Chart, go, html, Loading, PALETTE, smooth, useMetrics } from "./common.js";

// Shown first when logged: what a person checks before anything else.
const PINNED = [
  "reward/mean", "success/mean", "eval/accuracy", "loss", "kl", "entropy",
  "frac_reward_zero_std", "completions/mean_length", "grad_norm", "learning_rate",
  "metric_after", "metric_before", "train_hard", "train_soft", "budget", "applied",
];
const NOT_METRICS = new Set(["step", "time"]);
const AXES = {
  step: "step",
  rollouts: "rollouts",
  time: "wall time (s)",
};

// x of each row on the chosen axis; null when the row cannot be placed on it.
function xs(rows, axis) {
  if (axis === "step") return rows.map((r) => r.step);
  if (axis === "time") {
    const t0 = rows.find((r) => typeof r.time === "number")?.time;
    return rows.map((r) => (typeof r.time === "number" && t0 !== undefined ? r.time - t0 : null));
  }
  const byStep = new Map([[0, 0]]);
  for (const r of rows) if (typeof r["sampling/rollouts_total"] === "number") byStep.set(r.step, r["sampling/rollouts_total"]);
  return rows.map((r) => byStep.get(r.step) ?? null);
}

function metricKeys(allRows) {
  const keys = new Set();
  for (const rows of allRows) for (const r of rows) for (const [k, v] of Object.entries(r)) {
    if (!NOT_METRICS.has(k) && typeof v === "number") keys.add(k);
  }
  return [...keys].sort();
}

function sections(keys) {
  const pinned = PINNED.filter((k) => keys.includes(k));
  const groups = new Map();
  for (const k of keys) {
    if (pinned.includes(k)) continue;
    const head = k.includes("/") ? k.split("/")[0] : "other";
    if (!groups.has(head)) groups.set(head, []);
    groups.get(head).push(k);
  }
  return { pinned, groups: [...groups.entries()] };
}

export function CurvesPage({ params }) {
  const runs = (params.runs || params.run || "").split(",").filter(Boolean);
  const axis = AXES[params.x] ? params.x : "step";
  const weight = Math.min(0.99, Math.max(0, Number(params.smooth ?? 0.6)));
  const [filter, setFilter] = useState("");
  const [open, setOpen] = useState({});
  const { rows, error } = useMetrics(runs);
  if (!runs.length) return html`<p class="empty">Pick runs on the <a href="#/">runs page</a>.</p>`;
  const all = runs.map((r) => rows[r]);
  if (all.every((r) => r.length === 0)) return html`<${Loading} error=${error} what="Waiting for metrics…" />`;

  const keys = metricKeys(all).filter((k) => !filter || k.toLowerCase().includes(filter.toLowerCase()));
  const { pinned, groups } = sections(keys);
  const set = (change) => go("curves", { runs: runs.join(","), x: axis, smooth: weight, ...change });
  const evalMarks = [...new Set(runs.flatMap((run, i) => {
    const x = xs(rows[run], axis);
    return rows[run].map((r, j) => (Object.keys(r).some((k) => k.startsWith("eval/")) ? x[j] : null)).filter((v) => v !== null);
  }))];

  const chart = (key) => {
    const series = [];
    runs.forEach((run, i) => {
      const color = PALETTE[i % PALETTE.length];
      const have = rows[run].filter((r) => typeof r[key] === "number");
      if (!have.length) return;
      const x = xs(have, axis);
      const y = have.map((r) => r[key]);
      const sparse = key.startsWith("eval") || have.length < 3;
      const label = runs.length > 1 ? run : key;
      if (sparse || !weight) {
        series.push({ label, color, x, y, points: sparse ? true : false, width: sparse ? 1.2 : 1.6 });
      } else {
        series.push({ label: `${label} (raw)`, color: color + "44", x, y, width: 1 });
        series.push({ label, color, x, y: smooth(y, weight), width: 1.8 });
      }
    });
    return html`<${Chart} key=${key} title=${key} series=${series} marks=${key.startsWith("eval") ? [] : evalMarks} xLabel=${AXES[axis]} legend=${false} />`;
  };

  return html`<div class="toolbar">
      <div class="legend">${runs.map((run, i) => html`<span><span class="swatch" style=${{ background: PALETTE[i % PALETTE.length] }}></span>${run}</span>`)}</div>
      <span class="grow"></span>
      <label>x axis <select id="axis" value=${axis} onChange=${(e) => set({ x: e.target.value })}>
        ${Object.entries(AXES).map(([k, label]) => html`<option value=${k}>${label}</option>`)}
      </select></label>
      <label>smoothing <input type="range" min="0" max="0.99" step="0.01" value=${weight}
        onChange=${(e) => set({ smooth: e.target.value })} /> <span class="num">${weight.toFixed(2)}</span></label>
      <label>filter <input type="search" placeholder="metric name" value=${filter} onInput=${(e) => setFilter(e.target.value)} /></label>
    </div>
    ${error && html`<p class="error">${error}</p>`}
    <p class="muted small">Dashed vertical lines: held-out evaluations. ${weight ? "Faint lines: raw values; solid: smoothed (exponential moving average)." : ""}</p>
    ${pinned.length > 0 && html`<div class="charts" id="pinned">${pinned.map(chart)}</div>`}
    ${groups.map(([head, ks]) => html`<details class="section" open=${!!open[head] || !!filter}
        onToggle=${(e) => setOpen({ ...open, [head]: e.target.open })}>
      <summary>${head} <span class="muted">(${ks.length})</span></summary>
      ${(open[head] || filter) && html`<div class="charts">${ks.map(chart)}</div>`}
    </details>`)}`;
}
