// Shared by every page: the JSON API, number formats, the address bar, live metrics, charts.
import { html, useEffect, useRef, useState } from "./vendor/htm-preact-standalone.module.js";

export { html };

export const PALETTE = [
  "#2f6fde", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8",
  "#0c8599", "#e67700", "#5c940d", "#862e9c", "#495057",
];

// GET /api/<path>?<params>; the error the server gave, as an Error.
export async function api(path, params = {}) {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(`/api/${path}${query ? "?" + query : ""}`);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

export function fmt(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e6) return String(value);
  const a = Math.abs(value);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return value.toExponential(2);
  if (a >= 1000) return value.toFixed(0);
  const text = value.toPrecision(3);
  return text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
}

export function ago(seconds) {
  if (!seconds) return "–";
  const d = Date.now() / 1000 - seconds;
  if (d < 60) return `${Math.max(0, Math.round(d))} s ago`;
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}:${String(m).padStart(2, "0")}:${String(r).padStart(2, "0")}` : `${m}:${String(r).padStart(2, "0")}`;
}

// The page and its parameters from the address bar: #/page?key=value.
export function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, query = ""] = hash.split("?");
  return { page: page || "runs", params: Object.fromEntries(new URLSearchParams(query)) };
}

export function href(page, params = {}) {
  const clean = Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ""));
  const query = new URLSearchParams(clean).toString();
  return `#/${page}${query ? "?" + query : ""}`;
}

export function go(page, params) {
  const target = href(page, params);
  if (location.hash !== target) location.hash = target;
}

// Re-run `fn` every `ms` while the component is on the page (and once at once).
export function usePoll(fn, ms, deps) {
  useEffect(() => {
    let stopped = false;
    let timer = null;
    const tick = async () => {
      try { await fn(); } catch (err) { console.warn(err); }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return () => { stopped = true; clearTimeout(timer); };
  }, deps);
}

// Live metrics of several runs: each run's rows so far, extended every two seconds by the rows
// logged since (the server sends only those). A rewritten log (a resumed run) starts over.
const streams = new Map();

function stream(run) {
  if (!streams.has(run)) streams.set(run, { rows: [], gen: "", version: 0 });
  return streams.get(run);
}

async function pull(run) {
  const s = stream(run);
  const data = await api("metrics", { run, after: s.rows.length, gen: s.gen });
  if (data.reset) s.rows = [];
  s.gen = data.generation;
  if (data.rows.length || data.reset) {
    s.rows = s.rows.concat(data.rows);
    s.version += 1;
  }
}

export function useMetrics(runs, ms = 2000) {
  const [version, setVersion] = useState(0);
  const [error, setError] = useState(null);
  usePoll(async () => {
    try {
      const before = runs.map((r) => stream(r).version).join();
      await Promise.all(runs.map(pull));
      const after = runs.map((r) => stream(r).version).join();
      if (before !== after) setVersion((v) => v + 1);
      setError(null);
    } catch (err) {
      setError(String(err.message || err));
    }
  }, ms, [runs.join("\n")]);
  return { rows: Object.fromEntries(runs.map((r) => [r, stream(r).rows])), version, error };
}

// Exponential moving average with bias correction (as TensorBoard smooths); nulls stay gaps.
export function smooth(values, weight) {
  if (!weight) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (v === null || v === undefined || !Number.isFinite(v)) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - Math.pow(weight, n));
  });
}

// A uPlot chart. `series`: [{label, color, x: [...], y: [...], points, dash, width}] on a shared
// numeric x axis; `marks`: x positions drawn as faint vertical lines (evaluations).
export function Chart({ title, series, marks = [], height = 190, xLabel = "step", bars = false, legend = true }) {
  const box = useRef(null);
  const plot = useRef(null);
  const readout = useRef(null);
  const shape = series.map((s) => `${s.label}|${s.color}|${s.points}|${s.dash}`).join(";");
  const data = align(series);
  const named = series.filter((s) => !s.label.endsWith("(raw)"));
  const points = series.reduce((n, s) => n + s.y.filter((v) => v !== null && v !== undefined).length, 0);

  useEffect(() => {
    const el = box.current;
    const width = Math.max(240, el.clientWidth);
    const opts = {
      width, height,
      legend: { show: false },
      cursor: { drag: { x: true, y: false } },
      scales: { x: { time: false }, y: { range: yRange } },
      axes: [
        { label: xLabel, labelSize: 18, size: 36, font: "11px system-ui", labelFont: "11px system-ui", grid: { stroke: "#eef0f3" } },
        {
          font: "11px system-ui", grid: { stroke: "#eef0f3" }, values: (u, vals) => vals.map(fmt),
          size: (u, values) => 16 + 6.5 * Math.max(3, ...(values || []).map((v) => String(v).length)),
        },
      ],
      series: [{ label: xLabel }, ...series.map((s) => ({
        label: s.label,
        stroke: s.color,
        width: s.width ?? 1.6,
        dash: s.dash,
        spanGaps: true,
        fill: bars ? s.color + "33" : undefined,
        paths: bars ? uPlot.paths.stepped({ align: 1 }) : s.points === "only" ? () => null : undefined,
        points: { show: s.points ? true : false, size: 6, fill: s.color },
        value: (u, v) => fmt(v),
      }))],
      plugins: [markPlugin(marks), readoutPlugin(readout, xLabel), drawnPlugin(box)],
    };
    plot.current = new uPlot(opts, data, el);
    const observer = new ResizeObserver(() => {
      const w = Math.max(240, el.clientWidth);
      if (plot.current && Math.abs(plot.current.width - w) > 2) plot.current.setSize({ width: w, height });
    });
    observer.observe(el);
    return () => { observer.disconnect(); plot.current.destroy(); plot.current = null; };
  }, [shape, height, xLabel, marks.join(",")]);

  useEffect(() => { if (plot.current) plot.current.setData(data); });

  const xmax = data[0].length ? data[0][data[0].length - 1] : "";
  return html`<div class="chart" data-key=${title} data-points=${points} data-xmax=${xmax}>
    <div class="title row"><span>${title}</span><span class="readout muted grow right" ref=${readout}></span></div>
    <div class="plot" ref=${box}></div>
    ${legend && named.length > 1 && html`<div class="legend small">${named.map((s) => html`<span><span class="swatch" style=${{ background: s.color }}></span>${s.label}</span>`)}</div>`}
  </div>`;
}

// uPlot wants one x array shared by every series: the sorted union, with gaps (null) where a
// series has no value.
function align(series) {
  const xs = [...new Set(series.flatMap((s) => s.x.filter((v) => v !== null && v !== undefined)))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = series.map((s) => {
    const out = new Array(xs.length).fill(null);
    s.x.forEach((x, i) => {
      if (x !== null && x !== undefined && s.y[i] !== undefined) out[index.get(x)] = s.y[i];
    });
    return out;
  });
  return [xs, ...ys];
}

// What the canvas holds after each draw, on the chart's element (`data-drawn`: values drawn).
function drawnPlugin(box) {
  return {
    hooks: {
      draw: [(u) => {
        const drawn = u.data.slice(1).reduce((n, ys) => n + ys.filter((v) => v !== null && v !== undefined).length, 0);
        if (box.current) box.current.parentElement.dataset.drawn = String(drawn);
      }],
    },
  };
}

// A flat series gets a little room around it instead of uPlot's default 0–100.
function yRange(u, min, max) {
  if (min === null || max === null) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) * 0.1 || 1;
    return [min - pad, max + pad];
  }
  const pad = (max - min) * 0.05;
  return [min - pad, max + pad];
}

// The values under the cursor, written into the chart's title line.
function readoutPlugin(target, xLabel) {
  return {
    hooks: {
      setCursor: [(u) => {
        const el = target.current;
        if (!el) return;
        const i = u.cursor.idx;
        if (i === null || i === undefined) { el.textContent = ""; return; }
        const parts = [`${xLabel} ${fmt(u.data[0][i])}`];
        u.series.forEach((s, k) => {
          if (k === 0 || s.label.endsWith("(raw)")) return;
          const v = u.data[k][i];
          if (v !== null && v !== undefined) parts.push(`${s.label} ${fmt(v)}`);
        });
        el.textContent = parts.join(" · ");
      }],
    },
  };
}

function markPlugin(marks) {
  return {
    hooks: {
      drawAxes: [(u) => {
        if (!marks.length) return;
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "rgba(120, 130, 150, 0.45)";
        ctx.setLineDash([3, 3]);
        ctx.lineWidth = 1;
        for (const m of marks) {
          const x = Math.round(u.valToPos(m, "x", true)) + 0.5;
          if (x < u.bbox.left - 1 || x > u.bbox.left + u.bbox.width + 1) continue;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      }],
    },
  };
}

export function Badge({ kind, children }) {
  return html`<span class=${"badge " + (kind || "")}>${children}</span>`;
}

export function Loading({ error, what = "Loading…" }) {
  return error ? html`<p class="error pad">${error}</p>` : html`<p class="muted pad">${what}</p>`;
}
