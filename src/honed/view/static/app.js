// honed view: the page shell (top bar, address-bar routing) and the runs page.
import { render, useEffect, useState } from "./vendor/htm-preact-standalone.module.js";
import { api, ago, Badge, fmt, go, href, html, Loading, route, usePoll } from "./common.js";
import { CurvesPage } from "./curves.js";
import { RolloutsPage } from "./rollouts.js";
import { CurriculumPage } from "./curriculum.js";
import { SkillsPage } from "./skills.js";

const PAGES = { curves: CurvesPage, rollouts: RolloutsPage, curriculum: CurriculumPage, skills: SkillsPage };

function TopBar({ page, params }) {
  const run = params.run || (params.runs || "").split(",").filter(Boolean)[0];
  const runs = params.runs || params.run;
  const tab = (name, label, extra = {}) =>
    html`<a class=${page === name ? "on" : ""} href=${href(name, extra)}>${label}</a>`;
  return html`<header class="top">
    <a class="brand" href="#/">honed <span>view</span></a>
    <nav>
      ${tab("runs", "Runs")}
      ${run && tab("curves", "Curves", { runs })}
      ${run && tab("rollouts", "Rollouts", { run })}
      ${run && tab("curriculum", "Curriculum", { run })}
      ${run && tab("skills", "Skills", { run })}
    </nav>
    ${run && html`<span class="run">${(params.runs || run).split(",").join("  ·  ")}</span>`}
    <span class="live">read-only · live</span>
  </header>`;
}

function Shell() {
  const [where, setWhere] = useState(route());
  useEffect(() => {
    const onHash = () => setWhere(route());
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);
  const Page = PAGES[where.page] || RunsPage;
  return html`<${TopBar} ...${where} />
    <main><${Page} params=${where.params} key=${where.page} /></main>`;
}

function progress(run) {
  if (!run.max_steps) return null;
  const share = Math.min(1, run.steps / run.max_steps);
  return html`<div class="progress"><div style=${{ width: `${share * 100}%` }}></div></div>`;
}

function settings(run) {
  const c = run.config || {};
  const keys = run.kind === "grpo"
    ? ["loss_type", "learning_rate", "prompts_per_step", "num_generations", "beta", "curriculum"]
    : ["reflector", "edit_budget", "gate", "curriculum"];
  return html`<div class="chips">${keys.filter((k) => c[k] !== undefined && c[k] !== null)
    .map((k) => html`<span class="chip" title=${k}>${k}=${fmt(c[k])}</span>`)}</div>`;
}

function result(run) {
  const f = run.final || {};
  const l = run.latest || {};
  if (run.kind === "grpo") {
    const acc = f.final_accuracy !== undefined
      ? html`<div>accuracy ${fmt(f.initial_accuracy)} → <b>${fmt(f.final_accuracy)}</b></div>` : null;
    return html`${acc}<div class="muted small">reward ${fmt(l["reward/mean"])}${
      l["eval/accuracy"] !== undefined ? ` · eval ${fmt(l["eval/accuracy"])}` : ""}</div>`;
  }
  const best = f.best_hard !== undefined
    ? html`<div>held-out ${fmt(f.initial_hard)} → <b>${fmt(f.best_hard)}</b> (v${f.best_version})</div>` : null;
  return html`${best}<div class="muted small">gate metric ${fmt(l.metric_after)} · train ${fmt(l.train_hard)}</div>`;
}

// What each status means, shown on hover (docs/view.md).
const STATUS_TITLES = {
  running: "training now: its heartbeat is recent",
  finished: "ended and wrote its summary",
  interrupted: "stopped by Ctrl-C after saving: --resume continues it",
  failed: "an error ended it (the line below); --resume continues from its last checkpoint",
  stale: "said it was running, but its heartbeat stopped (killed, or its machine went down): --resume continues it",
};

function RunsPage() {
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const [picked, setPicked] = useState([]);
  usePoll(async () => {
    try { setData(await api("runs")); setError(null); } catch (err) { setError(String(err.message)); }
  }, 4000, []);
  if (!data) return html`<${Loading} error=${error} />`;
  const toggle = (id) => setPicked(picked.includes(id) ? picked.filter((p) => p !== id) : [...picked, id]);
  return html`<div class="toolbar">
      <h2 class="grow">Runs <span class="muted small">under ${data.root}</span></h2>
      <button class="primary" id="compare" disabled=${picked.length < 1}
        onClick=${() => go("curves", { runs: picked.join(",") })}>
        Compare curves${picked.length ? ` (${picked.length})` : ""}</button>
    </div>
    <div class="panel" style="padding:0">
    ${data.runs.length === 0 ? html`<p class="empty">No runs here yet: a run is a folder with config.yaml and metrics.jsonl (honed train / honed skills train write them).</p>` : html`
    <table id="runs">
      <thead><tr><th></th><th>run</th><th>status</th><th>steps</th><th>model · environments</th><th>settings</th><th>result</th><th>updated</th><th></th></tr></thead>
      <tbody>${data.runs.map((run) => html`<tr data-run=${run.id}>
        <td><input type="checkbox" checked=${picked.includes(run.id)} onChange=${() => toggle(run.id)} /></td>
        <td><a href=${href("curves", { runs: run.id })}><b>${run.id === "." ? run.name : run.id}</b></a>
          <div><${Badge} kind=${run.kind}>${run.kind === "grpo" ? "GRPO" : "skills"}<//></div></td>
        <td><span title=${STATUS_TITLES[run.status] || ""}><${Badge} kind=${run.status}>${run.status}<//></span>
          ${run.error ? html`<div class="muted small run-error">${run.error}</div>` : ""}</td>
        <td class="num">${run.steps}${run.max_steps ? html`<span class="muted"> / ${run.max_steps}</span>` : ""}${progress(run)}</td>
        <td><div>${run.config.model ?? "–"}</div><div class="muted small">${(run.config.envs || []).join(", ")}</div></td>
        <td>${settings(run)}</td>
        <td>${result(run)}</td>
        <td class="muted small">${ago(run.updated)}</td>
        <td class="small">
          <a href=${href("rollouts", { run: run.id })}>rollouts</a><br/>
          ${run.kind === "grpo" ? html`<a href=${href("curriculum", { run: run.id })}>curriculum</a>`
            : html`<a href=${href("skills", { run: run.id })}>skills</a>`}
        </td>
      </tr>`)}</tbody>
    </table>`}
    </div>`;
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${Shell} />`, root);
