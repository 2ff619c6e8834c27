// Curriculum and normaliser: items per difficulty bin over time, the item difficulty histogram
// at a step, the bins' draw probabilities, each environment's share, the normaliser's
// running mean and standard deviation.
import { useEffect, useState } from "./vendor/htm-preact-standalone.module.js";
import { api, Chart, fmt, go, html, Loading, PALETTE, useMetrics } from "./common.js";

const BIN = /^curriculum\/(.+)\/bin_(\d+)_count$/;

function envsOf(rows) {
  const envs = new Map();
  for (const r of rows) for (const k of Object.keys(r)) {
    const m = BIN.exec(k);
    if (m) {
      if (!envs.has(m[1])) envs.set(m[1], new Set());
      envs.get(m[1]).add(Number(m[2]));
    }
  }
  return [...envs.entries()].map(([env, bins]) => [env, [...bins].sort((a, b) => a - b)]);
}

function series(rows, keys, labels) {
  return keys.map((key, i) => {
    const have = rows.filter((r) => typeof r[key] === "number");
    return { label: labels[i], color: PALETTE[i % PALETTE.length], x: have.map((r) => r.step), y: have.map((r) => r[key]) };
  }).filter((s) => s.y.length);
}

function Bars({ counts, labels, title }) {
  const top = Math.max(1, ...counts);
  return html`<div>
    <div class="small muted">${title}</div>
    <div class="hist">${counts.map((n) => html`<div class="col"><span class="n">${fmt(n)}</span><div class="b" style=${{ height: `${(100 * n) / top}%` }}></div></div>`)}</div>
    <div class="hist-axis">${labels.map((l) => html`<span>${l}</span>`)}</div>
  </div>`;
}

function Snapshot({ env, snap }) {
  if (!snap) return html`<p class="muted small">No snapshot for ${env} at this step.</p>`;
  const edges = snap.difficulty.edges;
  const labels = snap.difficulty.counts.map((_, i) => `${fmt(edges[i])}–${fmt(edges[i + 1])}`);
  return html`<div class="grid2">
    <${Bars} title=${`item difficulty (score EMA; higher = easier): ${snap.items - snap.unseen} scored, ${snap.unseen} unseen`}
      counts=${snap.difficulty.counts} labels=${labels} />
    <${Bars} title="probability of drawing from each bin next (bin 0 = easiest)"
      counts=${snap.bin_probabilities} labels=${snap.bin_probabilities.map((_, i) => `bin ${i}`)} />
  </div>`;
}

export function CurriculumPage({ params }) {
  const run = params.run;
  const { rows: byRun, error } = useMetrics([run]);
  const rows = byRun[run] || [];
  const [snap, setSnap] = useState(null);
  const step = params.step !== undefined ? Number(params.step) : undefined;
  useEffect(() => {
    api("curriculum", step === undefined ? { run } : { run, step }).then(setSnap, () => setSnap({ steps: [], curriculum: {} }));
  }, [run, step, rows.length]);
  if (!rows.length) return html`<${Loading} error=${error} what="Waiting for metrics…" />`;
  const envs = envsOf(rows);
  if (!envs.length) return html`<p class="empty">This run logged no curriculum statistics (skill runs sample without them in their metrics).</p>`;
  const steps = snap?.steps || [];
  return html`<div class="toolbar">
      <h2 class="grow">Curriculum and reward normaliser</h2>
      ${steps.length > 0 && html`<label>histogram at step <select id="snapshot-step" value=${snap?.step}
        onChange=${(e) => go("curriculum", { run, step: e.target.value })}>${steps.map((s) => html`<option value=${s}>${s}</option>`)}</select></label>`}
    </div>
    ${envs.map(([env, bins]) => {
      const norm = ["mean", "std"].map((s) => `reward_norm/${env}/${s}`);
      const hasNorm = rows.some((r) => typeof r[norm[0]] === "number");
      return html`<div class="panel" data-env=${env}>
        <h3>${env}</h3>
        ${snap ? html`<${Snapshot} env=${env} snap=${snap.curriculum?.[env]} />` : html`<p class="muted small">Loading snapshot…</p>`}
        <div class="charts" style="margin-top:12px">
          <${Chart} title=${`${env}: items per difficulty bin (0 = easiest)`} series=${series(rows, bins.map((b) => `curriculum/${env}/bin_${b}_count`), bins.map((b) => `bin ${b}`))} />
          <${Chart} title=${`${env}: item difficulty`} series=${series(rows, ["mean", "min", "max"].map((s) => `curriculum/${env}/${s}_difficulty`), ["mean", "min", "max"])} />
          ${hasNorm
            ? html`<${Chart} title=${`${env}: reward normaliser`} series=${series(rows, norm, ["mean", "std"])} />`
            : html`<${Chart} title=${`${env}: reward (reward_norm.mode is none)`} series=${series(rows, [`reward/${env}/mean`], ["mean reward"])} />`}
          ${envs.length > 1 && html`<${Chart} title=${`${env}: share of items drawn`} series=${series(rows, [`mixture/${env}/share`], ["share"])} />`}
        </div>
      </div>`;
    })}`;
}
