// tinyflo's live dashboard: plots the events the training process streams (server-sent events).
// Every plotted point stays readable in window.tinyflo.charts[title].series[name] as [x, y] pairs.
"use strict";

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
// Which chart each known value goes to; any other value gets a chart of its own.
// The machine's CPU % (of all its cores) and this process's (of one core) are different scales: a chart each.
const GROUPS = {
  step: { loss: "loss per log interval", sys_cpu_pct: "CPU % of the machine (per log interval)",
          proc_cpu_pct: "CPU % of one core, this process (per log interval)",
          gpu_util_pct: "GPU % (per log interval)", sys_ram_gb: "memory GB (per log interval)",
          proc_ram_gb: "memory GB (per log interval)", gpu_mem_gb: "memory GB (per log interval)" },
  epoch: { train_loss: "loss per epoch", val_loss: "loss per epoch", val_acc: "accuracy per epoch",
           sys_cpu_pct: "CPU % of the machine per epoch", proc_cpu_pct: "CPU % of one core, this process, per epoch",
           gpu_util_pct: "GPU % per epoch", sys_ram_gb: "memory GB per epoch", proc_ram_gb: "memory GB per epoch",
           gpu_mem_gb: "memory GB per epoch", gpu_temp_c: "GPU temperature °C per epoch", time: "seconds per epoch" },
};
// Column names for a reader (the server's, from the Monitor's own table), and the learning rates by group.
const LABELS = Object.assign({ step: "step", loss: "loss" }, window.tinyfloLabels || {});
function labelOf(key) {
  if (LABELS[key]) return LABELS[key];
  if (key === "lr" || key.startsWith("lr_")) return `learning rate, group ${key === "lr" ? 0 : key.slice(3)}`;
  return key;
}
// A value as a reader wants it: counts whole, small rates in powers of ten, the rest to 4 digits.
function shown(value) {
  if (value === null) return "—";
  if (Number.isInteger(value)) return String(value);
  const size = Math.abs(value);
  return size !== 0 && (size < 1e-3 || size >= 1e6) ? value.toExponential(2) : String(Number(value.toPrecision(4)));
}
// A y tick: 3 digits, in powers of ten where that is shorter (a learning rate of 0.00000469 is 4.69e-6).
function tickText(value) {
  const plain = String(Number(value.toPrecision(3))), power = value.toExponential(2).replace("e+", "e");
  return power.length < plain.length ? power : plain;
}
const SKIP = new Set(["step", "epoch", "sys_ram_total_gb", "gpu_mem_total_gb"]);

window.tinyflo = { charts: {}, events: 0, closed: false };

function chartFor(title, kind) {
  let chart = window.tinyflo.charts[title];
  if (!chart) {
    const figure = document.createElement("figure");
    const caption = document.createElement("figcaption");
    caption.textContent = title;
    const canvas = document.createElement("canvas");
    canvas.dataset.title = title;
    figure.append(caption, canvas);
    document.getElementById("charts").append(figure);
    // A share of the whole machine (or GPU) is drawn from 0 to 100; a process's per-core % from 0.
    const whole = title.includes("% of the machine") || title.startsWith("GPU %");
    chart = window.tinyflo.charts[title] = { series: {}, canvas, axis: kind === "step" ? "step" : "epoch",
                                             floor: whole || title.includes("% of one core") ? 0 : null,
                                             ceiling: whole ? 100 : null };
  }
  return chart;
}

function titleOf(kind, key) {
  if (GROUPS[kind][key]) return GROUPS[kind][key];
  if (key === "lr" || key.startsWith("lr_")) return `learning rate per ${kind}`;
  const base = key.startsWith("val_") ? key.slice(4) : key;  // a logged metric beside its validation value
  return `${base} per ${kind === "step" ? "log interval" : "epoch"}`;
}

function showLatest(data) {
  const names = document.getElementById("latest-names"), values = document.getElementById("latest-values");
  for (const [key, value] of Object.entries(data)) {
    let cell = values.querySelector(`td[data-key="${key}"]`);
    if (!cell) {
      const head = document.createElement("th");
      head.textContent = labelOf(key);
      head.title = key;  // the history's own name
      names.append(head);
      cell = document.createElement("td");
      cell.dataset.key = key;
      values.append(cell);
    }
    cell.textContent = shown(value);
  }
}

function add(kind, data) {
  const x = kind === "step" ? data.step : data.epoch;
  for (const [key, value] of Object.entries(data)) {
    if (SKIP.has(key) || value === null || typeof value !== "number") continue;
    const chart = chartFor(titleOf(kind, key), kind);
    (chart.series[key] = chart.series[key] || []).push([x, value]);
    chart.dirty = true;
  }
  window.tinyflo.events += 1;
  showLatest(data);
  requestAnimationFrame(drawAll);
}

function drawAll() {
  for (const chart of Object.values(window.tinyflo.charts)) {
    if (chart.dirty) draw(chart);
    chart.dirty = false;
  }
}

function draw(chart) {
  const canvas = chart.canvas, ratio = window.devicePixelRatio || 1;
  canvas.width = canvas.clientWidth * ratio;
  canvas.height = canvas.clientHeight * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.font = "11px sans-serif";
  const w = canvas.clientWidth, h = canvas.clientHeight, bottom = 22, right = 10;
  const points = Object.values(chart.series).flat();
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const [x, y] of points) {  // a loop, not Math.min(...points): a long run has too many to spread
    x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
  }
  if (chart.floor !== null) y0 = Math.min(y0, chart.floor);
  if (chart.ceiling !== null) y1 = Math.max(y1, chart.ceiling);
  const single = x0 === x1;  // one epoch (or step) so far: one tick, under its point
  if (single) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  // The y ticks, written as the table writes values (small rates in powers of ten), left of the plot.
  const yticks = [y0, (y0 + y1) / 2, y1].map(y => ({ y, text: tickText(y) }));
  for (const tick of yticks) tick.width = g.measureText(tick.text).width;
  const left = Math.max(40, 12 + Math.max(...yticks.map(t => t.width)));
  // The legend goes above the plot, in as many rows as its names need: never over a curve.
  const legend = [];
  let lx = left, row = 0;
  for (const name of Object.keys(chart.series)) {
    const width = 14 + g.measureText(labelOf(name)).width;
    if (lx > left && lx + width > w - right) { lx = left; row += 1; }
    legend.push({ name, x: lx, y: 12 + 14 * row, width });
    lx += width + 16;
  }
  const top = 8 + 14 * (row + 1);
  // Curves keep 5 px inside the frame: a value at the top of its range (CPU 100%) is not hidden by it.
  const inset = 5;
  const px = x => left + inset + (x - x0) / (x1 - x0) * (w - left - right - 2 * inset);
  const py = y => top + inset + (1 - (y - y0) / (y1 - y0)) * (h - top - bottom - 2 * inset);
  g.clearRect(0, 0, w, h);
  g.strokeStyle = "#ccc";
  g.strokeRect(left, top, w - left - right, h - top - bottom);
  g.fillStyle = "#555";
  for (const tick of yticks) { tick.x = left - 6 - tick.width; g.fillText(tick.text, tick.x, py(tick.y) + 4); }
  // The first tick starts at its place and the last ends at its place: both stay inside the canvas.
  // Ticks are whole numbers: an axis counts epochs or steps.
  const ticks = (single ? [[(x0 + x1) / 2, 0.5]] : [[x0, 0], [x1, 1]]).map(([x, anchor]) => {
    const text = String(Math.round(x)), width = g.measureText(text).width;
    return { text, x: px(x) - anchor * width, width };
  });
  for (const tick of ticks) g.fillText(tick.text, tick.x, h - 6);
  // What the x axis counts, in the middle, or at the right end when a tick is in the middle.
  const named = g.measureText(chart.axis).width;
  let ax = left + (w - left - right - named) / 2;
  if (ticks.some(t => t.x < ax + named + 6 && ax < t.x + t.width + 6)) ax = w - right - named;
  g.fillText(chart.axis, ax, h - 6);
  Object.entries(chart.series).forEach(([name, series], i) => {
    g.strokeStyle = g.fillStyle = COLORS[i % COLORS.length];
    g.beginPath();
    series.forEach(([x, y], j) => (j ? g.lineTo(px(x), py(y)) : g.moveTo(px(x), py(y))));
    g.stroke();
    if (series.length === 1) g.fillRect(px(series[0][0]) - 2, py(series[0][1]) - 2, 4, 4);
    const entry = legend[i];
    g.fillRect(entry.x, entry.y - 5, 10, 3);  // the series' colour, then its name
    g.fillText(labelOf(name), entry.x + 14, entry.y);
  });
  // Where things went, for a reader of the page and its tests.
  chart.layout = { width: w, plot: { left, top, right: w - right, bottom: h - bottom }, inset, legend, ticks, yticks,
                   axis: { text: chart.axis, x: ax, width: named } };
}

const source = new EventSource("events");
const status = document.getElementById("status");
source.onopen = () => { if (!status.textContent.startsWith("training ended")) status.textContent = "live"; };
for (const kind of ["step", "epoch"]) {
  source.addEventListener(kind, e => add(kind, JSON.parse(e.data)));
}
source.addEventListener("end", e => {
  const end = JSON.parse(e.data);
  status.textContent = `training ended after epoch ${end.epoch} (step ${end.step})`;
});
source.addEventListener("closed", () => {
  window.tinyflo.closed = true;
  status.textContent = "the run has ended";
  source.close();
});
source.onerror = () => { if (!window.tinyflo.closed) status.textContent = "reconnecting…"; };
