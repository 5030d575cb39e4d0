// Drives Warren's management UI in headless Chromium (Debian's, through
// playwright-core) against a running broker, the way a person would: log in,
// watch the overview, create and use queues, exchanges and streams, close a
// connection, export definitions. Every tab is screenshotted and the PNGs are
// decoded and checked, so a blank or broken page fails.
//
//   WARREN_HTTP     broker's HTTP base URL (default http://127.0.0.1:15680)
//   WARREN_AMQP     host:port of its AMQP 0-9-1 listener; without it the
//                   connection/channel checks are skipped
//   CHROMIUM        browser binary (default /usr/bin/chromium)
//   SCREENSHOT_DIR  where the PNGs go (default target/ui-screenshots, from the repo root)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const BASE = (process.env.WARREN_HTTP || 'http://127.0.0.1:15680').replace(/\/+$/, '');
const AMQP = process.env.WARREN_AMQP || '';
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SHOTS = path.resolve(ROOT, process.env.SCREENSHOT_DIR || 'target/ui-screenshots');
const TABS = ['overview', 'connections', 'channels', 'exchanges', 'queues', 'streams', 'admin'];
const WAIT = 15_000; // the longest any single wait may take
const RUN = Date.now().toString(36);
const QN = `ui-test-q-${RUN}`;
const XN = `ui-test-x-${RUN}`;
const SN = `ui-test-s-${RUN}`;
const VH = `ui-test-vh-${RUN}`;
const POL = `ui-test-policy-${RUN}`;
const IMPORTED = `ui-test-imported-${RUN}`;
const PAYLOAD = `hello from the UI test ${RUN}`;
const TAG = `ui-test-consumer-${RUN}`;

// The whole run is bounded, whatever hangs.
setTimeout(() => {
  console.error('ui test: gave up after 120 s');
  process.exit(1);
}, 120_000).unref();

// ------------------------------------------------------------ helpers

const AUTH = 'Basic ' + Buffer.from('guest:guest').toString('base64');
const enc = encodeURIComponent;

/** The management API straight from node, to check what the UI did. */
async function api(method, p, body) {
  const res = await fetch(BASE + '/api' + p, {
    method,
    headers: { Authorization: AUTH, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(WAIT),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Polls fn until it returns something truthy; fails naming what it waited for. */
async function waitFor(what, fn, timeout = WAIT) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeout / 1000} s waiting for ${what} (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

let browser;
let page;
const pageErrors = [];

async function openTab(tab) {
  await page.click(`#nav button[data-tab="${tab}"]`);
  await page.locator(`section[data-panel="${tab}"]`).waitFor({ state: 'visible', timeout: WAIT });
}

const text = (sel) => page.locator(sel).first().textContent({ timeout: 2000 });

async function noticeIs(expected) {
  await waitFor(`notice "${expected}"`, async () => {
    const err = (await page.isVisible('#error')) && (await text('#error-text'));
    if (err) throw new Error('error banner: ' + err);
    return (await page.isVisible('#notice')) && (await text('#notice')) === expected;
  });
}

/** Destructive buttons need two clicks (the UI's in-page confirmation). */
async function clickTwice(locator) {
  await locator.click();
  await waitFor('the button to ask for confirmation', () => locator.evaluate((b) => b.classList.contains('armed')));
  await locator.click();
}

async function shoot(tab) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0)); // the top of every tab, as a person lands on it
  await page.screenshot({ path: path.join(SHOTS, `${tab}.png`) });
}

const queueCell = (name, col) => text(`#queues-table tr[data-name="${name}"] td[data-col="${col}"]`);

// ------------------------------------------------------------ PNG decoding

/** Decodes an 8-bit, non-interlaced RGB(A) PNG such as Chromium writes into raw pixels. */
function decodePng(buf) {
  assert.ok(buf.subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10])), 'not a PNG file');
  let ihdr;
  const idat = [];
  for (let off = 8; off + 8 <= buf.length; ) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('ascii', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') ihdr = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), depth: data[8], color: data[9], interlace: data[12] };
    if (type === 'IDAT') idat.push(data);
    if (type === 'IEND') break;
    off += 12 + len;
  }
  assert.ok(ihdr, 'PNG without IHDR');
  assert.ok(ihdr.depth === 8 && [2, 6].includes(ihdr.color) && !ihdr.interlace, `unexpected PNG format ${JSON.stringify(ihdr)}`);
  const bpp = ihdr.color === 6 ? 4 : 3;
  const stride = ihdr.width * bpp;
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const px = Buffer.alloc(stride * ihdr.height);
  for (let y = 0; y < ihdr.height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1);
    const out = px.subarray(y * stride, (y + 1) * stride);
    const prev = y ? px.subarray((y - 1) * stride, y * stride) : null;
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? out[x - bpp] : 0;
      const b = prev ? prev[x] : 0;
      const c = prev && x >= bpp ? prev[x - bpp] : 0;
      let v = line[x];
      if (filter === 1) v += a;
      else if (filter === 2) v += b;
      else if (filter === 3) v += (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      out[x] = v & 255;
    }
  }
  return { ...ihdr, bpp, px };
}

/** Distinct colours and the share of the most common one. */
function colourStats(img) {
  const counts = new Map();
  for (let i = 0; i < img.px.length; i += img.bpp) {
    const k = (img.px[i] << 16) | (img.px[i + 1] << 8) | img.px[i + 2];
    counts.set(k, (counts.get(k) || 0) + 1);
  }
  return { colours: counts.size, dominant: Math.max(...counts.values()) / (img.width * img.height) };
}

function differingPixels(a, b) {
  let n = 0;
  for (let i = 0; i < a.px.length; i += a.bpp) if (a.px[i] !== b.px[i] || a.px[i + 1] !== b.px[i + 1] || a.px[i + 2] !== b.px[i + 2]) n++;
  return n / (a.width * a.height);
}

// ------------------------------------------------------------ a minimal AMQP 0-9-1 client

const u8 = (n) => Buffer.from([n]);
const u16 = (n) => { const b = Buffer.alloc(2); b.writeUInt16BE(n); return b; };
const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32BE(n); return b; };
const shortstr = (s) => Buffer.concat([u8(Buffer.byteLength(s)), Buffer.from(s)]);
const longstr = (b) => Buffer.concat([u32(b.length), b]);
const table = (o) => longstr(Buffer.concat(Object.entries(o).flatMap(([k, v]) => [shortstr(k), Buffer.from('S'), longstr(Buffer.from(v))])));
const methodFrame = (channel, cls, mth, ...args) => {
  const payload = Buffer.concat([u16(cls), u16(mth), ...args]);
  return Buffer.concat([u8(1), u16(channel), u32(payload.length), payload, u8(0xce)]);
};

/** Just enough AMQP to be a visible connection with a channel and a consumer. */
async function amqpConnect(hostport, queue, tag) {
  const [host, port] = [hostport.slice(0, hostport.lastIndexOf(':')), Number(hostport.slice(hostport.lastIndexOf(':') + 1))];
  const sock = net.connect({ host, port });
  await new Promise((ok, fail) => sock.once('connect', ok).once('error', fail));
  const conn = { sock, methods: [], closeText: null, closed: new Promise((r) => sock.once('close', r)) };
  let buf = Buffer.alloc(0);
  let wake = () => {};
  sock.on('error', () => {});
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 8 && buf.length >= 8 + buf.readUInt32BE(3)) {
      const size = buf.readUInt32BE(3);
      const [type, channel, payload] = [buf[0], buf.readUInt16BE(1), buf.subarray(7, 7 + size)];
      buf = buf.subarray(8 + size);
      if (type !== 1) continue; // content and heartbeat frames do not matter here
      const m = { channel, cls: payload.readUInt16BE(0), mth: payload.readUInt16BE(2), args: payload.subarray(4) };
      if (m.cls === 10 && m.mth === 50) {
        // connection.close from the broker: note why, answer close-ok.
        conn.closeText = m.args.toString('utf8', 3, 3 + m.args[2]);
        sock.end(methodFrame(0, 10, 51));
      }
      conn.methods.push(m);
      wake();
    }
  });
  const expect = async (cls, mth) => {
    const end = Date.now() + WAIT;
    for (;;) {
      const i = conn.methods.findIndex((m) => m.cls === cls && m.mth === mth);
      if (i >= 0) return conn.methods.splice(i, 1)[0];
      if (conn.closeText != null) throw new Error(`broker closed the AMQP connection: ${conn.closeText}`);
      if (Date.now() > end) throw new Error(`no AMQP method ${cls}.${mth} within ${WAIT / 1000} s`);
      await new Promise((r) => { wake = r; setTimeout(r, 200); });
    }
  };
  sock.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
  await expect(10, 10); // start
  const props = table({ product: 'warren-ui-test', connection_name: 'warren-ui-test' });
  sock.write(methodFrame(0, 10, 11, props, shortstr('PLAIN'), longstr(Buffer.from('\0guest\0guest')), shortstr('en_US')));
  const tune = await expect(10, 30);
  sock.write(methodFrame(0, 10, 31, u16(tune.args.readUInt16BE(0) || 2047), u32(tune.args.readUInt32BE(2) || 131072), u16(0)));
  sock.write(methodFrame(0, 10, 40, shortstr('/'), shortstr(''), u8(0)));
  await expect(10, 41); // open-ok
  sock.write(methodFrame(1, 20, 10, shortstr('')));
  await expect(20, 11); // channel.open-ok
  sock.write(methodFrame(1, 60, 20, u16(0), shortstr(queue), shortstr(tag), u8(0), table({})));
  await expect(60, 21); // basic.consume-ok
  return conn;
}

// ------------------------------------------------------------ the test

test('Warren management UI in headless Chromium', { timeout: 115_000 }, async (t) => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: WAIT,
  });
  let amqp = null;
  try {
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.setDefaultTimeout(WAIT);
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await run(t, (c) => (amqp = c));
  } finally {
    if (amqp) amqp.sock.destroy();
    await browser.close();
  }
});

async function run(t, keepAmqp) {
  let amqp = null;
  let served = false;
  let loggedIn = false;

  await t.test('wrong credentials show an error', async () => {
    const res = await page.goto(BASE + '/?refresh=1', { timeout: WAIT });
    assert.equal(res.status(), 200, `GET ${BASE}/ should serve the UI`);
    await page.locator('#login-form').waitFor({ state: 'visible', timeout: 5000 });
    served = true;
    await page.fill('#login-user', 'guest');
    await page.fill('#login-pass', 'not-the-password');
    await page.click('#login-btn');
    await page.locator('#error').waitFor({ state: 'visible' });
    assert.match(await text('#error-text'), /^Login failed: ./);
    assert.ok(await page.isVisible('#login-form'), 'the login form should stay');
    assert.ok(await page.isHidden('#nav'), 'the tabs should stay hidden');
  });

  if (!served) throw new Error(`the UI is not served at ${BASE}/; skipping the remaining steps`);

  await t.test('log in as guest', async () => {
    await page.fill('#login-pass', 'guest');
    await page.click('#login-btn');
    await page.locator('#nav').waitFor({ state: 'visible' });
    assert.ok(await page.isHidden('#login'));
    assert.ok(await page.isHidden('#error'));
    assert.equal(await text('#whoami'), 'guest');
    assert.equal(await page.inputValue('#refresh-select'), '1');
    loggedIn = true;
  });
  // Everything after needs a logged-in page; stop here rather than time out step by step.
  if (!loggedIn) throw new Error('could not load the UI and log in; skipping the remaining steps');

  await t.test('overview: totals, nodes, and both charts drawn', async () => {
    try {
      await openTab('overview');
      for (const k of ['connections', 'exchanges', 'queues', 'consumers', 'messages_ready', 'messages_unacknowledged']) {
        await waitFor(`total ${k}`, async () => /^\d[\d,]*$/.test(await text(`#overview-totals [data-total="${k}"] .value`)));
      }
      await waitFor('a node row', () => page.locator('#nodes-table tbody tr[data-name]').count());
      // Uptime ("3s", "1m 2s"...) and the partitions it sees (none).
      await waitFor('the node\'s uptime', async () => /^\d+[dhms]( \d+[dhms])?$/.test(await text('#nodes-table tbody tr[data-name] td[data-col="uptime"]')));
      assert.equal(await text('#nodes-table tbody tr[data-name] td[data-col="partitions"]'), 'none');
      for (const id of ['chart-queued', 'chart-rates']) {
        await waitFor(`3 samples in #${id}`, async () => Number(await page.getAttribute(`#${id}`, 'data-samples')) >= 3);
        // The series are the only saturated colours; count them inside the plot, below the legend.
        const px = await page.evaluate((id) => {
          const c = document.getElementById(id);
          const d = c.getContext('2d').getImageData(0, 26, c.width, c.height - 26).data;
          let series = 0, ink = 0;
          for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] && (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250)) ink++;
            if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) series++;
          }
          return { series, ink };
        }, id);
        assert.ok(px.ink > 1000, `#${id} looks blank: ${JSON.stringify(px)}`);
        assert.ok(px.series > 30, `#${id} has no plotted lines: ${JSON.stringify(px)}`);
      }
    } finally {
      await shoot('overview');
    }
  });

  await t.test('create a classic queue with the form', async () => {
    await openTab('queues');
    await page.selectOption('#queue-vhost', '/');
    await page.selectOption('#queue-type', 'classic');
    await page.fill('#queue-name', QN);
    await page.click('#queue-add-btn');
    await noticeIs(`Queue ${QN} added.`);
    await page.locator(`#queues-table tr[data-name="${QN}"]`).waitFor();
    const q = await api('GET', `/queues/%2F/${enc(QN)}`);
    assert.equal(q.status, 200);
    assert.equal(q.body.type, 'classic');
  });

  await t.test('a quorum queue made with the form shows its leader and members', async () => {
    const qq = `${QN}-quorum`;
    await page.selectOption('#queue-vhost', '/');
    await page.selectOption('#queue-type', 'quorum');
    await page.fill('#queue-name', qq);
    await page.click('#queue-add-btn');
    await noticeIs(`Queue ${qq} added.`);
    const q = await api('GET', `/queues/%2F/${enc(qq)}`);
    assert.equal(q.status, 200);
    assert.equal(q.body.type, 'quorum');
    assert.ok(q.body.leader, 'the API names a leader');
    await waitFor('the leader in the queue row', async () => (await queueCell(qq, 'leader')) === q.body.leader);
    assert.equal(await queueCell(qq, 'members'), '1/1 online');
    assert.equal(await queueCell(QN, 'leader'), '', 'a classic queue has no leader');
    assert.equal((await api('DELETE', `/queues/%2F/${enc(qq)}`)).status, 204);
    await page.locator(`#queues-table tr[data-name="${qq}"]`).waitFor({ state: 'detached' });
  });

  await t.test('publish to the queue; its row shows 1 message', async () => {
    await page.click(`#queues-table button[data-queue="${QN}"]`);
    await page.locator('#queue-detail').waitFor({ state: 'visible' });
    await page.fill('#queue-publish-payload', PAYLOAD);
    await page.click('#queue-publish-btn');
    await noticeIs('Message published.');
    await waitFor('messages = 1 in the queue row', async () => (await queueCell(QN, 'messages')) === '1');
  });

  await t.test('get messages shows the payload', async () => {
    await page.selectOption('#queue-get-ackmode', 'ack_requeue_true');
    await page.fill('#queue-get-count', '1');
    await page.click('#queue-get-btn');
    await waitFor('the fetched payload', async () => (await text('#queue-get-result .message[data-index="0"] pre.payload')) === PAYLOAD);
    // Requeued, so still there.
    await waitFor('messages still 1', async () => (await queueCell(QN, 'messages')) === '1');
  });

  await t.test('purge empties the queue', async () => {
    try {
      await clickTwice(page.locator('#queue-purge-btn'));
      await noticeIs(`Queue ${QN} purged.`);
      await waitFor('messages = 0 in the queue row', async () => (await queueCell(QN, 'messages')) === '0');
      assert.equal((await api('GET', `/queues/%2F/${enc(QN)}`)).body.messages, 0);
    } finally {
      await shoot('queues');
    }
  });

  await t.test('create an exchange and publish to it (not routed)', async () => {
    try {
      await openTab('exchanges');
      await waitFor('the default exchange row', () => page.locator('#exchanges-table button[data-exchange=""]').count());
      assert.equal(await text('#exchanges-table button[data-exchange=""]'), '(AMQP default)');
      await page.selectOption('#exchange-vhost', '/');
      await page.fill('#exchange-name', XN);
      await page.selectOption('#exchange-type', 'fanout');
      await page.click('#exchange-add-btn');
      await noticeIs(`Exchange ${XN} added.`);
      const x = await api('GET', `/exchanges/%2F/${enc(XN)}`);
      assert.equal(x.status, 200);
      assert.equal(x.body.type, 'fanout');
      await page.click(`#exchanges-table button[data-exchange="${XN}"]`);
      await page.locator('#exchange-detail').waitFor({ state: 'visible' });
      await page.fill('#exchange-publish-key', 'nowhere');
      await page.fill('#exchange-publish-payload', PAYLOAD);
      await page.click('#exchange-publish-btn');
      await noticeIs('Message published, but not routed.');
    } finally {
      await shoot('exchanges');
    }
  });

  await t.test('create a stream; the Streams tab lists it, the Queues tab does not', async () => {
    try {
      await openTab('streams');
      await page.selectOption('#stream-vhost', '/');
      await page.fill('#stream-name', SN);
      await page.fill('#stream-max-bytes', '1000000');
      await page.click('#stream-add-btn');
      await noticeIs(`Stream ${SN} added.`);
      const args = await waitFor('the stream row', () => text(`#streams-table tr[data-name="${SN}"] td[data-col="arguments"]`));
      assert.match(args, /x-max-length-bytes=1000000/);
      assert.equal((await api('GET', `/queues/%2F/${enc(SN)}`)).body.type, 'stream');
    } finally {
      await shoot('streams');
    }
    await openTab('queues');
    await page.locator(`#queues-table tr[data-name="${QN}"]`).waitFor();
    assert.equal(await page.locator(`#queues-table tr[data-name="${SN}"]`).count(), 0);
  });

  if (AMQP) {
    await t.test('open an AMQP 0-9-1 connection with a consumer', async () => {
      amqp = await amqpConnect(AMQP, QN, TAG);
      keepAmqp(amqp);
    });
  }

  await t.test('channels and consumers tab', { skip: !AMQP && 'WARREN_AMQP not set' }, async () => {
    assert.ok(amqp, 'no AMQP connection (an earlier step failed)');
    try {
      await openTab('channels');
      const conn = await waitFor('our connection in the API', async () =>
        (await api('GET', '/connections')).body.find((c) => c.peer_port === amqp.sock.localPort));
      await waitFor('our channel row', async () => {
        const cells = await page.locator('#channels-table td[data-col="connection"]').allTextContents();
        return cells.includes(conn.name);
      });
      const row = `#consumers-table tr[data-tag="${TAG}"]`;
      await waitFor('our consumer row', async () => (await text(`${row} td[data-col="queue"]`)) === QN);
      assert.equal(await text(`${row} td[data-col="ack_required"]`), 'yes');
    } finally {
      await shoot('channels');
    }
  });
  if (!AMQP) {
    await openTab('channels');
    await shoot('channels');
  }

  await t.test('connections tab lists and closes our connection', { skip: !AMQP && 'WARREN_AMQP not set' }, async () => {
    assert.ok(amqp, 'no AMQP connection (an earlier step failed)');
    const row = page.locator(`#connections-table tr[data-peer-port="${amqp.sock.localPort}"]`);
    try {
      await openTab('connections');
      await row.waitFor();
      assert.equal(await row.locator('td[data-col="user"]').textContent(), 'guest');
      assert.equal(await row.locator('td[data-col="vhost"]').textContent(), '/');
    } finally {
      await shoot('connections');
    }
    await clickTwice(row.locator('button[data-action="close"]'));
    await noticeIs('Connection closed.');
    await Promise.race([amqp.closed, new Promise((_, fail) => setTimeout(() => fail(new Error('the AMQP socket stayed open')), WAIT))]);
    assert.match(amqp.closeText || '', /closed from the management UI/, 'the broker should pass X-Reason on');
    await row.waitFor({ state: 'detached' });
  });
  if (!AMQP) {
    await openTab('connections');
    await shoot('connections');
  }

  await t.test('admin: export and import definitions, users, policies, add a vhost', async () => {
    try {
      await openTab('admin');
      await page.click('#defs-export-btn');
      await noticeIs('Definitions exported.');
      const defs = JSON.parse(await text('#defs-output'));
      assert.ok(defs.queues.some((q) => q.name === QN && q.vhost === '/'), 'export should hold the queue');
      assert.ok(defs.exchanges.some((x) => x.name === XN), 'export should hold the exchange');
      assert.match(await page.getAttribute('#defs-download', 'href'), /^blob:/);
      await page.locator('#users-table tr[data-name="guest"]').waitFor();

      const imported = { queues: [{ name: IMPORTED, vhost: '/', durable: true, auto_delete: false, arguments: {} }] };
      await page.fill('#defs-import-text', JSON.stringify(imported));
      await page.click('#defs-import-btn');
      await noticeIs('Definitions imported.');
      assert.equal((await api('GET', `/queues/%2F/${enc(IMPORTED)}`)).status, 200);

      // A policy set from the form applies to the queue, then goes.
      await page.selectOption('#policy-vhost', '/');
      await page.fill('#policy-name', POL);
      await page.fill('#policy-pattern', `^${QN}$`);
      await page.selectOption('#policy-apply-to', 'queues');
      await page.fill('#policy-priority', '3');
      await page.fill('#policy-definition', '{"max-length": 1000}');
      await page.click('#policy-add-btn');
      await noticeIs(`Policy ${POL} set.`);
      await page.locator(`#policies-table tr[data-name="${POL}"]`).waitFor();
      const q = (await api('GET', `/queues/%2F/${enc(QN)}`)).body;
      assert.equal(q.policy, POL, 'the queue should have the policy');
      assert.equal(q.effective_policy_definition['max-length'], 1000);
      await page.fill('#policy-definition', '{"max-length": -1}');
      await page.click('#policy-add-btn');
      await page.locator('#error').waitFor({ state: 'visible' });
      assert.match(await text('#error-text'), /not a valid maximum length/);
      await page.click('#error-close');
      await clickTwice(page.locator(`#policies-table tr[data-name="${POL}"] button[data-action="delete"]`));
      await noticeIs(`Policy ${POL} deleted.`);
      await page.locator(`#policies-table tr[data-name="${POL}"]`).waitFor({ state: 'detached' });
      assert.equal((await api('GET', `/policies/%2F/${enc(POL)}`)).status, 404);

      await page.fill('#vhost-name', VH);
      await page.click('#vhost-add-btn');
      await noticeIs(`Virtual host ${VH} added.`);
      await page.locator(`#vhosts-table tr[data-name="${VH}"]`).waitFor();
      assert.equal((await api('GET', `/vhosts/${enc(VH)}`)).status, 200);
    } finally {
      await shoot('admin');
      await api('DELETE', `/queues/%2F/${enc(IMPORTED)}`).catch(() => {});
      await api('DELETE', `/vhosts/${enc(VH)}`).catch(() => {});
      await api('DELETE', `/policies/%2F/${enc(POL)}`).catch(() => {});
    }
  });

  await t.test('delete the stream, the exchange and the queue from the UI', async () => {
    await openTab('streams');
    await clickTwice(page.locator(`#streams-table tr[data-name="${SN}"] button[data-action="delete"]`));
    await noticeIs(`Stream ${SN} deleted.`);
    await waitFor('the stream gone', async () => (await api('GET', `/queues/%2F/${enc(SN)}`)).status === 404);

    await openTab('exchanges');
    await page.click(`#exchanges-table button[data-exchange="${XN}"]`);
    await clickTwice(page.locator('#exchange-delete-btn'));
    await noticeIs(`Exchange ${XN} deleted.`);
    await waitFor('the exchange gone', async () => (await api('GET', `/exchanges/%2F/${enc(XN)}`)).status === 404);

    await openTab('queues');
    await page.click(`#queues-table button[data-queue="${QN}"]`);
    await clickTwice(page.locator('#queue-delete-btn'));
    await noticeIs(`Queue ${QN} deleted.`);
    await waitFor('the queue gone', async () => (await api('GET', `/queues/%2F/${enc(QN)}`)).status === 404);
    await page.locator(`#queues-table tr[data-name="${QN}"]`).waitFor({ state: 'detached' });
  });

  await t.test('log out', async () => {
    await page.click('#logout-btn');
    await page.locator('#login-form').waitFor({ state: 'visible' });
    assert.ok(await page.isHidden('#nav'));
    assert.equal(await page.evaluate(() => sessionStorage.getItem('warren.auth')), null);
  });

  await t.test('every tab screenshot is a real 1280x800 picture', () => {
    const imgs = {};
    for (const tab of TABS) {
      const file = path.join(SHOTS, `${tab}.png`);
      assert.ok(fs.existsSync(file), `missing screenshot ${file}`);
      const img = decodePng(fs.readFileSync(file));
      assert.equal(`${img.width}x${img.height}`, '1280x800', `${tab}.png size`);
      const s = colourStats(img);
      assert.ok(s.colours >= 16, `${tab}.png has only ${s.colours} colours`);
      assert.ok(s.dominant < 0.97, `${tab}.png is ${(s.dominant * 100).toFixed(1)}% one colour`);
      imgs[tab] = img;
    }
    for (let i = 0; i < TABS.length; i++) {
      for (let j = i + 1; j < TABS.length; j++) {
        const d = differingPixels(imgs[TABS[i]], imgs[TABS[j]]);
        assert.ok(d > 0.005, `${TABS[i]}.png and ${TABS[j]}.png are nearly identical (${(d * 100).toFixed(2)}% differ)`);
      }
    }
    assert.ok(differingPixels(imgs.overview, imgs.queues) > 0.05, 'overview and queues screenshots should differ clearly');
  });

  await t.test('no uncaught errors in the page', () => {
    assert.deepEqual(pageErrors, []);
  });
}
