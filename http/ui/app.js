// logdex's built-in web UI: one page over the HTTP API (/api/v1/query,
// /api/v1/volume, /api/v1/tail, and /loki/api/v1/query_range for the lines
// after a record). No framework and no external request: the server embeds
// these files (http/ui_assets.h). The query's state lives in the URL, with
// the API's parameter names, so an alert's link (alerting::QueryLink) opens
// the view of its records.
'use strict';

const SEVERITIES = ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR', 'FATAL'];
const COLORS = { TRACE: '#7c4dff', DEBUG: '#1e88e5', INFO: '#2e7d32', WARN: '#ef6c00', ERROR: '#c62828', FATAL: '#8e0000' };
const PAGE = 100;
const MAX_ROWS = 5000;
const RANGES = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3, '7d': 7 * 24 * 3600e3 };

const $ = (id) => document.getElementById(id);
const form = $('bar');
const tbody = document.querySelector('#results tbody');
let query = null;        // the running query: {filters: URLSearchParams, from, to}
let cursor = null;       // next_cursor of the last page, null when there is no more
let loadingGen = -1;    // the search whose page is being fetched (-1: none)
let generation = 0;      // bumped by every new search: late answers of older ones are dropped
let tail = null;         // AbortController of the live tail
let emptyStops = 0;      // pages in a row the server's budget stopped with no record

// ---- API access, with the bearer token when the server wants one ----
function token() { return sessionStorage.getItem('logdex.token') || ''; }

// One prompt at a time: a search sends several requests (records, volume,
// live tail), and each refused one waits for the same answer. A second
// prompt would refill the field with the old token under the user's typing.
let tokenPrompt = null;
function askToken() {
  if (!tokenPrompt) {
    tokenPrompt = new Promise((resolve) => {
      const dialog = $('tokendialog');
      $('token').value = token();
      dialog.addEventListener('close', () => {
        sessionStorage.setItem('logdex.token', $('token').value.trim());
        tokenPrompt = null;
        resolve();
      }, { once: true });
      dialog.showModal();
    });
  }
  return tokenPrompt;
}

async function api(path, params, options = {}) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const sent = token();
    const headers = sent ? { Authorization: 'Bearer ' + sent } : {};
    const res = await fetch(path + '?' + params.toString(), { headers, signal: options.signal });
    if (res.status === 401) {
      // A refusal of a token the user has replaced since is answered by
      // the new one, not by another prompt.
      if (token() === sent) await askToken();
      continue;
    }
    if (options.stream) return res;
    const text = await res.text();
    let body = null;
    try { body = JSON.parse(text); } catch (e) { body = null; }
    if (!res.ok) throw new Error((body && body.error) || text || ('HTTP ' + res.status));
    return body;
  }
  throw new Error('the server refused the token');
}

function say(text, error = false) {
  const m = $('message');
  m.textContent = text;
  m.className = error ? 'error' : '';
}

// ---- the query bar and the URL ----
function filtersFromForm() {
  const p = new URLSearchParams();
  for (const name of ['app', 'host', 'contains', 'regex']) {
    const v = form.elements[name].value.trim();
    if (v) p.set(name, v);
  }
  for (const t of form.elements.tag.value.split(',').map((s) => s.trim()).filter(Boolean)) p.append('tag', t);
  for (const o of $('severity').selectedOptions) p.append('severity', o.value);
  return p;
}

function parseTime(text) {
  if (/^\d+$/.test(text)) return Number(text);
  const t = Date.parse(text);
  return Number.isNaN(t) ? null : t;
}

function rangeFromForm() {
  const r = $('range').value;
  if (r !== 'custom') {
    const now = Date.now();
    return { from: now - RANGES[r], to: now + 1, since: r };
  }
  const from = parseTime(form.elements.from.value.trim());
  const to = parseTime(form.elements.to.value.trim());
  if (from === null || to === null) throw new Error('custom range: give from and to as RFC 3339 times or ms');
  return { from, to };
}

function loadForm() {
  const p = new URLSearchParams(location.search);
  for (const name of ['app', 'host', 'contains', 'regex']) form.elements[name].value = p.get(name) || '';
  form.elements.tag.value = p.getAll('tag').join(', ');
  const sevs = p.getAll('severity').flatMap((s) => s.split(',')).map((s) => s.trim().toUpperCase());
  for (const o of $('severity').options) o.selected = sevs.includes(o.value);
  if (p.get('from') && p.get('to')) {
    $('range').value = 'custom';
    form.elements.from.value = isoOf(p.get('from'));
    form.elements.to.value = isoOf(p.get('to'));
  } else if (p.get('since') && RANGES[p.get('since')]) {
    $('range').value = p.get('since');
  }
  $('custom').hidden = $('range').value !== 'custom';
  $('live').checked = p.get('live') === '1';
  return p.has('app') || p.has('host') || p.has('tag');
}

function isoOf(v) {
  const t = parseTime(v);
  return t === null ? v : new Date(t).toISOString();
}

function saveUrl(filters, range) {
  const p = new URLSearchParams(filters);
  if (range.since) p.set('since', range.since);
  else { p.set('from', new Date(range.from).toISOString()); p.set('to', new Date(range.to).toISOString()); }
  if ($('live').checked) p.set('live', '1');
  history.replaceState(null, '', '?' + p.toString());
}

// ---- results ----
function cell(text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function row(r, fresh) {
  const tr = document.createElement('tr');
  tr.className = 'rec' + (fresh ? ' new' : '');
  tr.append(cell(r.time, 'time'), cell(r.severity, 'sev sev-' + r.severity), cell(r.app), cell(r.host),
            cell(r.message, 'msg'));
  tr.record = r;
  tr.addEventListener('click', () => toggleDetail(tr));
  return tr;
}

function toggleDetail(tr) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains('detail')) { next.remove(); return; }
  const r = tr.record;
  const d = document.createElement('tr');
  d.className = 'detail';
  const td = document.createElement('td');
  td.colSpan = 5;
  const tags = document.createElement('table');
  tags.className = 'tags';
  for (const [k, v] of Object.entries(r.tags || {})) {
    const t = document.createElement('tr');
    t.append(cell(k), cell(v));
    tags.append(t);
  }
  if (!tags.rows.length) tags.append(Object.assign(document.createElement('tr'), { textContent: 'no tags' }));
  const ctx = document.createElement('button');
  ctx.className = 'small context-button';
  ctx.textContent = 'show context';
  const out = document.createElement('div');
  out.className = 'context';
  ctx.addEventListener('click', (e) => { e.stopPropagation(); showContext(r, out).catch((err) => say(err.message, true)); });
  td.append(tags, ctx, out);
  d.append(td);
  tr.after(d);
}

// The lines around a record in its stream (app, host): about 20 before it
// (newest first from the query API, ending at its millisecond) and 20 after
// it (the Loki API's direction=forward from its millisecond, over a minute,
// then an hour if that holds fewer), merged without duplicates.
async function showContext(r, out) {
  const N = 20;
  const before = new URLSearchParams({ app: r.app, host: r.host, from: r.ts - 3600e3, to: r.ts + 1, limit: 2 * N });
  const esc = (s) => s.replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  const selector = `{app="${esc(r.app)}", host="${esc(r.host)}"}`;
  const after = (span) => api('/loki/api/v1/query_range', new URLSearchParams({
    query: selector, start: `${r.ts}000000`, end: `${r.ts + span}000000`, direction: 'forward', limit: 2 * N,
  }));
  const b = await api('/api/v1/query', before);
  let a = await after(60e3);
  const count = (x) => x.data.result.reduce((n, s) => n + s.values.length, 0);
  if (count(a) < 2 * N) a = await after(3600e3).catch(() => a);  // a busy stream: the minute is enough
  const seen = new Set();
  const lines = [];
  const add = (ts, severity, message) => {
    const key = ts + ' ' + message;
    if (!seen.has(key)) { seen.add(key); lines.push({ ts, severity, message }); }
  };
  for (const x of b.records) add(x.ts, x.severity, x.message);
  for (const s of a.data.result) {
    for (const [ns, line] of s.values) add(Number(ns.slice(0, -6)), s.stream.level.toUpperCase(), line);
  }
  lines.sort((x, y) => x.ts - y.ts);
  let at = lines.findIndex((l) => l.ts === r.ts && l.message === r.message);
  if (at < 0) at = lines.findIndex((l) => l.ts >= r.ts);
  out.textContent = '';
  for (const l of lines.slice(Math.max(0, at - N), at + N + 1)) {
    const div = document.createElement('div');
    div.textContent = `${new Date(l.ts).toISOString()}  ${l.severity.padEnd(5)}  ${l.message}`;
    if (l.ts === r.ts && l.message === r.message) div.className = 'self';
    out.append(div);
  }
}

function showStats(stats) {
  $('stats').textContent = JSON.stringify(stats, null, 1);
  $('stats').hidden = !$('showstats').checked;
}

async function loadPage() {
  if (loadingGen === generation || !query || cursor === null) return;
  const mine = generation;
  loadingGen = mine;
  try {
    const p = new URLSearchParams(query.filters);
    p.set('from', query.from);
    p.set('to', query.to);
    p.set('limit', PAGE);
    if (cursor) p.set('cursor', cursor);
    const answer = await api('/api/v1/query', p);
    if (mine !== generation) return;
    for (const r of answer.records) tbody.append(row(r, false));
    cursor = answer.next_cursor || null;
    showStats(answer.stats);
    // A page the server's budget stopped early continues from its cursor;
    // after a few in a row with nothing found, continuing waits for a click.
    emptyStops = answer.stopped_early && answer.records.length === 0 ? emptyStops + 1 : 0;
    const n = tbody.querySelectorAll('tr.rec').length;
    $('more').textContent = cursor ? `${n} records; scroll for more` : `${n} records`;
    if (emptyStops >= 5) $('more').textContent = `${n} records; search on (click)`;
    say(emptyStops >= 5 ? `the server stopped ${emptyStops} pages in a row at its ${answer.stopped_early} budget ` +
        'without finding a record: click "search on" below, or narrow the query' : '');
  } catch (e) {
    if (mine === generation) { say(e.message, true); cursor = null; }
  } finally {
    if (loadingGen === mine) loadingGen = -1;
  }
  if (mine === generation && cursor && moreVisible() && emptyStops < 5) loadPage();
}

function moreVisible() {
  const r = $('more').getBoundingClientRect();
  return r.top < window.innerHeight + 200;
}

// ---- the volume histogram ----
async function loadVolume(mine) {
  const svg = $('histogram');
  const p = new URLSearchParams(query.filters);
  p.set('from', query.from);
  p.set('to', query.to);
  let v;
  try { v = await api('/api/v1/volume', p); } catch (e) { if (mine === generation) svg.innerHTML = ''; return; }
  if (mine !== generation) return;
  const width = svg.clientWidth || 800, height = 90;
  const n = v.buckets.length;
  const max = Math.max(1, ...v.buckets.map((b) => b.total));
  const w = width / Math.max(1, n);
  const ns = 'http://www.w3.org/2000/svg';
  svg.innerHTML = '';
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('preserveAspectRatio', 'none');  // the bars stretch with the page; x maps linearly to time
  v.buckets.forEach((b, i) => {
    let y = height;
    for (const s of SEVERITIES) {
      const c = b.counts[s] || 0;
      if (!c) continue;
      const h = (c / max) * (height - 4);
      const rect = document.createElementNS(ns, 'rect');
      Object.entries({ x: i * w, y: y - h, width: Math.max(1, w - 1), height: h, fill: COLORS[s] })
        .forEach(([k, val]) => rect.setAttribute(k, val));
      const title = document.createElementNS(ns, 'title');
      title.textContent = `${b.time}: ${c} ${s}`;
      rect.append(title);
      svg.append(rect);
      y -= h;
    }
  });
  // The bars cover the buckets' grid, which starts at or before `from`.
  svg.dataset.from = n ? v.buckets[0].start : query.from;
  svg.dataset.to = n ? v.buckets[n - 1].start + v.step_ms : query.to;
  svg.dataset.queryFrom = query.from;
  svg.dataset.queryTo = query.to;
}

function zoomable() {
  const svg = $('histogram');
  let start = null, sel = null;
  const xOf = (e) => { const r = svg.getBoundingClientRect(); return Math.min(Math.max(e.clientX - r.left, 0), r.width); };
  svg.addEventListener('mousedown', (e) => {
    start = xOf(e);
    sel = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
    sel.setAttribute('class', 'sel');
    sel.setAttribute('y', 0);
    sel.setAttribute('height', 90);
    svg.append(sel);
  });
  svg.addEventListener('mousemove', (e) => {
    if (start === null) return;
    const x = xOf(e), r = svg.getBoundingClientRect(), k = (svg.viewBox.baseVal.width || r.width) / r.width;  // viewBox units per px
    sel.setAttribute('x', Math.min(start, x) * k);
    sel.setAttribute('width', Math.abs(x - start) * k);
  });
  window.addEventListener('mouseup', (e) => {
    if (start === null) return;
    const x = xOf(e), r = svg.getBoundingClientRect();
    const a = Math.min(start, x) / r.width, b = Math.max(start, x) / r.width;
    start = null;
    if (sel) sel.remove();
    if (b - a < 0.005 || !svg.dataset.from) return;  // a click, not a drag
    const from = Number(svg.dataset.from), to = Number(svg.dataset.to);
    const lo = Math.max(Number(svg.dataset.queryFrom), Math.floor(from + a * (to - from)));
    const hi = Math.min(Number(svg.dataset.queryTo), Math.ceil(from + b * (to - from)));
    if (hi <= lo) return;
    $('range').value = 'custom';
    $('custom').hidden = false;
    form.elements.from.value = new Date(lo).toISOString();
    form.elements.to.value = new Date(hi).toISOString();
    search();
  });
}

// ---- live tail ----
function stopTail() {
  if (tail) tail.abort();
  tail = null;
}

async function startTail() {
  stopTail();
  const controller = new AbortController();
  tail = controller;
  const filters = filtersFromForm();
  say('live: new records appear at the top');
  try {
    const res = await api('/api/v1/tail', filters, { stream: true, signal: controller.signal });
    if (!res.ok) throw new Error(await res.text());
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    let ended = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        if (!ended && !controller.signal.aborted) {
          say('live tail: the connection closed; tick "live tail" to start again', true);
          $('live').checked = false;
        }
        break;
      }
      pending += decoder.decode(value, { stream: true });
      let end;
      while ((end = pending.indexOf('\n\n')) >= 0) {
        const block = pending.slice(0, end);
        pending = pending.slice(end + 2);
        let event = 'message', data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7);
          if (line.startsWith('data: ')) data += line.slice(6);
        }
        if (!data) continue;
        const body = JSON.parse(data);
        if (event === 'message') {
          tbody.prepend(row(body, true));
          while (tbody.rows.length > MAX_ROWS) tbody.lastElementChild.remove();
        } else if (event === 'gap') {
          say(`the server skipped ${body.missed_batches} batches for live tail: some records are missing here`, true);
        } else if (event === 'end') {
          ended = true;
          say('live tail ended: ' + body.reason, true);
          $('live').checked = false;
        }
      }
    }
  } catch (e) {
    if (!controller.signal.aborted) { say('live tail: ' + e.message, true); $('live').checked = false; }
  }
}

// ---- recent alerts (GET /api/v1/alerts): a group opens its records ----
async function showAlerts() {
  const panel = $('alerts');
  panel.hidden = !panel.hidden;
  if (panel.hidden) return;
  const list = $('alertlist');
  list.textContent = '';
  let a;
  try { a = await api('/api/v1/alerts', new URLSearchParams({ since: '7d', limit: 50 })); } catch (e) {
    list.append(Object.assign(document.createElement('li'), { textContent: e.message }));
    return;
  }
  $('pending').textContent = a.pending.length ? `· ${a.pending.length} notifications waiting for delivery` : '';
  if (!a.groups.length) list.append(Object.assign(document.createElement('li'), { textContent: 'none' }));
  for (const g of a.groups) {
    const li = document.createElement('li');
    li.className = 'alert';
    const sev = Object.assign(document.createElement('span'), { className: 'sev sev-' + g.severity, textContent: g.severity });
    const count = Object.assign(document.createElement('span'), { className: 'count', textContent: ` ×${g.sent + g.suppressed} ` });
    li.append(sev, ` ${g.app}/${g.host} ${g.time}`, count, g.template || g.message);
    li.addEventListener('click', () => {
      form.elements.app.value = g.app;
      form.elements.host.value = '';  // a group may span hosts
      form.elements.tag.value = '';
      form.elements.contains.value = '';
      form.elements.regex.value = '';
      for (const o of $('severity').options) o.selected = o.value === g.severity;
      $('range').value = 'custom';
      $('custom').hidden = false;
      form.elements.from.value = new Date(g.ts - 60e3).toISOString();
      form.elements.to.value = new Date(g.ts + 60e3).toISOString();
      panel.hidden = true;
      search();
    });
    list.append(li);
  }
}
$('alertsbutton').addEventListener('click', () => showAlerts().catch((e) => say(e.message, true)));

// ---- search ----
function search() {
  stopTail();
  let range;
  try { range = rangeFromForm(); } catch (e) { say(e.message, true); return; }
  const filters = filtersFromForm();
  saveUrl(filters, range);
  generation++;
  emptyStops = 0;
  query = { filters, from: Math.floor(range.from), to: Math.ceil(range.to) };
  cursor = '';
  tbody.textContent = '';
  $('more').textContent = '';
  say('searching…');
  loadPage();
  loadVolume(generation);
  if ($('live').checked) startTail();
}

form.addEventListener('submit', (e) => { e.preventDefault(); search(); });
$('range').addEventListener('change', () => { $('custom').hidden = $('range').value !== 'custom'; });
$('live').addEventListener('change', () => {
  if ($('live').checked) startTail(); else { stopTail(); say(''); }
  if (query) {
    try { saveUrl(query.filters, rangeFromForm()); } catch (e) { /* a custom range being typed */ }
  }
});
$('showstats').addEventListener('change', () => { $('stats').hidden = !$('showstats').checked; });
new IntersectionObserver((entries) => { if (entries.some((e) => e.isIntersecting) && emptyStops < 5) loadPage(); }).observe($('more'));
$('more').addEventListener('click', () => { if (emptyStops >= 5) { emptyStops = 0; loadPage(); } });
zoomable();
if (loadForm()) search();
else say('Name an app, a host or a tag (k=v) and search.');
