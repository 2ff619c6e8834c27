// Skills: the document at each version, the diff between versions, each step's proposed
// edits, what the ranking kept under the edit budget, what applying them did, and the gate.
import { useEffect, useState } from "./vendor/htm-preact-standalone.module.js";
import { api, Badge, fmt, go, html, Loading, usePoll } from "./common.js";

// Unified diff with line numbers; long unchanged runs folded to three lines of context.
export function Diff({ ops }) {
  if (!ops) return html`<p class="muted small">No diff.</p>`;
  if (ops.every((o) => o.op === "equal")) return html`<p class="muted small">No change.</p>`;
  const lines = [];
  ops.forEach((o, k) => {
    let [a, b] = o.at;
    if (o.op === "equal") {
      const n = o.before.length;
      const head = k === 0 ? 0 : 3, tail = k === ops.length - 1 ? 0 : 3;
      o.before.forEach((t, i) => {
        if (n > head + tail + 1 && i === head) lines.push(html`<div class="l skip"><span class="tx">… ${n - head - tail} unchanged lines …</span></div>`);
        if (n > head + tail + 1 && i >= head && i < n - tail) return;
        lines.push(html`<div class="l eq"><span class="ln">${a + i}</span><span class="tx">${t}</span></div>`);
      });
      return;
    }
    o.before.forEach((t) => lines.push(html`<div class="l del"><span class="ln">${a++}</span><span class="tx">${t}</span></div>`));
    o.after.forEach((t) => lines.push(html`<div class="l ins"><span class="ln">${b++}</span><span class="tx">${t}</span></div>`));
  });
  return html`<div class="diff">${lines}</div>`;
}

function Edit({ edit, cls = "" }) {
  return html`<div class=${"edit " + cls}>
    <span class="op">${edit.op}</span>
    ${edit.support_count !== undefined && html` <span class="chip">support ${edit.support_count}</span>`}
    ${edit.rationale && html` <span class="muted small">${edit.rationale}</span>`}
    ${edit.target && html`<pre class="muted">${edit.op === "delete" ? "" : "at: "}${edit.target}</pre>`}
    ${edit.content && html`<pre>${edit.content}</pre>`}
  </div>`;
}

function Scores({ label, s }) {
  if (!s) return null;
  return html`<span class="chip">${label}: hard ${fmt(s.hard)} · soft ${fmt(s.soft)} (n=${s.n})</span>`;
}

function StepDetail({ run, step }) {
  const [d, setD] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => { setD(null); api("skills/step", { run, step }).then(setD, (e) => setError(String(e.message))); }, [run, step]);
  if (!d) return html`<${Loading} error=${error} />`;
  const gate = d.gate || {};
  const decision = gate.decision || {};
  const ranked = d.ranked || {};
  const keep = ranked.keep ?? 0;
  return html`<div class="panel" id="step-detail">
    <div class="row"><h3 class="grow">Step ${step}</h3>${gate.outcome && html`<${Badge} kind=${gate.outcome}>${gate.outcome}<//>`}</div>
    <p>${gate.reason || ""}</p>
    <div class="chips"><${Scores} label="before" s=${decision.before} /><${Scores} label="after" s=${decision.after} />
      ${gate.split && html`<span class="chip">gate: ${decision.mode || ""} on ${gate.split} (${gate.items} items)</span>`}</div>
    <h4>candidate against v${d.base_version ?? "?"}</h4>
    <${Diff} ops=${d.diff} />
    <h4>proposed by the reflector (${(d.proposed || []).length} reflections)</h4>
    ${(d.proposed || []).map((p) => html`<div class="panel">
      <div class="row small"><${Badge} kind=${p.source === "failure" ? "rejected" : "accepted"}>${p.source}<//>
        <span class="muted">${(p.items || []).join(", ")}</span></div>
      <p class="small">${p.summary}</p>
      ${(p.edits || []).map((e) => html`<${Edit} edit=${e} />`)}
      ${(p.problems || []).length > 0 && html`<p class="error small">${p.problems.join("; ")}</p>`}
    </div>`)}
    <h4>ranked (${ranked.method || "–"}; the budget keeps ${keep} of ${(ranked.ranked || []).length})</h4>
    ${(ranked.ranked || []).map((e, i) => html`<${Edit} edit=${e} cls=${i < keep ? "kept" : "dropped"} />`)}
    <h4>applied</h4>
    <table class="small"><tbody>${((d.applied || {}).edits || []).map((e) => html`<tr>
      <td>${e.index}</td><td><${Badge} kind=${e.status === "applied" ? "accepted" : "rejected"}>${e.status}<//></td>
      <td><code>${e.op}</code></td><td>${e.reason}</td><td><pre>${e.edit?.content ?? ""}</pre></td></tr>`)}</tbody></table>
    ${(gate.items_changed || []).length > 0 && html`<h4>gate items that changed (hard, soft)</h4>
      <table class="small"><tbody>${gate.items_changed.map((c) => html`<tr><td><code>${c.item}</code></td>
        <td class="num">${c.before.map(fmt).join(", ")}</td><td>→</td><td class="num">${c.after.map(fmt).join(", ")}</td></tr>`)}</tbody></table>`}
  </div>`;
}

function VersionPane({ run, a, b, view }) {
  const [diff, setDiff] = useState(null);
  const [doc, setDoc] = useState(null);
  useEffect(() => {
    setDiff(null); setDoc(null);
    if (view === "doc") api("skills/version", { run, v: b }).then(setDoc, () => setDoc({ html: "<p>missing</p>" }));
    else api("skills/diff", { run, a, b }).then(setDiff, () => setDiff({ diff: null }));
  }, [run, a, b, view]);
  return html`<div class="panel" id="version-pane">
    <div class="row"><h3 class="grow">${view === "doc" ? `v${b}` : `v${a} → v${b}`}</h3>
      <button onClick=${() => go("skills", { run, a, b, view: view === "doc" ? "diff" : "doc" })}>
        ${view === "doc" ? "show diff" : "show document"}</button></div>
    ${view === "doc"
      ? (doc ? html`<div class="markdown" dangerouslySetInnerHTML=${{ __html: doc.html }}></div>` : html`<${Loading} />`)
      : (diff ? html`<${Diff} ops=${diff.diff} />` : html`<${Loading} />`)}
  </div>`;
}

export function SkillsPage({ params }) {
  const run = params.run;
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  usePoll(async () => {
    try { setData(await api("skills", { run })); } catch (e) { setError(String(e.message)); }
  }, 5000, [run]);
  if (!data) return html`<${Loading} error=${error} />`;
  const numbers = data.versions.map((v) => v.version).filter((v) => data.files.includes(v));
  if (!numbers.length && !data.steps.length) return html`<p class="empty">This is not a skill run, or it has no skill version yet.</p>`;
  const last = numbers[numbers.length - 1];
  const b = Number(params.b ?? last);
  const a = Number(params.a ?? numbers[Math.max(0, numbers.indexOf(b) - 1)] ?? b);
  const step = params.step !== undefined ? Number(params.step) : null;
  const view = params.view || "diff";
  const pick = (change) => go("skills", { run, a, b, view, step: step ?? undefined, ...change });
  return html`<div class="cols">
    <div>
      <div class="panel">
        <h3>Versions</h3>
        <table id="versions"><thead><tr><th>A</th><th>B</th><th>version</th><th>step</th><th class="num">gate hard</th><th class="num">soft</th></tr></thead>
        <tbody>${data.versions.map((v) => html`<tr class=${v.version === b ? "sel" : ""}>
          <td><input type="radio" name="a" checked=${v.version === a} onChange=${() => pick({ a: v.version, view: "diff" })} /></td>
          <td><input type="radio" name="b" checked=${v.version === b} onChange=${() => pick({ b: v.version })} /></td>
          <td><a href="#" onClick=${(e) => { e.preventDefault(); pick({ b: v.version, view: "doc" }); }}>v${v.version}</a>
            ${v.version === data.best_version ? html` <${Badge} kind="accepted">best<//>` : ""}
            ${v.version === data.current_version && v.version !== data.best_version ? html` <${Badge}>current<//>` : ""}
            <span class="muted small"> ${v.source}</span></td>
          <td class="num">${v.step}</td><td class="num">${fmt(v.scores?.hard)}</td><td class="num">${fmt(v.scores?.soft)}</td>
        </tr>`)}</tbody></table>
      </div>
      <div class="panel">
        <h3>Steps</h3>
        <table id="skill-steps"><thead><tr><th>step</th><th class="num">budget</th><th class="num">proposed → kept → applied</th><th>gate</th><th class="num">metric</th></tr></thead>
        <tbody>${data.steps.map((s) => html`<tr class=${"click" + (s.step === step ? " sel" : "")} data-step=${s.step} onClick=${() => pick({ step: s.step })} title=${s.reason}>
          <td>${s.step}<span class="muted small"> e${s.epoch}</span></td><td class="num">${s.budget}</td>
          <td class="num">${s.proposed} → ${s.kept} → ${s.applied}</td>
          <td><${Badge} kind=${s.outcome}>${s.outcome}<//></td>
          <td class="num">${fmt(s.metric_before)} → ${fmt(s.metric_after)}</td>
        </tr>`)}</tbody></table>
      </div>
    </div>
    <div>
      ${step !== null && html`<${StepDetail} run=${run} step=${step} key=${step} />`}
      ${numbers.length > 0 && html`<${VersionPane} run=${run} a=${a} b=${b} view=${view} />`}
    </div>
  </div>`;
}
