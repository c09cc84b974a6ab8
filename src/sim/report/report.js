// kvtier replay report: draws SVG charts from the JSON object that
// `kvtier replay --html` put in #report-data (src/sim/replay_html.h has its
// shape). No library and no network access: the page is one file. Strings
// from the data only ever go into textContent, never into markup.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const TIERS = ['device', 'host', 'disk', 'remote'];
// Each series: a colour, and also a dash pattern and marker shape, so that lines stay apart without colour.
const SERIES_STYLE = [
  { stroke: '#2f6db5', dash: '', marker: 'circle' },
  { stroke: '#c96a12', dash: '8 4', marker: 'square' },
  { stroke: '#2e8540', dash: '2 4', marker: 'triangle' },
  { stroke: '#6b3fa0', dash: '10 3 2 3', marker: 'diamond' },
  { stroke: '#9b2c2c', dash: '4 2', marker: 'cross' },
];

// reportError(message) and the error listeners come from cmake/page_errors.js.

// ---- helpers ----

function svgEl(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (parent) parent.appendChild(node);
  return node;
}

function svgText(parent, x, y, text, attrs) {
  const node = svgEl('text', Object.assign({ x, y }, attrs || {}), parent);
  node.textContent = text;
  return node;
}

function htmlEl(tag, text, parent, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  if (parent) parent.appendChild(node);
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function pct(ratio) {
  return ratio === null || ratio === undefined ? 'n/a' : (100 * ratio).toFixed(1) + ' %';
}

function count(n) {
  if (n === 'unlimited') return 'unlimited';
  if (n >= 1e9) return (n / 1e9).toFixed(2) + ' G';
  if (n >= 1e6) return (n / 1e6).toFixed(2) + ' M';
  if (n >= 1e4) return (n / 1e3).toFixed(1) + ' k';
  return String(n);
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = n, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return (unit === 0 ? String(value) : value.toFixed(1)) + ' ' + units[unit];
}

function ms(value) {
  if (value >= 1e4) return (value / 1e3).toFixed(1) + ' s';
  if (value >= 100) return value.toFixed(0) + ' ms';
  return value.toFixed(2) + ' ms';
}

function fillFacts(list, facts) {
  clear(list);
  for (const [name, value] of facts) {
    const row = htmlEl('div', null, list);
    htmlEl('dt', name, row);
    htmlEl('dd', value, row);
  }
}

// ---- the data: one report, or sweep series of points ----

function readData() {
  const text = document.getElementById('report-data').textContent;
  const data = JSON.parse(text);
  if (data.kind !== 'replay' && data.kind !== 'sweep') throw new Error('unknown report kind ' + data.kind);
  return data;
}

// Every report of the page as {label, report}, in series order.
function allReports(data) {
  if (data.kind === 'replay') return [{ label: 'replay', report: data.report, series: 0, index: 0 }];
  const out = [];
  data.series.forEach((series, s) => series.points.forEach((point, i) =>
    out.push({ label: series.label + ' · device ' + count(point.capacity_tokens) + ' tokens', report: point.report, series: s, index: i })));
  return out;
}

// ---- summary and options ----

function renderSummary(data, reports) {
  const first = reports[0].report;
  const facts = [['requests', count(first.requests)], ['prompt tokens', count(first.tokens)]];
  if (data.kind === 'replay') {
    facts.push(['token hit ratio', pct(first.token_hit_ratio)], ['unlimited cache would hit', pct(first.max_token_hit_ratio)]);
    if (first.ttft_ms) {
      facts.push(['prefill compute saved', pct(first.prefill_compute_saved)],
        ['TTFT p50 with / without cache', ms(first.ttft_ms.with_cache.p50) + ' / ' + ms(first.ttft_ms.without_cache.p50)]);
    }
  } else {
    const best = reports.reduce((a, b) => (b.report.token_hit_ratio > a.report.token_hit_ratio ? b : a));
    facts.push(['policies swept', String(data.series.length)], ['capacities per policy', String(data.series[0].points.length)],
      ['best token hit ratio', pct(best.report.token_hit_ratio) + ' (' + best.label + ')'],
      ['unlimited cache would hit', pct(first.max_token_hit_ratio)]);
  }
  facts.push(['refused requests (larger than the device)', count(first.refused_requests)]);
  fillFacts(document.getElementById('summary'), facts);
}

function renderOptions(report) {
  const caps = TIERS.map((t) => t + ' ' + (report.capacity_tokens[t] === 0 ? 'absent' : count(report.capacity_tokens[t])));
  const facts = [
    ['model', report.model], ['page tokens / chunk pages', report.page_tokens + ' / ' + report.chunk_pages],
    ['tier capacities (tokens)', caps.join(', ')], ['write policy', report.write_policy], ['eviction', report.eviction],
    ['codecs', 'host ' + report.codecs.host + ', disk ' + report.codecs.disk + ', remote ' + report.codecs.remote],
  ];
  if (report.ttft_ms) {
    facts.push(['hardware', report.hardware], ['prefill workers', String(report.workers)], ['time scale', String(report.time_scale)]);
  } else {
    facts.push(['timing', 'off (--no-timing)']);
  }
  facts.push(['skipped trace lines', count(report.skipped_lines)], ['replay took', report.elapsed_s.toFixed(2) + ' s']);
  fillFacts(document.getElementById('options'), facts);
}

// ---- hit ratio vs capacity, one line per policy ----

function drawMarker(parent, shape, x, y, colour) {
  const common = { class: 'marker', fill: colour, stroke: '#fff', 'stroke-width': 1 };
  const r = 5;
  if (shape === 'circle') return svgEl('circle', Object.assign({ cx: x, cy: y, r }, common), parent);
  if (shape === 'square') return svgEl('rect', Object.assign({ x: x - r, y: y - r, width: 2 * r, height: 2 * r }, common), parent);
  const points = {
    triangle: [[0, -r - 1], [r + 1, r], [-r - 1, r]],
    diamond: [[0, -r - 1], [r + 1, 0], [0, r + 1], [-r - 1, 0]],
    cross: [[-r, -2], [-2, -2], [-2, -r], [2, -r], [2, -2], [r, -2], [r, 2], [2, 2], [2, r], [-2, r], [-2, 2], [-r, 2]],
  }[shape];
  return svgEl('polygon', Object.assign({ points: points.map(([dx, dy]) => (x + dx) + ',' + (y + dy)).join(' ') }, common), parent);
}

function sweepScales(series) {
  const caps = series.flatMap((s) => s.points.map((p) => p.capacity_tokens));
  let lo = Math.min(...caps), hi = Math.max(...caps);
  if (lo === hi) { lo /= 2; hi *= 2; }
  // The y axis ends at the next 10 % above the highest ratio shown (the unlimited cache's included).
  const ratios = series.flatMap((s) => s.points.flatMap((p) => [p.report.token_hit_ratio, p.report.max_token_hit_ratio || 0]));
  const top = Math.min(1, Math.max(0.1, Math.ceil(Math.max(...ratios) * 10 + 0.001) / 10));
  const box = { left: 60, right: 740, top: 15, bottom: 290 };
  const x = (cap) => box.left + (Math.log(cap) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) * (box.right - box.left);
  const y = (ratio) => box.bottom - ratio / top * (box.bottom - box.top);
  return { box, x, y, top, caps: [...new Set(caps)].sort((a, b) => a - b) };
}

function drawSweepAxes(svg, scales) {
  const { box, x, y } = scales;
  for (let step = 0; step <= 4; ++step) {
    const ratio = scales.top * step / 4;
    svgEl('line', { class: 'grid-line', x1: box.left, x2: box.right, y1: y(ratio), y2: y(ratio) }, svg);
    svgText(svg, box.left - 6, y(ratio) + 4, String(+(100 * ratio).toFixed(1)) + ' %', { 'text-anchor': 'end' });
  }
  for (const cap of scales.caps) {
    svgEl('line', { class: 'grid-line', x1: x(cap), x2: x(cap), y1: box.top, y2: box.bottom }, svg);
    svgText(svg, x(cap), box.bottom + 16, count(cap), { 'text-anchor': 'middle' });
  }
  svgEl('line', { class: 'axis', x1: box.left, x2: box.right, y1: box.bottom, y2: box.bottom }, svg);
  svgEl('line', { class: 'axis', x1: box.left, x2: box.left, y1: box.top, y2: box.bottom }, svg);
  svgText(svg, (box.left + box.right) / 2, box.bottom + 36, 'device capacity (tokens, log scale)', { 'text-anchor': 'middle', class: 'axis-title' });
}

function drawUnlimitedLine(svg, scales, ratio) {
  if (ratio === null || ratio === undefined) return;
  const { box, y } = scales;
  svgEl('line', { id: 'unlimited-line', x1: box.left, x2: box.right, y1: y(ratio), y2: y(ratio), stroke: '#777', 'stroke-dasharray': '3 3' }, svg);
}

function drawSeries(svg, scales, series, s, onPick) {
  const style = SERIES_STYLE[s % SERIES_STYLE.length];
  const coords = series.points.map((p) => [scales.x(p.capacity_tokens), scales.y(p.report.token_hit_ratio)]);
  svgEl('path', {
    class: 'series-line', 'data-series': series.label, 'data-points': coords.length, fill: 'none', stroke: style.stroke,
    'stroke-width': 2, 'stroke-dasharray': style.dash, d: coords.map(([px, py], i) => (i ? 'L' : 'M') + px + ' ' + py).join(' '),
  }, svg);
  series.points.forEach((point, i) => {
    const g = svgEl('g', { class: 'point', tabindex: 0, 'data-series': s, 'data-index': i, 'data-capacity': point.capacity_tokens, 'data-hit': point.report.token_hit_ratio }, svg);
    drawMarker(g, style.marker, coords[i][0], coords[i][1], style.stroke);
    svgEl('title', {}, g).textContent = series.label + ': device ' + count(point.capacity_tokens) + ' tokens, hit ratio ' + pct(point.report.token_hit_ratio);
    g.addEventListener('click', () => onPick(s, i));
    g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') onPick(s, i); });
  });
}

// Each line's name (and the unlimited cache's) at its right end, moved apart vertically so that names never overlap.
function drawSeriesLabels(svg, scales, series) {
  const ends = series.map((line, s) => {
    const last = line.points[line.points.length - 1];
    return { label: line.label, fill: SERIES_STYLE[s % SERIES_STYLE.length].stroke, y: scales.y(last.report.token_hit_ratio) + 4 };
  });
  const unlimited = series[0].points[0].report.max_token_hit_ratio;
  if (unlimited !== null && unlimited !== undefined) ends.push({ label: 'unlimited cache ' + pct(unlimited), fill: '#555', y: scales.y(unlimited) + 4 });
  ends.sort((a, b) => a.y - b.y);
  for (let i = 1; i < ends.length; ++i) ends[i].y = Math.max(ends[i].y, ends[i - 1].y + 13);
  for (const end of ends) svgText(svg, scales.box.right + 10, end.y, end.label, { class: 'series-label', fill: end.fill });
}

function renderLegend(series) {
  const legend = document.getElementById('hit-legend');
  clear(legend);
  series.forEach((line, s) => {
    const style = SERIES_STYLE[s % SERIES_STYLE.length];
    const item = htmlEl('span', null, legend);
    const swatch = svgEl('svg', { class: 'line-swatch', viewBox: '0 0 40 14' }, item);
    svgEl('line', { x1: 2, x2: 38, y1: 7, y2: 7, stroke: style.stroke, 'stroke-width': 2, 'stroke-dasharray': style.dash }, swatch);
    drawMarker(swatch, style.marker, 20, 7, style.stroke);
    htmlEl('span', line.label, item);
  });
}

function renderSweepTable(series) {
  const table = document.getElementById('sweep-table');
  clear(table);
  const head = htmlEl('tr', null, htmlEl('thead', null, table));
  for (const name of ['policy', 'device capacity (tokens)', 'token hit ratio', 'device evictions (pages)', 'TTFT p50 with cache', 'TTFT p99 with cache'])
    htmlEl('th', name, head, name === 'policy' ? '' : 'num');
  const body = htmlEl('tbody', null, table);
  for (const line of series) {
    for (const point of line.points) {
      const r = point.report, row = htmlEl('tr', null, body);
      htmlEl('td', line.label, row);
      for (const value of [count(point.capacity_tokens), pct(r.token_hit_ratio), count(r.evictions.device),
        r.ttft_ms ? ms(r.ttft_ms.with_cache.p50) : 'n/a', r.ttft_ms ? ms(r.ttft_ms.with_cache.p99) : 'n/a'])
        htmlEl('td', value, row, 'num');
    }
  }
}

function renderSweep(data, onPick) {
  document.getElementById('sweep-panel').hidden = false;
  const svg = document.getElementById('hit-chart');
  clear(svg);
  const scales = sweepScales(data.series);
  drawSweepAxes(svg, scales);
  drawUnlimitedLine(svg, scales, data.series[0].points[0].report.max_token_hit_ratio);
  // The first policy is drawn last, on top: where lines coincide its markers show inside the others'.
  for (let s = data.series.length - 1; s >= 0; --s) drawSeries(svg, scales, data.series[s], s, onPick);
  drawSeriesLabels(svg, scales, data.series);
  svg.dataset.series = String(data.series.length);
  renderLegend(data.series);
  renderSweepTable(data.series);
}

// ---- the details of one report ----

function noData(svg, text) {
  svgText(svg, 220, 105, text, { 'text-anchor': 'middle', class: 'axis-title' });
}

function renderTtft(report) {
  const svg = document.getElementById('ttft-chart');
  clear(svg);
  if (!report.ttft_ms) return noData(svg, 'timing was off (--no-timing)');
  const stats = ['mean', 'p50', 'p99'];
  const kinds = [['with_cache', 'url(#pat-solid)'], ['without_cache', 'url(#pat-hatch)']];
  const top = Math.max(...stats.flatMap((s) => kinds.map(([k]) => report.ttft_ms[k][s]))) || 1;
  const base = 180, height = 150, groupWidth = 140;
  stats.forEach((stat, g) => {
    kinds.forEach(([kind, fill], k) => {
      const value = report.ttft_ms[kind][stat], h = height * value / top;
      const x = 20 + g * groupWidth + k * 58;
      svgEl('rect', { class: 'bar', 'data-kind': kind, 'data-stat': stat, 'data-ms': value, x, y: base - h, width: 50, height: h, fill, stroke: '#555' }, svg);
      svgText(svg, x + 25, base - h - 4, ms(value), { 'text-anchor': 'middle' });
    });
    svgText(svg, 20 + g * groupWidth + 54, base + 16, stat, { 'text-anchor': 'middle' });
  });
  svgEl('line', { class: 'axis', x1: 10, x2: 430, y1: base, y2: base }, svg);
}

// Horizontal bars, one row each: [label, value, fraction of the bar, fill, text].
function drawRows(svg, rows) {
  const rowHeight = Math.min(30, 200 / rows.length);
  rows.forEach(([label, fraction, fill, text, attrs], i) => {
    const y = 8 + i * rowHeight;
    svgText(svg, 4, y + rowHeight / 2 + 3, label);
    svgEl('rect', { x: 110, y, width: 220, height: rowHeight - 8, fill: '#fafafa', stroke: '#bbb' }, svg);
    svgEl('rect', Object.assign({ class: 'bar', x: 110, y, width: 220 * Math.min(1, fraction), height: rowHeight - 8, fill }, attrs || {}), svg);
    svgText(svg, 336, y + rowHeight / 2 + 3, text);
  });
}

function renderTierHits(report) {
  const svg = document.getElementById('tier-chart');
  clear(svg);
  const rows = TIERS.map((tier) => [tier, report.hit_ratio_by_tier[tier], 'url(#pat-' + tier + ')', pct(report.hit_ratio_by_tier[tier]), { 'data-tier': tier }]);
  rows.push(['any tier', report.token_hit_ratio, '#555', pct(report.token_hit_ratio), { 'data-tier': 'all' }]);
  if (report.max_token_hit_ratio !== null) rows.push(['unlimited cache', report.max_token_hit_ratio, '#bbb', pct(report.max_token_hit_ratio), { 'data-tier': 'unlimited' }]);
  drawRows(svg, rows);
}

function renderBytes(report) {
  const svg = document.getElementById('bytes-chart');
  clear(svg);
  const lower = TIERS.slice(1);
  const moved = report.bytes_moved;
  const top = Math.max(...lower.flatMap((t) => [moved[t + '_to_device'], moved['device_to_' + t]]));
  if (!(top > 0)) return noData(svg, 'no bytes moved: no host, disk or remote tier was used');
  const rows = [];
  for (const tier of lower) {
    const loaded = moved[tier + '_to_device'], stored = moved['device_to_' + tier];
    rows.push([tier + ' → device', loaded / top, 'url(#pat-solid)', bytes(loaded), { 'data-tier': tier, 'data-direction': 'load' }]);
    rows.push(['device → ' + tier, stored / top, 'url(#pat-hatch)', bytes(stored), { 'data-tier': tier, 'data-direction': 'store' }]);
  }
  drawRows(svg, rows);
}

function renderTierTable(report) {
  const table = document.getElementById('tier-table');
  clear(table);
  const head = htmlEl('tr', null, htmlEl('thead', null, table));
  for (const name of ['tier', 'capacity (tokens)', 'hit ratio', 'evictions', 'loaded', 'stored']) htmlEl('th', name, head, name === 'tier' ? '' : 'num');
  const body = htmlEl('tbody', null, table);
  for (const tier of TIERS) {
    const cap = report.capacity_tokens[tier], row = htmlEl('tr', null, body);
    row.dataset.tier = tier;
    htmlEl('td', tier, row);
    const unit = tier === 'device' || tier === 'host' ? ' pages' : ' chunks';
    const loaded = tier === 'device' ? 'in place' : bytes(report.bytes_moved[tier + '_to_device']);
    const stored = tier === 'device' ? '—' : bytes(report.bytes_moved['device_to_' + tier]);
    for (const value of [cap === 0 ? 'absent' : count(cap), pct(report.hit_ratio_by_tier[tier]), count(report.evictions[tier]) + unit, loaded, stored])
      htmlEl('td', value, row, 'num');
  }
}

function renderDetail(entry) {
  document.getElementById('detail-title').textContent = 'Details: ' + entry.label;
  renderTtft(entry.report);
  renderTierHits(entry.report);
  renderBytes(entry.report);
  renderTierTable(entry.report);
  renderOptions(entry.report);
  for (const point of document.querySelectorAll('#hit-chart .point'))
    point.classList.toggle('selected', point.dataset.series === String(entry.series) && point.dataset.index === String(entry.index));
}

// ---- the page ----

function setUpPicker(reports, show) {
  const picker = document.getElementById('point-picker'), select = document.getElementById('point-select');
  reports.forEach((entry, i) => { const option = htmlEl('option', entry.label, select); option.value = String(i); });
  picker.hidden = reports.length < 2;
  select.addEventListener('change', () => show(Number(select.value)));
  return (i) => { select.value = String(i); show(i); };
}

function main() {
  const data = readData();
  const reports = allReports(data);
  if (reports.length === 0) throw new Error('the report holds no replay');
  document.getElementById('report-title').textContent = data.title || '';
  renderSummary(data, reports);
  const pick = setUpPicker(reports, (i) => renderDetail(reports[i]));
  if (data.kind === 'sweep') {
    renderSweep(data, (s, i) => pick(reports.findIndex((e) => e.series === s && e.index === i)));
    // Start on the first policy's largest capacity.
    const first = reports.filter((e) => e.series === 0);
    pick(reports.indexOf(first.reduce((a, b) => (b.report.capacity_tokens.device > a.report.capacity_tokens.device ? b : a))));
  } else {
    pick(0);
  }
  document.body.dataset.rendered = '1';
}

try {
  main();
} catch (e) {
  reportError('could not draw the report: ' + (e && e.message ? e.message : String(e)));
}
