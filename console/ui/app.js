// Bulwark operator console. Plain DOM, no framework, no build step.
// Server data is only ever written with textContent and attributes: the
// page's Content-Security-Policy requires Trusted Types, so assigning
// markup to any HTML-parsing sink would throw.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  const nf = new Intl.NumberFormat('en-US');
  const fmtInt = (n) => nf.format(Number(n) || 0);
  const fmtRate = (x) => (x < 10 ? x.toFixed(1) : nf.format(Math.round(x))) + ' /s';

  function fmtDuration(sec) {
    sec = Math.max(0, Math.floor(sec));
    const d = Math.floor(sec / 86400), h = Math.floor(sec / 3600) % 24, m = Math.floor(sec / 60) % 60, s = sec % 60;
    if (d > 0) return d + 'd ' + h + 'h';
    if (h > 0) return h + 'h ' + m + 'm';
    if (m > 0) return m + 'm ' + s + 's';
    return s + 's';
  }

  function fmtTime(iso) {
    if (!iso) return '—';
    const t = new Date(iso);
    return isNaN(t) ? '—' : t.toLocaleString();
  }

  // call sends one API request. Changes carry a JSON body (the server
  // refuses anything else) and the browser adds Origin and
  // Sec-Fetch-Site, which prove they come from this page.
  async function call(method, path, body) {
    const init = { method: method, credentials: 'same-origin', cache: 'no-store', headers: {} };
    if (method !== 'GET') {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body === undefined ? {} : body);
    }
    let res;
    try {
      res = await fetch('api/' + path, init);
    } catch (e) {
      return { status: 0, data: null };
    }
    let data = null;
    if ((res.headers.get('Content-Type') || '').indexOf('json') >= 0) {
      try { data = await res.json(); } catch (e) { data = null; }
    }
    if (res.status === 401 && path !== 'login') showLogin();
    return { status: res.status, data: data, retryAfter: res.headers.get('Retry-After') };
  }

  function problem(r, fallback) {
    if (r.status === 0) return 'The console is unreachable.';
    let msg = (r.data && r.data.detail) || fallback || ('Error ' + r.status + '.');
    if (r.status === 429 && r.retryAfter) msg += ' Retry in ' + r.retryAfter + ' s.';
    return msg;
  }

  // --- login -------------------------------------------------------------

  function showLogin() {
    stopStream();
    $('app').hidden = true;
    $('logout').hidden = true;
    $('login-view').hidden = false;
    setConn(false);
    $('token').focus();
  }

  function showApp() {
    $('login-view').hidden = true;
    $('app').hidden = false;
    $('logout').hidden = false;
    startStream();
    loadList('deny');
    loadList('allow');
  }

  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const err = $('login-error');
    err.textContent = '';
    $('login-submit').disabled = true;
    const r = await call('POST', 'login', { token: $('token').value });
    $('login-submit').disabled = false;
    if (r.status === 200) {
      $('token').value = '';
      showApp();
      return;
    }
    err.textContent = problem(r, 'Login failed.');
  });

  $('logout').addEventListener('click', async () => {
    await call('POST', 'logout', {});
    showLogin();
  });

  // --- live counters -----------------------------------------------------

  let es = null;
  let retryTimer = null;

  function setConn(live) {
    const c = $('conn');
    c.textContent = live ? 'live' : 'offline';
    c.className = 'pill ' + (live ? 'ok' : 'off');
  }

  function stopStream() {
    if (retryTimer) { clearTimeout(retryTimer); retryTimer = null; }
    if (es) { es.close(); es = null; }
  }

  function startStream() {
    stopStream();
    es = new EventSource('api/events');
    es.addEventListener('snapshot', (ev) => {
      setConn(true);
      render(JSON.parse(ev.data));
    });
    es.addEventListener('logout', () => showLogin());
    es.onerror = () => {
      setConn(false);
      // A stream that ended is reopened by the browser itself; one that
      // was refused (session gone, too many streams) is closed: check
      // the session, then try again.
      if (es && es.readyState === EventSource.CLOSED) {
        stopStream();
        retryTimer = setTimeout(async () => {
          retryTimer = null;
          const r = await call('GET', 'status');
          if (r.status === 200) {
            render(r.data);
            startStream();
          } else if (r.status !== 401) {
            retryTimer = setTimeout(startStream, 5000);
          }
        }, 3000);
      }
    };
  }

  let prev = null;
  const series = { req: [], rej: [] };
  const listLen = { deny: -1, allow: -1 };
  let lastRejected = -1;

  function text(id, v) { $(id).textContent = v; }

  function render(v) {
    const s = v.status;
    text('hdr-version', 'bulwark ' + s.version);
    const st = $('st-state');
    st.textContent = s.state + (s.ready ? '' : ' (not ready)');
    st.className = 'pill ' + (s.state === 'ready' ? 'ok' : 'warn');
    text('st-version', s.version);
    text('st-profile', s.profile || '—');
    text('st-uptime', fmtDuration(s.uptime_seconds));
    text('st-file', s.config.file || '(embedded)');
    text('st-routes', fmtInt(s.config.routes));
    text('st-upstreams', fmtInt(s.config.upstreams));
    text('st-reloads', fmtInt(s.config.reloads_ok) + ' ok, ' + fmtInt(s.config.reloads_failed) + ' refused');
    text('st-last-reload', fmtTime(s.config.last_reload));

    text('requests', fmtInt(s.requests));
    text('rejected', fmtInt(v.rejected));
    text('in-flight', fmtInt(s.in_flight));
    if (prev) {
      const dt = (Date.parse(v.at) - Date.parse(prev.at)) / 1000;
      if (dt > 0) {
        const rq = Math.max(0, s.requests - prev.status.requests) / dt;
        const rj = Math.max(0, v.rejected - prev.rejected) / dt;
        text('requests-rate', fmtRate(rq));
        text('rejected-rate', fmtRate(rj));
        push(series.req, rq);
        push(series.rej, rj);
        spark();
      }
    }
    prev = v;

    const layers = s.layers.map((l) => {
      const li = el('li', null, l.on ? 'on' : 'off');
      li.append(el('span', l.on ? 'on' : 'off', 'pill ' + (l.on ? 'ok' : 'off')), el('strong', l.name));
      if (l.detail) li.append(el('span', l.detail, 'muted'));
      return li;
    });
    $('layers').replaceChildren(...layers);

    $('top-reasons').replaceChildren(...rowsOrEmpty(v.top_reasons.map((x) =>
      row([x.layer, x.reason, fmtInt(x.count)], [null, 'mono', 'r'])), 3, 'No rejections.'));
    $('top-routes').replaceChildren(...rowsOrEmpty(v.top_routes.map((x) =>
      row([x.route, fmtInt(x.count)], ['mono', 'r'])), 2, 'No rejections on a route.'));

    $('upstreams').replaceChildren(...rowsOrEmpty((s.upstreams || []).map((u) => {
      const tr = row([u.name, u.healthy + ' of ' + u.targets], ['mono', 'r']);
      const td = el('td');
      const all = u.healthy === u.targets;
      td.append(el('span', all ? 'healthy' : (u.healthy > 0 ? 'degraded' : 'unhealthy'), 'pill ' + (all ? 'ok' : 'warn')));
      if (u.out.length) {
        td.append(el('span', ' out: ' + u.out.map((o) => 'target ' + o.target + ' (' + o.reason + ')').join(', '), 'muted'));
      }
      tr.append(td);
      return tr;
    }), 3, 'No upstream has health checks.'));

    $('tables').replaceChildren(...rowsOrEmpty(v.tables.map((t) => {
      const tr = row([t.name, fmtInt(t.len), fmtInt(t.capacity)], ['mono', 'r', 'r']);
      const m = document.createElement('meter');
      m.min = 0;
      m.max = Math.max(1, t.capacity);
      m.value = t.len;
      m.low = 0.7 * m.max;
      m.high = 0.9 * m.max;
      m.optimum = 0;
      m.title = (t.capacity ? (100 * t.len / t.capacity).toFixed(1) : '0') + ' %';
      const td = el('td');
      td.append(m);
      tr.append(td);
      return tr;
    }), 4, 'No bounded tables reported.'));

    if (v.rejected !== lastRejected) {
      lastRejected = v.rejected;
      loadClients();
    }

    for (const name of ['deny', 'allow']) {
      const n = v.lists[name].len;
      if (n !== listLen[name]) {
        listLen[name] = n;
        loadList(name);
      }
    }
  }

  function row(cells, classes) {
    const tr = el('tr');
    cells.forEach((c, i) => tr.append(el('td', c, classes && classes[i])));
    return tr;
  }

  function rowsOrEmpty(rows, cols, msg) {
    if (rows.length) return rows;
    const td = el('td', msg, 'muted');
    td.colSpan = cols;
    const tr = el('tr');
    tr.append(td);
    return [tr];
  }

  function push(arr, x) {
    arr.push(x);
    if (arr.length > 60) arr.shift();
  }

  // niceCeil rounds x up to 1, 2 or 5 times a power of ten, so that the
  // chart's axis reads in round numbers.
  function niceCeil(x) {
    if (!(x > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    for (const m of [1, 2, 5, 10]) if (x <= m * p * 1.0000001) return m * p;
    return 10 * p;
  }

  function spark() {
    const peak = Math.max(0, ...series.req, ...series.rej);
    const max = niceCeil(Math.max(peak, 1));
    const pts = (arr) => arr.map((y, i) => {
      const x = 120 - (arr.length - 1 - i) * 2;
      return x + ',' + (31 - (y / max) * 30).toFixed(1);
    }).join(' ');
    $('spark-req').setAttribute('points', pts(series.req));
    $('spark-rej').setAttribute('points', pts(series.rej));
    text('spark-max', fmtRate(max));
    text('spark-mid', fmtRate(max / 2));
    text('spark-req-now', fmtRate(series.req[series.req.length - 1] || 0));
    text('spark-rej-now', fmtRate(series.rej[series.rej.length - 1] || 0));
    text('spark-peak', fmtRate(peak));
  }

  // --- top limited clients ---------------------------------------------

  let clientsSeq = 0;

  async function loadClients() {
    const seq = ++clientsSeq;
    const r = await call('GET', 'clients');
    if (r.status !== 200 || seq !== clientsSeq) return;
    const rows = r.data.clients.map((c) => {
      const tr = row([c.client, c.layer, fmtInt(c.count), fmtTime(c.last_seen)], ['mono', null, 'r', null]);
      const b = el('button', 'Block', 'small');
      b.type = 'button';
      b.dataset.client = c.client;
      b.addEventListener('click', () => blockClient(c.client));
      const td = el('td', null, 'r');
      td.append(b);
      tr.append(td);
      return tr;
    });
    $('top-clients').replaceChildren(...rowsOrEmpty(rows, 5, 'No client limited.'));
  }

  async function blockClient(fp) {
    const r = await call('POST', 'lists/deny', { client: fp, ttl_ms: 3600000, reason: 'console' });
    text('clients-msg', r.status === 201 ? 'Blocked client ' + fp +
      (r.data.expires_at ? ' until ' + fmtTime(r.data.expires_at) : '') + '.' : problem(r));
    loadList('deny');
  }

  // --- lists -------------------------------------------------------------

  // listSeq orders the answers of concurrent loads: an older answer
  // arriving last must not overwrite a newer one.
  const listSeq = { deny: 0, allow: 0 };

  async function loadList(name) {
    const seq = ++listSeq[name];
    const r = await call('GET', 'lists/' + name + '?limit=500');
    if (r.status !== 200 || seq !== listSeq[name]) return;
    const d = r.data;
    text('list-' + name + '-count', fmtInt(d.total) + ' of ' + fmtInt(d.capacity) + (d.count < d.total ? ' (first ' + d.count + ' shown)' : ''));
    const rows = d.entries.map((e) => {
      // An entry made from a fingerprint is shown (and removed) by it.
      const what = e.ip || ('client ' + e.client);
      const target = e.ip ? { ip: e.ip } : { client: e.client };
      const tr = row([what, e.expires_at ? fmtTime(e.expires_at) : 'never', e.reason || ''], ['mono', null, null]);
      const b = el('button', 'Remove', 'ghost small');
      b.type = 'button';
      b.dataset.ip = what;
      b.addEventListener('click', () => removeEntry(name, target, what));
      const td = el('td', null, 'r');
      td.append(b);
      tr.append(td);
      return tr;
    });
    $('list-' + name).replaceChildren(...rowsOrEmpty(rows, 4, 'Empty.'));
  }

  async function removeEntry(name, target, what) {
    const r = await call('DELETE', 'lists/' + name, target);
    text(name + '-msg', r.status === 200 ? 'Removed ' + what + '.' : problem(r));
    loadList(name);
  }

  for (const name of ['deny', 'allow']) {
    $(name + '-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const ip = $(name + '-ip').value.trim();
      const body = { ip: ip, ttl_ms: Number($(name + '-ttl').value) };
      const reason = $(name + '-reason').value.trim();
      if (reason) body.reason = reason;
      const r = await call('POST', 'lists/' + name, body);
      if (r.status === 201) {
        text(name + '-msg', (name === 'deny' ? 'Blocked ' : 'Allowed ') + r.data.ip +
          (r.data.expires_at ? ' until ' + fmtTime(r.data.expires_at) : '') + '.');
        $(name + '-ip').value = '';
        $(name + '-reason').value = '';
      } else {
        text(name + '-msg', problem(r));
      }
      loadList(name);
    });
  }

  // --- accounts and quotas ----------------------------------------------

  function say(id, msg, ok) {
    const m = $(id);
    m.textContent = msg;
    m.className = 'msg ' + (ok ? 'ok' : 'bad');
  }

  $('unlock-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { username: $('unlock-user').value };
    const route = $('unlock-route').value.trim();
    if (route) body.route = route;
    const r = await call('POST', 'unlock', body);
    if (r.status !== 200) {
      say('unlock-msg', problem(r), false);
      return;
    }
    // The answer never repeats the username; neither does the page.
    const parts = r.data.routes.map((x) => x.route + ': ' + (x.locked ? 'unlocked' : 'not locked') +
      (x.failures ? ', ' + x.failures + ' failed password(s) forgotten' : ''));
    // The rate limit per (client address, username) is kept: the
    // operator cannot name the address.
    const wait = Math.max(0, ...r.data.routes.map((x) => x.rate_limit_window_seconds || 0));
    say('unlock-msg', 'Done. ' + parts.join('; ') + '.' + (wait > 0 ? ' Not lifted: the rate limit per (client address, username); a client that used up its attempts waits up to ' + wait + ' s.' : ''), true);
    $('unlock-user').value = '';
  });

  function quotaBody() {
    return {
      project: $('quota-project').value.trim(),
      subject_type: $('quota-subject-type').value.trim(),
      subject_id: $('quota-subject-id').value.trim(),
      operation: $('quota-operation').value.trim(),
    };
  }

  function quotaText(u) {
    let s = u.operation + ': ' + fmtInt(u.used) + ' of ' + fmtInt(u.limit) + ' used, ' + fmtInt(u.remaining) +
      ' remaining per ' + fmtDuration(u.window_ms / 1000);
    if (u.resets_at) s += '; the window resets ' + fmtTime(u.resets_at);
    return s + '.';
  }

  $('quota-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const r = await call('POST', 'quota/show', quotaBody());
    say('quota-msg', r.status === 200 ? quotaText(r.data) : problem(r), r.status === 200);
  });

  $('quota-reset').addEventListener('click', async () => {
    if (!$('quota-form').reportValidity()) return;
    const r = await call('POST', 'quota/reset', quotaBody());
    say('quota-msg', r.status === 200 ? 'Reset: ' + fmtInt(r.data.used_before) + ' receipt(s) forgotten. ' + quotaText(r.data) : problem(r), r.status === 200);
  });

  // --- reload ------------------------------------------------------------

  $('reload').addEventListener('click', async () => {
    const b = $('reload');
    const out = $('reload-result');
    const list = $('reload-problems');
    b.disabled = true;
    out.textContent = 'Reloading…';
    out.className = 'msg';
    list.replaceChildren();
    const r = await call('POST', 'reload', {});
    b.disabled = false;
    if (r.status === 200) {
      out.textContent = 'Reloaded at ' + new Date().toLocaleTimeString() + '.';
      out.className = 'msg ok';
    } else if (r.status === 422 && r.data && Array.isArray(r.data.errors)) {
      out.textContent = 'Refused: ' + r.data.errors.length + ' problem(s); the previous configuration keeps serving.';
      out.className = 'msg bad';
      list.replaceChildren(...r.data.errors.map((p) => el('li', p, 'mono')));
    } else {
      out.textContent = problem(r);
      out.className = 'msg bad';
    }
  });

  // --- start -------------------------------------------------------------

  (async () => {
    const r = await call('GET', 'status');
    if (r.status === 200) {
      render(r.data);
      showApp();
    } else if (r.status !== 401) {
      showLogin();
      $('login-error').textContent = problem(r);
    }
  })();
})();
