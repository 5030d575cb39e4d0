// Warren's management UI: a small single-page app over the RabbitMQ-style
// management HTTP API that the broker serves on the same origin. Plain DOM,
// no framework and no build step, so the broker can embed it as-is.
'use strict';

const $ = (sel) => document.querySelector(sel);
const $$ = (sel) => Array.from(document.querySelectorAll(sel));
const enc = encodeURIComponent;

const TABS = ['overview', 'connections', 'channels', 'exchanges', 'queues', 'streams', 'admin'];
const AUTH_KEY = 'warren.auth';
const USER_KEY = 'warren.user';
const HISTORY = 60; // chart samples kept (one per refresh)
const ARM_MS = 5000; // how long a destructive button waits for its second click

const state = {
  tab: 'overview',
  period: 5, // seconds between refreshes
  timer: null,
  busy: false,
  again: false,
  history: [], // {ready, unacked, publish, deliver, ack} per refresh
  vhosts: ['/'],
  queue: null, // {vhost, name} shown in the queue detail box
  exchange: null, // {vhost, name} shown in the exchange detail box
  armed: null, // {key, until}: a destructive button waiting for confirmation
  rendered: {}, // table id -> signature of its last rendering
  downloadUrl: null,
};

// ---------------------------------------------------------------- helpers

/** Builds an element; `on*` attributes become listeners, children may be text or nodes. */
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) if (kid != null) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}

function fmtNum(n) {
  return n == null || n === '' ? '' : Number(n).toLocaleString('en');
}

function fmtBytes(n) {
  if (n == null) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  for (n = Number(n); n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
}

/** Milliseconds as the two largest units: "2d 3h", "4m 5s"; blank when unknown. */
function fmtUptime(ms) {
  if (ms == null || ms === '') return '';
  let s = Math.floor(Number(ms) / 1000);
  const parts = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]].map(([u, n]) => {
    const v = Math.floor(s / n);
    s -= v * n;
    return [v, u];
  });
  const first = Math.max(0, parts.findIndex(([v]) => v > 0));
  return parts.slice(first, first + 2).map(([v, u]) => `${v}${u}`).join(' ');
}

/** `stats.<key>_details.rate` as "1.5/s"; blank when the broker sent no stats. */
function fmtRate(stats, key) {
  const d = stats && stats[key + '_details'];
  return d && d.rate != null ? Number(d.rate).toFixed(1) + '/s' : '';
}

const yesNo = (b) => (b == null ? '' : b ? 'yes' : 'no');

/** Lists may come back paginated ({items: [...]}) when query parameters ask for it. */
const list = (data) => (Array.isArray(data) ? data : (data && data.items) || []);

/** The Basic credentials, UTF-8 safe (btoa alone only takes Latin-1). */
function basic(user, pass) {
  let bin = '';
  for (const b of new TextEncoder().encode(user + ':' + pass)) bin += String.fromCharCode(b);
  return btoa(bin);
}

function qpath(vhost, name) {
  return '/queues/' + enc(vhost) + '/' + enc(name);
}

/** The default exchange "" is addressed as amq.default in paths. */
function xpath(vhost, name) {
  return '/exchanges/' + enc(vhost) + '/' + enc(name === '' ? 'amq.default' : name);
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, reason, what) {
    super(status ? `${reason} (${what}: HTTP ${status})` : `${reason} (${what})`);
    this.status = status;
    this.reason = reason;
  }
}

/**
 * One management API call. credentials:'omit' keeps the browser from popping
 * its own Basic-auth dialog on a 401; we send the Authorization header ourselves.
 */
async function api(method, path, body, headers = {}) {
  const init = { method, credentials: 'omit', cache: 'no-store', headers: { ...headers } };
  init.headers.Authorization = 'Basic ' + sessionStorage.getItem(AUTH_KEY);
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const what = method + ' /api' + path;
  let res;
  try {
    res = await fetch('/api' + path, init);
  } catch (e) {
    throw new ApiError(0, 'cannot reach the broker: ' + e.message, what);
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!res.ok) {
    const reason = data && typeof data === 'object' ? data.reason || data.error : text || res.statusText;
    throw new ApiError(res.status, reason || 'request failed', what);
  }
  return data;
}

// ---------------------------------------------------------------- banners

function showError(msg) {
  $('#error-text').textContent = msg;
  $('#error').hidden = false;
}

function notice(msg) {
  $('#notice').textContent = msg;
  $('#notice').hidden = false;
}

function clearBanners() {
  $('#error').hidden = true;
  $('#notice').hidden = true;
}

/** Wraps a user action: stops form submission, clears old banners, reports failures. */
function action(fn) {
  return async (ev) => {
    if (ev && ev.preventDefault) ev.preventDefault();
    clearBanners();
    try {
      await fn(ev);
    } catch (e) {
      showError(e.message);
    }
  };
}

// ---------------------------------------------------------------- two-step buttons
// Destructive actions ask for a second click instead of window.confirm(), which
// blocks the page and cannot be driven in a headless test without a handler.

const isArmed = (key) => state.armed && state.armed.key === key && Date.now() < state.armed.until;

function paintArmed(btn) {
  const on = isArmed(btn.dataset.armKey);
  btn.textContent = on ? 'Click again to confirm' : btn.dataset.label;
  btn.classList.toggle('armed', on);
}

/** Makes `btn` run `fn` on its second click within ARM_MS; `key` names what it acts on. */
function twoStep(btn, key, fn) {
  btn.dataset.label = btn.dataset.label || btn.textContent;
  btn.dataset.armKey = key;
  btn.onclick = action(async () => {
    if (isArmed(btn.dataset.armKey)) {
      state.armed = null;
      paintArmed(btn);
      await fn();
    } else {
      state.armed = { key: btn.dataset.armKey, until: Date.now() + ARM_MS };
      paintArmed(btn);
      // On expiry, disarm and repaint whichever copy of the button a refresh left in the page.
      setTimeout(() => {
        if (state.armed && Date.now() >= state.armed.until) state.armed = null;
        $$('button.armed').forEach(paintArmed);
      }, ARM_MS + 50);
    }
  });
  paintArmed(btn);
  return btn;
}

function dangerButton(label, key, fn, attrs = {}) {
  return twoStep(h('button', { type: 'button', class: 'danger small', ...attrs }, label), key, fn);
}

// ---------------------------------------------------------------- tables

/**
 * Renders rows into table#id. columns: [title, field-name | row => value, data-col].
 * Skips the work when nothing changed, so a fast refresh does not replace rows
 * (and buttons) under the user's pointer.
 */
function renderTable(id, columns, rows, rowAttrs = () => ({}), empty = 'Nothing to show.') {
  const table = document.getElementById(id);
  const sig = JSON.stringify([rows, state.armed && state.armed.key, state.queue, state.exchange]);
  if (state.rendered[id] === sig) return;
  state.rendered[id] = sig;
  const colName = (c) => c[2] || (typeof c[1] === 'string' ? c[1] : c[0].toLowerCase().replace(/\W+/g, '_'));
  const head = h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c[0]))));
  const body = h('tbody');
  for (const row of rows) {
    const cells = columns.map((c) => {
      const v = typeof c[1] === 'function' ? c[1](row) : row[c[1]];
      return h('td', { 'data-col': colName(c) }, typeof v === 'boolean' ? yesNo(v) : v);
    });
    body.append(h('tr', rowAttrs(row), cells));
  }
  if (!rows.length) body.append(h('tr', { class: 'empty' }, h('td', { colspan: columns.length }, empty)));
  table.replaceChildren(head, body);
}

/** Shows an empty table whose endpoint failed, and the failure in the banner. */
function failTable(id, columns, e) {
  state.rendered[id] = null;
  renderTable(id, columns, [], undefined, 'Unavailable.');
  showError(e.message);
}

// ---------------------------------------------------------------- overview

async function loadOverview() {
  const ov = await api('GET', '/overview');
  sample(ov);
  if (state.tab !== 'overview') return;
  renderTotals(ov);
  drawCharts();
  try {
    renderNodes(list(await api('GET', '/nodes')));
  } catch (e) {
    failTable('nodes-table', NODE_COLS, e);
  }
}

/** One chart point per refresh, whatever tab is shown, so the charts keep history. */
function sample(ov) {
  const qt = ov.queue_totals || {};
  const ms = ov.message_stats || {};
  const rate = (k) => Number((ms[k + '_details'] || {}).rate) || 0;
  state.history.push({
    ready: Number(qt.messages_ready) || 0,
    unacked: Number(qt.messages_unacknowledged) || 0,
    publish: rate('publish'),
    deliver: rate('deliver_get'),
    ack: rate('ack'),
  });
  if (state.history.length > HISTORY) state.history.shift();
}

function renderTotals(ov) {
  const ot = ov.object_totals || {};
  const qt = ov.queue_totals || {};
  const items = [
    ['connections', 'Connections', ot.connections],
    ['channels', 'Channels', ot.channels],
    ['exchanges', 'Exchanges', ot.exchanges],
    ['queues', 'Queues', ot.queues],
    ['consumers', 'Consumers', ot.consumers],
    ['messages_ready', 'Ready', qt.messages_ready],
    ['messages_unacknowledged', 'Unacked', qt.messages_unacknowledged],
    ['messages', 'Total messages', qt.messages],
  ];
  const product = [ov.product_name || 'RabbitMQ', ov.product_version || ov.rabbitmq_version].filter(Boolean).join(' ');
  $('#overview-totals').replaceChildren(
    ...items.map(([key, label, v]) =>
      h('div', { class: 'total', 'data-total': key }, h('span', { class: 'value' }, v == null ? '–' : fmtNum(v)), h('span', { class: 'label' }, label))
    ),
    h('div', { class: 'product' }, product, ov.node ? h('br') : null, ov.node || '')
  );
}

const NODE_COLS = [
  ['Name', 'name'],
  ['Type', 'type'],
  ['Running', 'running'],
  ['Uptime', (n) => fmtUptime(n.uptime), 'uptime'],
  ['Memory', (n) => (n.mem_used == null ? '' : `${fmtBytes(n.mem_used)} / ${fmtBytes(n.mem_limit)}`), 'memory'],
  ['Disk free limit', (n) => fmtBytes(n.disk_free_limit), 'disk_free_limit'],
  ['File descriptors', 'fd_total'],
  ['Processors', 'processors'],
  ['Alarms', (n) => [n.mem_alarm && 'memory', n.disk_free_alarm && 'disk'].filter(Boolean).join(', ') || 'none', 'alarms'],
  ['Partitions', (n) => (n.partitions || []).join(', ') || 'none', 'partitions'],
];

function renderNodes(nodes) {
  renderTable('nodes-table', NODE_COLS, nodes, (n) => ({ 'data-name': n.name }));
}

// ---------------------------------------------------------------- charts

function drawCharts() {
  const pick = (k) => state.history.map((s) => s[k]);
  drawChart($('#chart-queued'), [
    { label: 'Ready', color: '#d4a017', values: pick('ready') },
    { label: 'Unacked', color: '#3070c0', values: pick('unacked') },
  ], 0);
  drawChart($('#chart-rates'), [
    { label: 'Publish', color: '#c0392b', values: pick('publish') },
    { label: 'Deliver / get', color: '#27ae60', values: pick('deliver') },
    { label: 'Ack', color: '#8e44ad', values: pick('ack') },
  ], 1);
}

/**
 * The gap between the chart's 4 horizontal grid lines: raw rounded up to
 * 1, 2, 2.5 or 5 times a power of ten, and whole for message counts.
 */
function niceStep(raw, whole) {
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= raw * 0.999999);
  return whole ? Math.max(1, Math.ceil(step)) : step;
}

const axisLabel = (v) => String(Number(v.toFixed(2)));

/** A line chart of the last HISTORY samples; the newest point sits at the right edge. */
function drawChart(canvas, series, decimals) {
  const ctx = canvas.getContext('2d');
  const W = canvas.width;
  const H = canvas.height;
  const L = 50, R = 12, T = 28, B = 22;
  const pw = W - L - R;
  const ph = H - T - B;
  ctx.clearRect(0, 0, W, H);
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, W, H);
  const peak = Math.max(0, ...series.flatMap((s) => s.values));
  const max = 4 * niceStep(peak > 0 ? peak / 4 : 0.25, decimals === 0);
  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = Math.round(T + (ph * i) / 4) + 0.5;
    ctx.strokeStyle = i === 4 ? '#9aa3ad' : '#e4e7eb';
    ctx.beginPath();
    ctx.moveTo(L, y);
    ctx.lineTo(W - R, y);
    ctx.stroke();
    ctx.fillStyle = '#5b6570';
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    ctx.fillText(axisLabel((max * (4 - i)) / 4), L - 6, y);
  }
  ctx.textAlign = 'left';
  ctx.textBaseline = 'top';
  ctx.fillText(`last ${HISTORY * state.period} s`, L, H - B + 6);
  const step = pw / (HISTORY - 1);
  const xy = (vals, i) => [L + pw - (vals.length - 1 - i) * step, T + ph - (ph * vals[i]) / max];
  let lx = L;
  for (const s of series) {
    ctx.strokeStyle = ctx.fillStyle = s.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.values.forEach((_, i) => ctx[i ? 'lineTo' : 'moveTo'](...xy(s.values, i)));
    ctx.stroke();
    if (s.values.length) {
      const [x, y] = xy(s.values, s.values.length - 1);
      ctx.beginPath();
      ctx.arc(x, y, 3, 0, 2 * Math.PI);
      ctx.fill();
    }
    // Legend across the top: swatch, name, latest value.
    const last = s.values.length ? s.values[s.values.length - 1] : 0;
    const text = `${s.label}: ${last.toFixed(decimals)}`;
    ctx.fillRect(lx, 8, 10, 10);
    ctx.fillStyle = '#26313c';
    ctx.textBaseline = 'top';
    ctx.fillText(text, lx + 14, 7);
    lx += 28 + ctx.measureText(text).width;
  }
  canvas.dataset.samples = String(state.history.length);
}

// ---------------------------------------------------------------- connections and channels

async function loadConnections() {
  const cols = [
    ['Name', 'name'],
    ['User', 'user'],
    ['Virtual host', 'vhost'],
    ['Protocol', 'protocol'],
    ['State', 'state'],
    ['Channels', 'channels'],
    ['Client', (c) => `${c.peer_host}:${c.peer_port}`, 'peer'],
    ['From client', (c) => fmtBytes(c.recv_oct), 'recv_oct'],
    ['To client', (c) => fmtBytes(c.send_oct), 'send_oct'],
    ['', (c) => dangerButton('Close', 'close:' + c.name, () => closeConnection(c.name), { 'data-action': 'close' }), 'actions'],
  ];
  try {
    const conns = list(await api('GET', '/connections'));
    renderTable('connections-table', cols, conns, (c) => ({ 'data-name': c.name, 'data-peer-port': c.peer_port }), 'No connections.');
  } catch (e) {
    failTable('connections-table', cols, e);
  }
}

async function closeConnection(name) {
  await api('DELETE', '/connections/' + enc(name), undefined, { 'X-Reason': 'closed from the management UI' });
  notice('Connection closed.');
  await loadConnections();
}

async function loadChannels() {
  const chCols = [
    ['Channel', 'name'],
    ['Connection', (c) => (c.connection_details || {}).name, 'connection'],
    ['User', 'user'],
    ['Virtual host', 'vhost'],
    ['Number', 'number'],
    ['Consumers', 'consumer_count'],
    ['Unacked', 'messages_unacknowledged'],
    ['Prefetch', 'prefetch_count'],
    ['Confirm', 'confirm'],
    ['State', 'state'],
  ];
  const coCols = [
    ['Queue', (c) => (c.queue || {}).name, 'queue'],
    ['Virtual host', (c) => (c.queue || {}).vhost, 'vhost'],
    ['Consumer tag', 'consumer_tag'],
    ['Channel', (c) => (c.channel_details || {}).name, 'channel'],
    ['Ack required', 'ack_required'],
    ['Prefetch', 'prefetch_count'],
  ];
  // Loaded separately: one endpoint failing must not blank the other.
  await Promise.all([
    api('GET', '/channels').then(
      (r) => renderTable('channels-table', chCols, list(r), (c) => ({ 'data-name': c.name }), 'No channels.'),
      (e) => failTable('channels-table', chCols, e)
    ),
    api('GET', '/consumers').then(
      (r) => renderTable('consumers-table', coCols, list(r), (c) => ({ 'data-tag': c.consumer_tag }), 'No consumers.'),
      (e) => failTable('consumers-table', coCols, e)
    ),
  ]);
}

// ---------------------------------------------------------------- exchanges

async function loadExchanges() {
  const cols = [
    ['Virtual host', 'vhost'],
    ['Name', (x) => h('button', { type: 'button', class: 'link', 'data-exchange': x.name, onclick: () => showExchange(x) }, x.name || '(AMQP default)'), 'name'],
    ['Type', 'type'],
    ['Durable', 'durable'],
    ['Auto-delete', 'auto_delete'],
    ['Internal', 'internal'],
    ['Rate in', (x) => fmtRate(x.message_stats, 'publish_in'), 'rate_in'],
    ['Rate out', (x) => fmtRate(x.message_stats, 'publish_out'), 'rate_out'],
  ];
  try {
    const xs = list(await api('GET', '/exchanges'));
    const sel = state.exchange;
    const attrs = (x) => ({ 'data-vhost': x.vhost, 'data-name': x.name, class: sel && sel.vhost === x.vhost && sel.name === x.name ? 'selected' : null });
    renderTable('exchanges-table', cols, xs, attrs, 'No exchanges.');
  } catch (e) {
    failTable('exchanges-table', cols, e);
  }
}

function showExchange(x) {
  state.exchange = { vhost: x.vhost, name: x.name };
  state.armed = null;
  $('#exchange-detail-name').textContent = `${x.name || '(AMQP default)'} in ${x.vhost}`;
  $('#exchange-detail').hidden = false;
  $('#exchange-delete-btn').hidden = x.name === ''; // the default exchange cannot be deleted
  twoStep($('#exchange-delete-btn'), 'xdel:' + x.vhost + ':' + x.name, deleteExchange);
  loadExchanges();
}

async function addExchange() {
  const vhost = $('#exchange-vhost').value;
  const name = $('#exchange-name').value.trim();
  const body = { type: $('#exchange-type').value, durable: $('#exchange-durable').checked, auto_delete: false, internal: false, arguments: {} };
  await api('PUT', xpath(vhost, name), body);
  notice(`Exchange ${name} added.`);
  $('#exchange-name').value = '';
  await loadExchanges();
}

/** Publishes through the HTTP API and says whether the message was routed. */
async function publish(vhost, exchange, routingKey, payload, deliveryMode) {
  const body = { properties: { delivery_mode: deliveryMode }, routing_key: routingKey, payload, payload_encoding: 'string' };
  const r = await api('POST', xpath(vhost, exchange) + '/publish', body);
  notice(r && r.routed ? 'Message published.' : 'Message published, but not routed.');
}

async function publishToExchange() {
  const x = state.exchange;
  await publish(x.vhost, x.name, $('#exchange-publish-key').value, $('#exchange-publish-payload').value, Number($('#exchange-publish-dm').value));
}

async function deleteExchange() {
  const x = state.exchange;
  await api('DELETE', xpath(x.vhost, x.name));
  state.exchange = null;
  $('#exchange-detail').hidden = true;
  notice(`Exchange ${x.name} deleted.`);
  await loadExchanges();
}

// ---------------------------------------------------------------- queues

async function loadQueues() {
  const cols = [
    ['Virtual host', 'vhost'],
    ['Name', (q) => h('button', { type: 'button', class: 'link', 'data-queue': q.name, onclick: () => showQueue(q) }, q.name), 'name'],
    ['Type', 'type'],
    ['Features', (q) => [q.durable && 'D', q.auto_delete && 'AD', q.exclusive && 'Excl'].filter(Boolean).join(' '), 'features'],
    ['Policy', (q) => q.policy || '', 'policy'],
    ['State', 'state'],
    // A quorum queue's leader, and its members online of all (their names on hover).
    ['Leader', (q) => (q.type === 'quorum' ? q.leader || 'none' : ''), 'leader'],
    ['Members', (q) => (q.type === 'quorum' ? h('span', { title: (q.members || []).map((m) => ((q.online || []).includes(m) ? m : m + ' (down)')).join(', ') }, `${(q.online || []).length}/${(q.members || []).length} online`) : ''), 'members'],
    ['Consumers', 'consumers'],
    ['Ready', (q) => fmtNum(q.messages_ready), 'messages_ready'],
    ['Unacked', (q) => fmtNum(q.messages_unacknowledged), 'messages_unacknowledged'],
    ['Total', (q) => fmtNum(q.messages), 'messages'],
    ['Incoming', (q) => fmtRate(q.message_stats, 'publish'), 'rate_publish'],
    ['Deliver / get', (q) => fmtRate(q.message_stats, 'deliver_get'), 'rate_deliver_get'],
    ['Ack', (q) => fmtRate(q.message_stats, 'ack'), 'rate_ack'],
  ];
  try {
    const qs = list(await api('GET', '/queues')).filter((q) => q.type !== 'stream');
    const sel = state.queue;
    const attrs = (q) => ({ 'data-vhost': q.vhost, 'data-name': q.name, class: sel && sel.vhost === q.vhost && sel.name === q.name ? 'selected' : null });
    renderTable('queues-table', cols, qs, attrs, 'No queues.');
  } catch (e) {
    failTable('queues-table', cols, e);
  }
}

function showQueue(q) {
  state.queue = { vhost: q.vhost, name: q.name };
  state.armed = null;
  const key = q.vhost + ':' + q.name;
  $('#queue-detail-name').textContent = `${q.name} in ${q.vhost}`;
  $('#queue-get-result').replaceChildren();
  $('#queue-detail').hidden = false;
  twoStep($('#queue-purge-btn'), 'purge:' + key, purgeQueue);
  twoStep($('#queue-delete-btn'), 'qdel:' + key, deleteQueue);
  loadQueues();
}

/** Builds the PUT body for a queue of the given type (streams and quorum queues must be durable). */
async function declareQueue(vhost, name, type, durable, extraArgs = {}) {
  const body = { durable: type === 'classic' ? durable : true, auto_delete: false, arguments: { 'x-queue-type': type, ...extraArgs } };
  await api('PUT', qpath(vhost, name), body);
}

async function addQueue() {
  const name = $('#queue-name').value.trim();
  const type = $('#queue-type').value;
  await declareQueue($('#queue-vhost').value, name, type, $('#queue-durable').checked);
  notice(type === 'stream' ? `Stream ${name} added (see the Streams tab).` : `Queue ${name} added.`);
  $('#queue-name').value = '';
  await loadQueues();
}

/** Messages for a queue go through the default exchange, keyed by the queue's name. */
async function publishToQueue() {
  const q = state.queue;
  await publish(q.vhost, '', q.name, $('#queue-publish-payload').value, Number($('#queue-publish-dm').value));
  await loadQueues();
}

async function getMessages() {
  const q = state.queue;
  const body = { count: Math.max(1, Number($('#queue-get-count').value) || 1), ackmode: $('#queue-get-ackmode').value, encoding: 'auto', truncate: 50000 };
  renderMessages(list(await api('POST', qpath(q.vhost, q.name) + '/get', body)));
  await loadQueues();
}

/** RabbitMQ sends [] rather than {} for a message without properties. */
function fmtProps(p) {
  if (!p || Array.isArray(p) || !Object.keys(p).length) return '(none)';
  return Object.entries(p).map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`).join('\n');
}

function renderMessages(msgs) {
  const box = $('#queue-get-result');
  if (!msgs.length) {
    box.replaceChildren(h('p', { class: 'muted' }, 'Queue is empty.'));
    return;
  }
  const kv = (rows) => h('table', { class: 'kv' }, rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))));
  box.replaceChildren(
    ...msgs.map((m, i) =>
      h('div', { class: 'message', 'data-index': i },
        h('h4', {}, `Message ${i + 1}`),
        kv([
          ['Exchange', m.exchange || '(AMQP default)'],
          ['Routing key', m.routing_key],
          ['Redelivered', yesNo(m.redelivered)],
          ['Messages left', fmtNum(m.message_count)],
          ['Properties', h('pre', {}, fmtProps(m.properties))],
          ['Payload', `${fmtNum(m.payload_bytes)} bytes, encoding: ${m.payload_encoding}`],
        ]),
        h('pre', { class: 'payload' }, m.payload))
    )
  );
}

async function purgeQueue() {
  const q = state.queue;
  await api('DELETE', qpath(q.vhost, q.name) + '/contents');
  notice(`Queue ${q.name} purged.`);
  await loadQueues();
}

async function deleteQueue() {
  const q = state.queue;
  await api('DELETE', qpath(q.vhost, q.name));
  state.queue = null;
  $('#queue-detail').hidden = true;
  notice(`Queue ${q.name} deleted.`);
  await loadQueues();
}

// ---------------------------------------------------------------- streams

async function loadStreams() {
  const args = (q) => Object.entries(q.arguments || {}).filter(([k]) => k !== 'x-queue-type').map(([k, v]) => `${k}=${v}`).join(', ');
  const cols = [
    ['Virtual host', 'vhost'],
    ['Name', 'name'],
    ['State', 'state'],
    ['Messages', (q) => fmtNum(q.messages), 'messages'],
    ['Consumers', 'consumers'],
    ['Arguments', args, 'arguments'],
    ['', (q) => dangerButton('Delete', 'sdel:' + q.vhost + ':' + q.name, () => deleteStream(q), { 'data-action': 'delete' }), 'actions'],
  ];
  try {
    const ss = list(await api('GET', '/queues')).filter((q) => q.type === 'stream');
    renderTable('streams-table', cols, ss, (q) => ({ 'data-vhost': q.vhost, 'data-name': q.name }), 'No streams.');
  } catch (e) {
    failTable('streams-table', cols, e);
  }
}

async function addStream() {
  const name = $('#stream-name').value.trim();
  const extra = {};
  const bytes = $('#stream-max-bytes').value;
  if (bytes !== '') extra['x-max-length-bytes'] = Number(bytes);
  const age = $('#stream-max-age').value.trim();
  if (age) extra['x-max-age'] = age;
  await declareQueue($('#stream-vhost').value, name, 'stream', true, extra);
  notice(`Stream ${name} added.`);
  for (const id of ['#stream-name', '#stream-max-bytes', '#stream-max-age']) $(id).value = '';
  await loadStreams();
}

async function deleteStream(q) {
  await api('DELETE', qpath(q.vhost, q.name));
  notice(`Stream ${q.name} deleted.`);
  await loadStreams();
}

// ---------------------------------------------------------------- admin

async function loadAdmin() {
  const uCols = [['Name', 'name'], ['Tags', (u) => (Array.isArray(u.tags) ? u.tags.join(', ') : u.tags), 'tags']];
  const vCols = [
    ['Name', 'name'],
    ['Description', 'description'],
    ['Ready', (v) => fmtNum(v.messages_ready), 'messages_ready'],
    ['Unacked', (v) => fmtNum(v.messages_unacknowledged), 'messages_unacknowledged'],
    ['Total', (v) => fmtNum(v.messages), 'messages'],
  ];
  const pCols = [
    ['Virtual host', 'vhost'],
    ['Name', 'name'],
    ['Pattern', 'pattern'],
    ['Apply to', 'apply-to'],
    ['Definition', (p) => JSON.stringify(p.definition), 'definition'],
    ['Priority', 'priority'],
    ['', (p) => dangerButton('Delete', 'pdel:' + p.vhost + ':' + p.name, () => deletePolicy(p), { 'data-action': 'delete' }), 'actions'],
  ];
  await Promise.all([
    api('GET', '/users').then((r) => renderTable('users-table', uCols, list(r), (u) => ({ 'data-name': u.name })), (e) => failTable('users-table', uCols, e)),
    api('GET', '/policies').then(
      (r) => renderTable('policies-table', pCols, list(r), (p) => ({ 'data-vhost': p.vhost, 'data-name': p.name }), 'No policies.'),
      (e) => failTable('policies-table', pCols, e)
    ),
    api('GET', '/vhosts').then(
      (r) => {
        renderTable('vhosts-table', vCols, list(r), (v) => ({ 'data-name': v.name }));
        fillVhostSelects(list(r).map((v) => v.name));
      },
      (e) => failTable('vhosts-table', vCols, e)
    ),
  ]);
}

/** Keeps every form's vhost <select> in step with the broker, preserving choices. */
function fillVhostSelects(names) {
  if (!names.length) names = ['/'];
  state.vhosts = names;
  for (const sel of $$('.vhost-select')) {
    const keep = sel.value || '/';
    sel.replaceChildren(...names.map((n) => h('option', { value: n }, n)));
    sel.value = names.includes(keep) ? keep : names.includes('/') ? '/' : names[0];
  }
}

async function loadVhosts() {
  fillVhostSelects(list(await api('GET', '/vhosts')).map((v) => v.name));
}

async function exportDefinitions() {
  const defs = await api('GET', '/definitions');
  const text = JSON.stringify(defs, null, 2);
  $('#defs-output').textContent = text;
  $('#defs-output').hidden = false;
  // A Blob URL lets the browser save the same JSON without another request.
  if (state.downloadUrl) URL.revokeObjectURL(state.downloadUrl);
  state.downloadUrl = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  const a = $('#defs-download');
  a.href = state.downloadUrl;
  a.hidden = false;
  notice('Definitions exported.');
}

async function importDefinitions() {
  const text = $('#defs-import-text').value.trim();
  try {
    JSON.parse(text);
  } catch (e) {
    throw new Error('The definitions are not valid JSON: ' + e.message);
  }
  await api('POST', '/definitions', text);
  notice('Definitions imported.');
  await loadAdmin();
}

/** Adds a policy, or replaces the one of that name in the vhost. */
async function setPolicy() {
  const name = $('#policy-name').value.trim();
  let definition;
  try {
    definition = JSON.parse($('#policy-definition').value);
  } catch (e) {
    throw new Error('The definition is not valid JSON: ' + e.message);
  }
  const body = {
    pattern: $('#policy-pattern').value,
    'apply-to': $('#policy-apply-to').value,
    priority: Number($('#policy-priority').value || 0),
    definition,
  };
  await api('PUT', '/policies/' + enc($('#policy-vhost').value) + '/' + enc(name), body);
  notice(`Policy ${name} set.`);
  await loadAdmin();
}

async function deletePolicy(p) {
  await api('DELETE', '/policies/' + enc(p.vhost) + '/' + enc(p.name));
  notice(`Policy ${p.name} deleted.`);
  await loadAdmin();
}

async function addVhost() {
  const name = $('#vhost-name').value.trim();
  await api('PUT', '/vhosts/' + enc(name), {});
  notice(`Virtual host ${name} added.`);
  $('#vhost-name').value = '';
  await loadAdmin();
}

// ---------------------------------------------------------------- navigation and refresh

const LOADERS = {
  overview: null, // loadOverview runs on every refresh anyway
  connections: loadConnections,
  channels: loadChannels,
  exchanges: loadExchanges,
  queues: loadQueues,
  streams: loadStreams,
  admin: loadAdmin,
};

/** One refresh: the overview sample plus the shown tab. Overlapping ticks collapse into one rerun. */
async function refresh() {
  if (!sessionStorage.getItem(AUTH_KEY)) return;
  if (state.busy) {
    state.again = true;
    return;
  }
  state.busy = true;
  try {
    const tabLoader = LOADERS[state.tab];
    await Promise.all([loadOverview().catch((e) => showError(e.message)), tabLoader && tabLoader()]);
  } catch (e) {
    showError(e.message);
  } finally {
    state.busy = false;
  }
  if (state.again) {
    state.again = false;
    refresh();
  }
}

function restartTimer() {
  clearInterval(state.timer);
  state.timer = setInterval(refresh, state.period * 1000);
}

function showTab(tab) {
  if (!TABS.includes(tab)) tab = 'overview';
  state.tab = tab;
  clearBanners();
  for (const b of $$('#nav button')) b.classList.toggle('active', b.dataset.tab === tab);
  for (const p of $$('.panel')) p.hidden = p.dataset.panel !== tab;
  // The hash keeps the tab across reloads; replaceState keeps ?refresh=.
  if (location.hash !== '#' + tab) history.replaceState(null, '', '#' + tab);
  state.rendered = {};
  refresh();
}

/** ?refresh=N (seconds) picks the refresh period, e.g. 1 for tests. */
function setupRefreshSelect() {
  const sel = $('#refresh-select');
  const wanted = Number(new URLSearchParams(location.search).get('refresh'));
  if (wanted > 0) {
    if (![...sel.options].some((o) => Number(o.value) === wanted)) sel.prepend(h('option', { value: wanted }, `${wanted} s`));
    sel.value = String(wanted);
  }
  state.period = Number(sel.value);
  sel.onchange = () => {
    state.period = Number(sel.value);
    restartTimer();
  };
}

// ---------------------------------------------------------------- login

function enterApp(user) {
  $('#login').hidden = true;
  $('#nav').hidden = false;
  $('#session').hidden = false;
  $('#whoami').textContent = user;
  restartTimer();
  loadVhosts().catch((e) => showError(e.message));
  showTab(location.hash.slice(1));
}

/** Checks the credentials with /api/whoami before keeping them. */
async function login(user, pass) {
  sessionStorage.setItem(AUTH_KEY, basic(user, pass));
  try {
    const me = await api('GET', '/whoami');
    sessionStorage.setItem(USER_KEY, me.name || user);
    clearBanners();
    enterApp(me.name || user);
  } catch (e) {
    sessionStorage.removeItem(AUTH_KEY);
    showError('Login failed: ' + e.reason);
  }
}

function logout() {
  sessionStorage.removeItem(AUTH_KEY);
  sessionStorage.removeItem(USER_KEY);
  clearInterval(state.timer);
  Object.assign(state, { history: [], queue: null, exchange: null, armed: null, rendered: {} });
  clearBanners();
  for (const p of $$('.panel')) p.hidden = true;
  $('#nav').hidden = true;
  $('#session').hidden = true;
  $('#queue-detail').hidden = true;
  $('#exchange-detail').hidden = true;
  $('#login').hidden = false;
  $('#login-pass').value = '';
}

function wire() {
  $('#login-form').onsubmit = (ev) => {
    ev.preventDefault();
    clearBanners();
    login($('#login-user').value, $('#login-pass').value);
  };
  $('#logout-btn').onclick = logout;
  $('#error-close').onclick = () => ($('#error').hidden = true);
  for (const b of $$('#nav button')) b.onclick = () => showTab(b.dataset.tab);
  $('#exchange-add-form').onsubmit = action(addExchange);
  $('#exchange-publish-form').onsubmit = action(publishToExchange);
  $('#queue-add-form').onsubmit = action(addQueue);
  $('#queue-publish-form').onsubmit = action(publishToQueue);
  $('#queue-get-form').onsubmit = action(getMessages);
  $('#stream-add-form').onsubmit = action(addStream);
  $('#defs-export-btn').onclick = action(exportDefinitions);
  $('#defs-import-form').onsubmit = action(importDefinitions);
  $('#defs-import-file').onchange = async (ev) => {
    const f = ev.target.files[0];
    if (f) $('#defs-import-text').value = await f.text();
  };
  $('#vhost-add-form').onsubmit = action(addVhost);
  $('#policy-add-form').onsubmit = action(setPolicy);
  // Back/forward and typed #tab addresses switch tabs too.
  window.onhashchange = () => {
    if (sessionStorage.getItem(AUTH_KEY) && location.hash.slice(1) !== state.tab) showTab(location.hash.slice(1));
  };
  setupRefreshSelect();
}

wire();
// A reload keeps the session (sessionStorage), but the credentials are checked again.
if (sessionStorage.getItem(AUTH_KEY)) {
  api('GET', '/whoami').then(
    (me) => enterApp(me.name),
    (e) => {
      logout();
      showError('Please log in again: ' + e.reason);
    }
  );
}
