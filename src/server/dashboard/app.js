// kvtier dashboard: polls the JSON endpoints and draws the radix tree, the
// tiers and the per-request race. No library, no network access beyond this
// server. Text that comes from the server (token labels) only ever goes into
// textContent, never into markup.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const POLL_MS = 2000;
const KEY_STORE = 'kvtier.api_key';
const TIER_FILL = { device: 'url(#pat-device)', host: 'url(#pat-host)', disk: 'url(#pat-disk)', remote: 'url(#pat-remote)' };
const TIER_DASH = { device: '', host: '6 3', disk: '2 3', remote: '8 3 2 3' };
const TIER_STROKE = { device: '#2f6db5', host: '#c96a12', disk: '#2e8540', remote: '#6b3fa0' };

const state = { apiKey: '', keyRefused: false, selected: null, requests: [] };

// reportError(message) and the error listeners come from cmake/page_errors.js.

// ---- the API key: asked once, kept for the tab's session, sent as a header ----

function loadKey() {
  try {
    if (location.hash.startsWith('#key=')) {
      state.apiKey = decodeURIComponent(location.hash.slice(5));
      history.replaceState(null, '', location.pathname + location.search);
      sessionStorage.setItem(KEY_STORE, state.apiKey);
    } else {
      state.apiKey = sessionStorage.getItem(KEY_STORE) || '';
    }
  } catch (e) {
    // Storage can be unavailable (private modes): the key then lasts as long as the page.
  }
}

function askForKey(refused, notAdmin) {
  const form = document.getElementById('key-form');
  if (!form.hidden) return;
  form.hidden = false;
  const why = notAdmin ? 'this key is not the admin key: enter the admin key'
    : refused ? 'the key was refused: enter it again' : 'the admin key is needed';
  setStatus(why, true);
  document.getElementById('key-input').focus();
}

document.getElementById('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  state.apiKey = document.getElementById('key-input').value.trim();
  try { sessionStorage.setItem(KEY_STORE, state.apiKey); } catch (err) { /* see loadKey */ }
  document.getElementById('key-form').hidden = true;
  poll();
});

async function getJson(path) {
  const headers = state.apiKey ? { Authorization: 'Bearer ' + state.apiKey } : {};
  let res;
  try {
    res = await fetch(path, { headers, cache: 'no-store' });
  } catch (e) {
    reportError('fetch ' + path + ' failed: ' + e.message);
    return null;
  }
  if (res.status === 401 || res.status === 403) {
    askForKey(state.apiKey !== '', res.status === 403);
    return null;
  }
  if (!res.ok) {
    reportError('fetch ' + path + ': HTTP ' + res.status);
    return null;
  }
  try {
    return await res.json();
  } catch (e) {
    reportError('fetch ' + path + ': not JSON (' + e.message + ')');
    return null;
  }
}

// ---- small helpers ----

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(n < 10 ? 2 : 1)) + ' ' + units[i];
}

function fmtMs(seconds) {
  const ms = seconds * 1000;
  return (ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : ms.toFixed(0)) + ' ms';
}

function fmtPct(x) {
  return x === null || x === undefined ? '—' : (100 * x).toFixed(1) + '%';
}

function fmtInt(n) {
  return Number(n).toLocaleString('en-US');
}

function setStatus(text, stale) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = stale ? 'stale' : '';
}

const tooltip = document.getElementById('tooltip');
function showTip(event, text) {
  tooltip.textContent = text;
  tooltip.hidden = false;
  const x = Math.min(event.clientX + 14, window.innerWidth - 370);
  tooltip.style.left = x + 'px';
  tooltip.style.top = (event.clientY + 14) + 'px';
}
function hideTip() { tooltip.hidden = true; }

function attachTip(node, text) {
  node.appendChild(svg('title', {}, text));
  node.addEventListener('mousemove', (e) => showTip(e, text));
  node.addEventListener('mouseleave', hideTip);
}

// ---- the radix tree as an icicle ----

const ROW = 24;

// Depth and horizontal extent of every record; records come parents first.
function layoutTree(nodes, width) {
  const children = nodes.map(() => []);
  const roots = [];
  for (const n of nodes) (n.parent < 0 ? roots : children[n.parent]).push(n.id);
  const total = roots.reduce((s, id) => s + nodes[id].subtree_tokens, 0) || 1;
  const scale = width / total;
  const box = new Array(nodes.length);
  let x = 0;
  for (const id of roots) {
    box[id] = { x, w: nodes[id].subtree_tokens * scale, depth: 0 };
    x += box[id].w;
  }
  let maxDepth = 0;
  for (const n of nodes) {  // parents first: a parent's box exists before its children's
    const b = box[n.id];
    if (!b) continue;
    let cx = b.x;
    for (const c of children[n.id]) {
      box[c] = { x: cx, w: nodes[c].subtree_tokens * scale, depth: b.depth + 1 };
      cx += box[c].w;
      maxDepth = Math.max(maxDepth, b.depth + 1);
    }
  }
  return { box, children, maxDepth };
}

// Own tokens split into device only, both, host only (a page may be on both).
function residency(n) {
  const both = Math.max(0, n.device_tokens + n.host_tokens - n.tokens);
  return { deviceOnly: Math.max(0, n.device_tokens - both), both, hostOnly: Math.max(0, n.host_tokens - both) };
}

function nodeTip(n, tree) {
  if (n.kind === 'namespace') return n.label + '\n' + fmtInt(n.subtree_tokens) + ' tokens cached below';
  const r = residency(n);
  const lines = [];
  if (n.kind === 'other') lines.push(n.label + ' (' + fmtInt(n.aggregated_nodes) + ' nodes)');
  else if (n.label) lines.push('“' + n.label + '…”');
  lines.push('tokens: ' + fmtInt(n.tokens) + ' here, ' + fmtInt(n.subtree_tokens) + ' with everything below');
  lines.push('starts at token ' + fmtInt(n.depth_tokens));
  lines.push('device only ' + fmtInt(r.deviceOnly) + ' · device + host ' + fmtInt(r.both) + ' · host only ' + fmtInt(r.hostOnly));
  lines.push('hits: ' + fmtInt(n.hits) + (n.kind === 'other' ? ' (most of any)' : ''));
  lines.push('last access: ' + fmtInt(n.last_access_ops_ago) + ' index operations ago');
  if (n.locks > 0) lines.push('in use by ' + n.locks + ' running request(s)');
  return lines.join('\n');
}

function drawNode(parent, n, b) {
  const g = svg('g', { class: 'tree-node', 'data-kind': n.kind, 'data-id': n.id, tabindex: 0 });
  const y = b.depth * ROW;
  const w = Math.max(1, b.w - 1);
  if (n.kind === 'other') {
    g.appendChild(svg('rect', { x: b.x, y, width: w, height: ROW - 2, fill: 'url(#pat-other)' }));
  } else if (n.kind === 'namespace') {
    g.appendChild(svg('rect', { x: b.x, y, width: w, height: ROW - 2, fill: '#cfd6e0' }));
  } else {
    // Three bands, top to bottom: device only, device + host copy, host only.
    const r = residency(n);
    const own = Math.max(1, r.deviceOnly + r.both + r.hostOnly);
    let yy = y;
    for (const [part, fill] of [[r.deviceOnly, 'url(#pat-device)'], [r.both, 'url(#pat-both)'], [r.hostOnly, 'url(#pat-host)']]) {
      const h = (ROW - 2) * part / own;
      if (h > 0) g.appendChild(svg('rect', { x: b.x, y: yy, width: w, height: h, fill }));
      yy += h;
    }
  }
  g.appendChild(svg('rect', { class: 'frame', x: b.x, y, width: w, height: ROW - 2 }));
  if (b.w > 36 && n.label) {
    const chars = Math.floor((b.w - 8) / 6.5);
    const text = n.label.length > chars ? n.label.slice(0, Math.max(1, chars - 1)) + '…' : n.label;
    const dark = n.kind === 'node' && residency(n).hostOnly < n.tokens / 2;
    g.appendChild(svg('text', { x: b.x + 4, y: y + ROW / 2 + 3, class: dark ? 'on-dark' : 'on-light' }, text));
  }
  parent.appendChild(g);
  return g;
}

function renderTree(tree) {
  const root = document.getElementById('tree');
  clear(root);
  if (!tree || !tree.available) {
    document.getElementById('tree-summary').textContent = 'no snapshot yet';
    return;
  }
  const width = Math.max(300, document.getElementById('tree-box').clientWidth - 2);
  const { box, children, maxDepth } = layoutTree(tree.nodes, width);
  root.setAttribute('viewBox', '0 0 ' + width + ' ' + ((maxDepth + 1) * ROW));
  root.setAttribute('height', String((maxDepth + 1) * ROW));
  let leaves = 0;
  for (const n of tree.nodes) {
    const g = drawNode(root, n, box[n.id]);
    const leaf = children[n.id].length === 0 && n.kind !== 'namespace';
    if (leaf) leaves++;
    g.setAttribute('data-leaf', leaf ? '1' : '0');
    attachTip(g, nodeTip(n, tree));
  }
  root.dataset.nodes = String(tree.nodes.length);
  root.dataset.leaves = String(leaves);
  const shown = tree.shown_nodes < tree.total_nodes ? ' (largest ' + fmtInt(tree.shown_nodes) + ' shown)' : '';
  document.getElementById('tree-summary').textContent =
    fmtInt(tree.total_tokens) + ' tokens cached in ' + fmtInt(tree.total_nodes) + ' nodes' + shown + ' · ' +
    fmtInt(leaves) + ' branch ends · snapshot ' + tree.age_ms + ' ms old, taken in ' + (tree.snapshot_us / 1000).toFixed(2) + ' ms';
}

// ---- the tiers ----

function renderTierBars(tiers) {
  const box = document.getElementById('tier-bars');
  clear(box);
  for (const t of tiers.tiers) {
    if (!t.present) continue;
    const row = el('div', { class: 'tier-row', 'data-tier': t.name, 'data-used-bytes': t.used_bytes, 'data-capacity-bytes': t.capacity_bytes });
    row.appendChild(el('span', { class: 'name' }, t.name));
    const bar = el('div', { class: 'tier-bar', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': String(t.capacity_bytes), 'aria-valuenow': String(t.used_bytes), 'aria-label': t.name + ' occupancy' });
    const frac = t.capacity_bytes > 0 ? Math.min(1, t.used_bytes / t.capacity_bytes) : 0;
    const fill = el('div', { class: 'fill ' + t.name });
    fill.style.width = (t.used_bytes > 0 ? Math.max(0.5, 100 * frac) : 0).toFixed(2) + '%';  // a used tier always shows
    bar.appendChild(fill);
    row.appendChild(bar);
    const figures = fmtBytes(t.used_bytes) + ' / ' + fmtBytes(t.capacity_bytes) + ' (' + fmtPct(frac) + ')\nhits 1 min ' +
      fmtPct(t.hit_ratio_1m) + ' · 5 min ' + fmtPct(t.hit_ratio_5m);
    const fig = el('span', { class: 'figures' });
    for (const [i, line] of figures.split('\n').entries()) {
      if (i > 0) fig.appendChild(document.createElement('br'));
      fig.appendChild(document.createTextNode(line));
    }
    row.appendChild(fig);
    box.appendChild(row);
  }
}

function renderHitChart(tiers) {
  const chart = document.getElementById('hit-chart');
  clear(chart);
  const W = Math.max(200, chart.clientWidth || 400), H = 150, pad = 24;
  chart.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  const t = tiers.history.t_s;
  const legend = document.getElementById('hit-legend');
  clear(legend);
  for (const y of [0, 0.5, 1]) {
    const yy = H - pad - y * (H - 2 * pad);
    chart.appendChild(svg('line', { x1: pad, x2: W - 4, y1: yy, y2: yy, stroke: '#ddd' }));
    chart.appendChild(svg('text', { x: 2, y: yy + 4 }, (100 * y) + '%'));
  }
  if (t.length < 1) return;
  const t0 = t[0], t1 = Math.max(t[t.length - 1], t0 + 1);
  const X = (v) => pad + (v - t0) / (t1 - t0) * (W - pad - 4);
  const Y = (v) => H - pad - v * (H - 2 * pad);
  chart.appendChild(svg('text', { x: pad, y: H - 6 }, '−' + Math.round(t1 - t0) + ' s'));
  chart.appendChild(svg('text', { x: W - 30, y: H - 6 }, 'now'));
  for (const [name, series] of Object.entries(tiers.history.hit_ratio_by_tier)) {
    const present = tiers.tiers.find((x) => x.name === name);
    if (!present || !present.present) continue;
    let d = '', pen = false;
    series.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += (pen ? ' L' : ' M') + X(t[i]).toFixed(1) + ' ' + Y(v).toFixed(1);
      pen = true;
      chart.appendChild(svg('circle', { cx: X(t[i]), cy: Y(v), r: 2.5, fill: TIER_STROKE[name] }));
    });
    if (d) chart.appendChild(svg('path', { d, fill: 'none', stroke: TIER_STROKE[name], 'stroke-width': 2, 'stroke-dasharray': TIER_DASH[name], 'data-tier': name }));
    const key = el('span');
    const sw = svg('svg', { class: 'swatch', viewBox: '0 0 24 8', width: 24, height: 8 });
    sw.appendChild(svg('line', { x1: 0, x2: 24, y1: 4, y2: 4, stroke: TIER_STROKE[name], 'stroke-width': 2, 'stroke-dasharray': TIER_DASH[name] }));
    key.appendChild(sw);
    key.appendChild(document.createTextNode(name));
    legend.appendChild(key);
  }
}

function renderTables(tiers) {
  const links = document.querySelector('#links tbody');
  clear(links);
  for (const l of tiers.links) {
    const row = el('tr', { 'data-link': l.name });
    row.appendChild(el('td', {}, l.name));
    row.appendChild(el('td', { class: 'num' }, fmtBytes(Math.round(l.bytes_per_s_10s)) + '/s'));
    row.appendChild(el('td', { class: 'num' }, fmtBytes(l.bytes_total)));
    links.appendChild(row);
  }
  const counters = document.querySelector('#counters tbody');
  clear(counters);
  const rows = [];
  for (const t of tiers.tiers) if (t.present) rows.push(['evicted pages, ' + t.name, t.evicted_pages]);
  const c = tiers.counters;
  rows.push(['demoted pages (device → host)', c.demoted_pages], ['spilled chunks (host → disk/remote)', c.spilled_chunks],
            ['prefetched pages', c.prefetched_pages], ['prefetch failures', c.prefetch_failures],
            ['checksum failures', c.checksum_failures], ['forged entries', c.forged_entries], ['load failures', c.load_failures]);
  for (const [name, value] of rows) {
    const row = el('tr');
    row.appendChild(el('td', {}, name));
    row.appendChild(el('td', { class: 'num' }, fmtInt(value)));
    counters.appendChild(row);
  }
}

function renderTiers(tiers) {
  if (!tiers || !tiers.available) return;
  renderTierBars(tiers);
  renderHitChart(tiers);
  renderTables(tiers);
}

// ---- the race, per request ----

function requestLine(r) {
  const pct = r.prompt_tokens > 0 ? r.cached_tokens / r.prompt_tokens : 0;
  return '#' + r.id + ' · ' + fmtInt(r.prompt_tokens) + ' tokens, ' + fmtPct(pct) + ' cached · ' + fmtMs(r.prefill_s);
}

function renderRequestList(requests) {
  const list = document.getElementById('request-list');
  clear(list);
  for (const r of requests) {
    const item = el('li');
    const button = el('button', { type: 'button', 'aria-pressed': String(r.id === state.selected), 'data-request-id': r.id });
    button.appendChild(el('span', { class: 'decision' }, (r.decision || 'untraced').replace('_', ' ')));
    button.appendChild(document.createTextNode(' ' + requestLine(r)));
    button.addEventListener('click', () => {
      state.selected = r.id;
      renderRequests(state.requests);
    });
    item.appendChild(button);
    list.appendChild(item);
  }
}

function planText(r) {
  const parts = (r.plan || []).filter((s) => s.tokens > 0).map((s) => s.action.replace('_', ' ') + ' ' + fmtInt(s.tokens) + ' (' + s.tier + ')');
  const computed = r.prompt_tokens - r.cached_tokens;
  parts.push('compute ' + fmtInt(computed) + ' tokens');
  return parts.join(', ');
}

// One lane: a label and a group of per-layer bars.
function lane(root, name, y, count, label) {
  const g = svg('g', { class: 'lane', 'data-lane': name, 'data-layers': count });
  g.appendChild(svg('text', { x: 4, y: y + 15 }, label));
  root.appendChild(g);
  return g;
}

function timeMarker(root, x, top, bottom, text, dash, row, width) {
  root.appendChild(svg('line', { x1: x, x2: x, y1: top, y2: bottom, stroke: '#000', 'stroke-width': 1.5, 'stroke-dasharray': dash }));
  const rightHalf = x > width / 2;  // labels grow away from the nearer edge
  const dashes = dash ? ' (' + (dash === '5 3' ? 'dashed' : 'dotted') + ')' : ' (solid)';
  root.appendChild(svg('text', { x: rightHalf ? x - 3 : x + 3, y: bottom + 12 + row * 12, 'text-anchor': rightHalf ? 'end' : 'start' }, text + dashes));
}

function renderTimeline(r) {
  const root = document.getElementById('timeline');
  clear(root);
  root.dataset.requestId = r ? String(r.id) : '';
  if (!r || !r.race) {
    document.getElementById('race-summary').textContent = r ? 'request #' + r.id + ' has no trace' : 'no request yet';
    return;
  }
  const race = r.race;
  const W = Math.max(400, root.clientWidth || 800), left = 110, laneH = 22;
  // The axis shows the full-recompute estimate too, unless it would squash the rest (then it is only named).
  const seen = Math.max(r.prefill_s, r.predicted.ttft_s, 1e-6);
  const end = r.predicted.recompute_all_s <= 4 * seen ? Math.max(seen, r.predicted.recompute_all_s) : seen;
  const X = (s) => left + Math.max(0, s) / end * (W - left - 10);
  const lanes = race.loads.length + 1;
  const H = lanes * (laneH + 6) + 50;
  root.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  root.setAttribute('height', String(H));
  let y = 4;
  for (const load of race.loads) {
    const g = lane(root, 'load-' + load.tier, y, load.arrival_s.length, 'load · ' + load.tier);
    let from = r.loads_submitted_s;
    load.arrival_s.forEach((t, l) => {
      if (t < 0) return;
      const w = X(t) - X(from);  // host loads can take microseconds: keep every layer visible
      const bar = svg('rect', { x: X(from), y, width: Math.max(2, w), height: laneH, fill: TIER_FILL[load.tier], stroke: w > 4 ? '#fff' : 'none', 'data-layer': l });
      attachTip(bar, 'layer ' + l + ' from ' + load.tier + ' in place at ' + fmtMs(t));
      g.appendChild(bar);
      from = t;
    });
    y += laneH + 6;
  }
  const layers = race.compute.reduce((s, p) => s + p.layers.length, 0);
  const g = lane(root, 'compute', y, layers, 'compute');
  for (const pass of race.compute) {
    if (pass.layers.length === 0) {
      const bar = svg('rect', { x: X(pass.begin_s), y, width: Math.max(1, X(pass.end_s) - X(pass.begin_s)), height: laneH, fill: 'url(#pat-compute)' });
      attachTip(bar, 'positions ' + pass.start_pos + '–' + pass.end_pos + ': ' + fmtMs(pass.end_s - pass.begin_s));
      g.appendChild(bar);
      continue;
    }
    pass.layers.forEach((layer, l) => {
      if (layer.begin_s > layer.wait_from_s) {
        const wait = svg('rect', { x: X(layer.wait_from_s), y, width: Math.max(1, X(layer.begin_s) - X(layer.wait_from_s)), height: laneH, fill: 'url(#pat-wait)', class: 'wait' });
        attachTip(wait, 'layer ' + l + ' waited ' + fmtMs(layer.begin_s - layer.wait_from_s) + ' for its KV');
        g.appendChild(wait);
      }
      const bar = svg('rect', { x: X(layer.begin_s), y, width: Math.max(1, X(layer.end_s) - X(layer.begin_s)), height: laneH, fill: l % 2 ? '#555' : '#333', stroke: '#fff', 'data-layer': l });
      attachTip(bar, 'layer ' + l + ' computed positions ' + pass.start_pos + '–' + pass.end_pos + ' in ' + fmtMs(layer.end_s - layer.begin_s));
      g.appendChild(bar);
    });
  }
  const bottom = y + laneH + 2;
  timeMarker(root, X(r.prefill_s), 0, bottom, 'actual ' + fmtMs(r.prefill_s), '', 0, W);
  timeMarker(root, X(r.predicted.ttft_s), 0, bottom, 'planner predicted ' + fmtMs(r.predicted.ttft_s), '5 3', 1, W);
  const full = r.predicted.recompute_all_s;
  const fullText = 'full recompute would take ~' + fmtMs(full);
  if (full <= end) timeMarker(root, X(full), 0, bottom, fullText, '1 3', 2, W);
  document.getElementById('race-summary').textContent =
    '#' + r.id + ': ' + (r.decision || '').replace('_', ' ') + ' — ' + planText(r) + '. Prefill ' + fmtMs(r.prefill_s) +
    ' (planner predicted ' + fmtMs(r.predicted.ttft_s) + '; ' + fullText + '); TTFT seen by the client ' + fmtMs(r.ttft_s) +
    ', queued ' + fmtMs(r.queue_s) + '.';
}

function renderRequests(requests) {
  state.requests = requests;
  if (!requests.some((r) => r.id === state.selected)) state.selected = requests.length ? requests[0].id : null;
  renderRequestList(requests);
  renderTimeline(requests.find((r) => r.id === state.selected));
}

// ---- polling ----

let timer = null;
async function poll() {
  clearTimeout(timer);
  const [tree, tiers, recent] = await Promise.all([
    getJson('/v1/cache/tree?max_nodes=2000'), getJson('/v1/cache/tiers'), getJson('/v1/requests/recent?limit=64')]);
  if (tree) renderTree(tree);
  if (tiers) renderTiers(tiers);
  if (recent) renderRequests(recent.requests);
  if (tree && tiers && recent) {
    document.body.dataset.updates = String(Number(document.body.dataset.updates) + 1);
    setStatus('updated ' + new Date().toLocaleTimeString(), false);
  } else if (document.getElementById('key-form').hidden) {
    setStatus('some data could not be fetched; retrying', true);
  }
  timer = setTimeout(poll, POLL_MS);
}

loadKey();
poll();
