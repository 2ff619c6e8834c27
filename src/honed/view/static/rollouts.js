// Rollouts: a step's groups as the trainer saw them — prompt, completions with reward
// components, advantage and length, filtered groups marked, conversations turn by turn.
import { useEffect, useState } from "./vendor/htm-preact-standalone.module.js";
import { api, Badge, fmt, go, html, Loading, usePoll } from "./common.js";

function matches(traj, needle) {
  if (!needle) return true;
  const texts = [traj.prompt, traj.completion, ...(traj.turns || []).map((t) => t.content)];
  return texts.some((t) => (t || "").toLowerCase().includes(needle));
}

function inRange(traj, lo, hi) {
  const r = traj.reward;
  if (lo !== "" && !(r >= Number(lo))) return false;
  if (hi !== "" && !(r <= Number(hi))) return false;
  return true;
}

function Advantage({ value }) {
  if (value === null || value === undefined) return html`<span class="muted">per turn</span>`;
  const cls = value > 1e-9 ? "adv-pos" : value < -1e-9 ? "adv-neg" : "muted";
  return html`<span class=${cls}>${value > 0 ? "+" : ""}${fmt(value)}</span>`;
}

function Components({ components }) {
  return html`<div class="chips">${Object.entries(components || {}).map(([k, v]) => html`<span class="chip">${k} ${fmt(v)}</span>`)}</div>`;
}

function Memory({ memory }) {
  const rows = [];
  if (memory.core) rows.push(["core", "", memory.core]);
  for (const store of ["semantic", "episodic"]) {
    for (const [id, text] of Object.entries(memory[store] || {})) rows.push([store, id, text]);
  }
  if (!rows.length) return html`<div class="memory muted">memory: empty</div>`;
  return html`<details class="memory"><summary>memory after this turn (${rows.length} entries)</summary>
    <table>${rows.map(([s, id, t]) => html`<tr><td class="muted">${s}</td><td class="muted">${id}</td><td>${t}</td></tr>`)}</table>
  </details>`;
}

function Turn({ turn }) {
  const role = ["user", "assistant", "tool", "system"].includes(turn.role) ? turn.role : "system";
  const who = turn.role + (turn.name ? ` · ${turn.name}` : "") + (turn.segment !== undefined ? ` · segment ${turn.segment}` : "");
  return html`<div class=${"turn " + role}>
    <div class="who">${who}${turn.reward !== undefined ? html` · reward ${fmt(turn.reward)}` : ""}${
      turn.advantage !== undefined ? html` · advantage <${Advantage} value=${turn.advantage} />` : ""}</div>
    <pre>${turn.content}</pre>
    ${(turn.tool_calls || []).map((c) => html`<div class="call">${c.name}(${c.arguments})</div>`)}
    ${turn.memory && html`<${Memory} memory=${turn.memory} />`}
  </div>`;
}

function Segments({ segments }) {
  return html`<table class="small">
    <thead><tr><th>#</th><th class="num">prompt tokens</th><th class="num">completion</th><th class="num">trained</th><th class="num">reward</th><th class="num">advantage</th><th>text (grey: masked, not trained on)</th></tr></thead>
    <tbody>${segments.map((s, i) => html`<tr>
      <td>${i}</td><td class="num">${s.prompt_tokens}</td><td class="num">${s.completion_tokens}${s.truncated ? html` <${Badge} kind="filtered">truncated<//>` : ""}</td>
      <td class="num">${s.trained_tokens}</td><td class="num">${fmt(s.reward)}</td><td class="num"><${Advantage} value=${s.advantage} /></td>
      <td>${s.spans ? html`<pre>${s.spans.map((p) => (p.trained ? p.text : html`<span class="span-masked">${p.text}</span>`))}</pre>` : ""}</td>
    </tr>`)}</tbody>
  </table>`;
}

function Detail({ traj }) {
  return html`<div class="detail">
    ${traj.turns ? html`<h4>conversation</h4><div class="turns">${traj.turns.map((t) => html`<${Turn} turn=${t} />`)}</div>` : html`
      <h4>prompt</h4><div class="textbox"><pre>${traj.prompt}</pre></div>
      <h4>completion</h4><div class="textbox"><pre class="completion">${traj.completion}</pre></div>`}
    ${traj.segments && html`<h4>segments</h4><${Segments} segments=${traj.segments} />`}
    ${traj.info && html`<h4>info</h4><details><summary class="small muted">${Object.keys(traj.info).join(", ")}</summary>
      <div class="textbox"><pre>${JSON.stringify(traj.info, null, 1)}</pre></div></details>`}
  </div>`;
}

function Group({ group, index, needle, lo, hi }) {
  const [open, setOpen] = useState(null);
  const shown = group.trajectories.map((t, i) => [t, i]).filter(([t]) => matches(t, needle) && inRange(t, lo, hi));
  const rewards = group.trajectories.map((t) => t.reward).filter((r) => typeof r === "number");
  const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
  const top = Math.max(1e-9, ...rewards.map(Math.abs));
  return html`<div class="panel group" data-group=${index}>
    <div class="head row">
      <span class="item">${group.item}</span>
      <span class="muted">${group.env}${group.level !== null && group.level !== undefined ? ` · level ${group.level}` : ""}</span>
      ${group.filtered && html`<${Badge} kind="filtered">filtered: no reward spread<//>`}
      ${group.staleness ? html`<${Badge}>${group.staleness} steps stale<//>` : ""}
      <span class="grow"></span>
      <span class="muted small">mean reward ${fmt(mean)}${group.signal_std !== undefined ? ` · signal std ${fmt(group.signal_std)}` : ""}</span>
    </div>
    <table>
      <thead><tr><th>#</th><th class="num">reward</th><th class="num">success</th><th class="num">advantage</th><th class="num">length</th><th>completion</th><th>components</th></tr></thead>
      <tbody>${shown.map(([t, i]) => html`
        <tr class=${"click traj" + (open === i ? " sel" : "")} data-traj=${i} onClick=${() => setOpen(open === i ? null : i)}>
          <td class="muted">${i}</td>
          <td class="num">${fmt(t.reward)}<span class="bar" style=${{ width: `${Math.round(36 * Math.abs(t.reward ?? 0) / top)}px` }}></span></td>
          <td class="num">${fmt(t.success)}</td>
          <td class="num"><${Advantage} value=${t.advantage} /></td>
          <td class="num">${t.length ?? "–"}${t.truncated ? html` <${Badge} kind="filtered">truncated<//>` : ""}</td>
          <td><div class="preview">${(t.completion || "").split("\n")[0]}</div></td>
          <td><${Components} components=${t.components} /></td>
        </tr>
        ${open === i && html`<tr><td colspan="7" style="padding:0"><${Detail} traj=${t} /></td></tr>`}`)}
      </tbody>
    </table>
    ${shown.length === 0 && html`<p class="muted small pad">No completion matches the filters.</p>`}
  </div>`;
}

export function RolloutsPage({ params }) {
  const run = params.run;
  const [steps, setSteps] = useState(null);
  const [record, setRecord] = useState(null);
  const [error, setError] = useState(null);
  const [needle, setNeedle] = useState("");
  const [lo, setLo] = useState("");
  const [hi, setHi] = useState("");
  const [hideFiltered, setHideFiltered] = useState(false);
  usePoll(async () => setSteps((await api("rollouts", { run })).steps), 5000, [run]);
  const step = params.step !== undefined ? Number(params.step) : steps && steps.length ? steps[steps.length - 1] : null;
  useEffect(() => {
    if (step === null) return;
    setRecord(null);
    api("rollouts/step", { run, step }).then(setRecord, (err) => setError(String(err.message)));
  }, [run, step]);
  if (!steps) return html`<${Loading} error=${error} />`;
  if (!steps.length) return html`<p class="empty">This run kept no rollouts (GRPO runs keep a sample per step with <code>logging.rollouts_per_step</code> &gt; 0).</p>`;
  const at = steps.indexOf(step);
  const goStep = (s) => go("rollouts", { run, step: s });
  const groups = (record?.groups || []).map((g, i) => [g, i]).filter(([g]) => !(hideFiltered && g.filtered));
  return html`<div class="toolbar">
      <button id="prev" disabled=${at <= 0} onClick=${() => goStep(steps[at - 1])}>‹ prev</button>
      <label>step <select id="step" value=${step} onChange=${(e) => goStep(e.target.value)}>
        ${steps.map((s) => html`<option value=${s}>${s}</option>`)}</select></label>
      <button id="next" disabled=${at < 0 || at >= steps.length - 1} onClick=${() => goStep(steps[at + 1])}>next ›</button>
      <button disabled=${at === steps.length - 1} onClick=${() => go("rollouts", { run })}>latest</button>
      <span class="grow"></span>
      <label>search <input id="search" type="search" placeholder="text in prompts or completions" value=${needle} onInput=${(e) => setNeedle(e.target.value.toLowerCase())} /></label>
      <label>reward ≥ <input id="reward-min" type="number" step="any" value=${lo} onInput=${(e) => setLo(e.target.value)} /></label>
      <label>≤ <input id="reward-max" type="number" step="any" value=${hi} onInput=${(e) => setHi(e.target.value)} /></label>
      <label><input type="checkbox" checked=${hideFiltered} onChange=${(e) => setHideFiltered(e.target.checked)} /> hide filtered groups</label>
    </div>
    ${!record ? html`<${Loading} error=${error} />` : html`
      <p class="muted small" id="rollouts-note">Step ${record.step}: ${record.groups.length} group(s) kept${
        record.groups_in_step ? ` of the ${record.groups_in_step} the step trained on` : ""}${
        record.cut && record.cut.texts ? ` · ${record.cut.texts} text(s) cut to ${record.cut.text_chars} characters to fit logging.rollouts_max_bytes` : ""}${
        record.cut && record.cut.groups_left_out ? ` · ${record.cut.groups_left_out} group(s) left out` : ""}. Click a row for the whole completion.</p>
      ${groups.map(([g, i]) => html`<${Group} key=${`${record.step}-${i}`} group=${g} index=${i} needle=${needle} lo=${lo} hi=${hi} />`)}`}`;
}
