// InterLock approval console (issue 14, item 1). Plain JS, no build step. Everything shown is set
// with textContent (never innerHTML), so statements and parameters cannot inject markup.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  let csrf = '';
  let selected = null;
  let selectedDetail = null;
  let events = null;
  let page = 1;
  let pages = 1;

  function say(text) { $('status').textContent = text; }

  // `background`: a read the page makes by itself (the list re-read on a queue event), which is not
  // the person's activity and so does not restart the session's idle clock (red team rt48a K8).
  async function api(method, path, body, background) {
    const headers = { Accept: 'application/json' };
    if (method !== 'GET') { headers['Content-Type'] = 'application/json'; headers['X-CSRF-Token'] = csrf; }
    if (background) headers['X-InterLock-Background'] = '1';
    const r = await fetch('/console/api' + path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
    const json = await r.json().catch(() => ({}));
    if (!r.ok) { const e = new Error(json.message || ('HTTP ' + r.status)); e.status = r.status; e.body = json; throw e; }
    return json;
  }

  function showSignedIn(operator) {
    $('signin').hidden = true;
    $('app').hidden = false;
    $('who').hidden = false;
    $('operator').textContent = 'Signed in as ' + operator;
    refresh();
    loadIdentities();
    listen();
  }

  function showSignedOut() {
    if (events) { events.close(); events = null; }
    csrf = '';
    $('app').hidden = true;
    $('who').hidden = true;
    $('signin').hidden = false;
    $('token').focus();
  }

  // apr_ and the first 8 hex digits of an approval id (the full id is in the detail and on hover).
  function shortId(id) { return id.length > 12 ? id.slice(0, 12) + '…' : id; }

  function time(iso) { return iso ? iso.replace('T', ' ').replace(/\.\d{3}Z$/, 'Z') : '-'; }

  // Identities (issue 26 item 4): token-backed ones show issuer, subject and last use; each enabled one can be disabled.
  async function loadIdentities() {
    const body = $('identity-rows');
    let rows;
    try { rows = (await api('GET', '/identities')).identities; } catch (e) { if (e.status === 401) return showSignedOut(); say(e.message); return; }
    body.textContent = '';
    for (const i of rows) {
      const tr = document.createElement('tr');
      tr.dataset.name = i.name;
      const name = document.createElement('td'); name.textContent = i.name;
      const status = document.createElement('td'); status.textContent = i.disabled ? 'disabled' : 'enabled';
      const subj = document.createElement('td');
      subj.textContent = (i.subjects || []).map((s) => s.issuer + ' · ' + s.subject + ' · ' + (s.lastUsedAt ? time(s.lastUsedAt) : 'never')).join('; ') || 'API keys only';
      const act = document.createElement('td');
      if (!i.disabled) {
        const b = document.createElement('button');
        b.type = 'button';
        b.className = 'reject';
        b.textContent = 'Disable';
        b.setAttribute('aria-label', 'Disable ' + i.name);
        b.addEventListener('click', async () => {
          try { await api('POST', '/identities/' + encodeURIComponent(i.name) + '/disable', {}); say('Disabled ' + i.name + ': its keys and tokens stop working.'); } catch (e) { say(e.message); }
          loadIdentities();
        });
        act.append(b);
      }
      tr.append(name, status, subj, act);
      body.append(tr);
    }
  }

  function renderList(items) {
    const list = $('list');
    list.textContent = '';
    $('empty').hidden = items.length > 0;
    for (const a of items) {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.dataset.id = a.id;
      b.setAttribute('aria-current', String(a.id === selected));
      const meta = document.createElement('span');
      meta.className = 'meta';
      meta.textContent = a.state + ' · ' + a.identity + ' on ' + a.source + ' · ' + time(a.createdAt) + (a.errorCode ? ' · ' + a.errorCode : '') + (a.requesterProblem ? ' · ⚠ ' + a.requesterProblem : '');
      // The id's short form (full id on hover) and the parameter values, so two writes of one
      // statement tell apart in the list (task nu47fix item 5). Text only, as everything else.
      const aid = document.createElement('span');
      aid.className = 'aid';
      aid.textContent = shortId(a.id);
      aid.title = a.id;
      const stmt = document.createElement('span');
      stmt.className = 'stmt';
      stmt.textContent = a.statement;
      b.append(aid, meta, stmt);
      if (a.params) {
        const p = document.createElement('span');
        p.className = 'params';
        p.textContent = 'params ' + a.params;
        b.append(p);
      }
      if (a.destructive) {
        const d = document.createElement('span');
        d.className = 'flag danger';
        d.textContent = '⚠ destructive (deletes, updates or merges rows)';
        b.append(d);
      }
      if (a.invisible > 0) {
        const v = document.createElement('span');
        v.className = 'flag';
        v.textContent = '⚠ ' + a.invisible + ' invisible character(s) shown as ⟨U+…⟩';
        b.append(v);
      }
      if (a.comments > 0) {
        const f = document.createElement('span');
        f.className = 'flag';
        f.textContent = '⚠ ' + a.comments + ' comment(s) in the statement — open to read them';
        b.append(f);
      }
      b.addEventListener('click', () => open(a.id));
      li.append(b);
      list.append(li);
    }
  }

  function query() {
    const q = new URLSearchParams();
    const add = (k, v) => { if (v) q.set(k, v); };
    add('state', $('filter').value);
    add('source', $('f-source').value.trim());
    add('identity', $('f-identity').value.trim());
    add('min_age_s', $('f-age').value);
    q.set('page', String(page));
    return q.toString();
  }

  async function refresh(background) {
    try {
      const r = await api('GET', '/approvals?' + query(), undefined, background);
      renderList(r.approvals);
      pages = Math.max(1, Math.ceil(r.total / r.pageSize));
      $('page-info').textContent = 'Page ' + r.page + ' of ' + pages + ' · ' + r.total + ' matching';
      $('prev').disabled = r.page <= 1;
      $('next').disabled = r.page >= pages;
      $('counts').textContent = Object.keys(r.counts).map((k) => k + ': ' + r.counts[k]).join(' · ');
    } catch (e) { handle(e); }
  }

  function listen() {
    if (events) events.close();
    events = new EventSource('/console/api/events');
    let first = true;
    let seen = new Set();
    // The event says the pending queue changed; the page shown is re-read with its filters and page.
    // Only a write that arrived is announced: a decision (this operator's or another's) leaves the
    // queue, and announcing that would overwrite the decision's own outcome in the status line (a
    // failed write's cause read as "0 write(s) waiting": the flake of console/browser.test.ts).
    events.addEventListener('queue', (ev) => {
      const data = JSON.parse(ev.data);
      const ids = new Set(data.pending.map((p) => p.id));
      if (!first) {
        if ([...ids].some((id) => !seen.has(id))) say(data.pending.length + ' write(s) waiting for approval.');
        refresh(true);
      } else if ([...ids].some((id) => !document.querySelector('#list button[data-id="' + CSS.escape(id) + '"]'))) {
        // The stream's first event is the baseline, but a write queued after the page's first list read
        // and before the stream's first poll is in it and not on the page: re-read the list (it stayed
        // off the page until the queue next changed: the CI flake of console/browser.test.ts, stop 49).
        refresh(true);
      }
      seen = ids;
      first = false;
    });
    // Signed out elsewhere, timed out, or the token revoked: the server ended the session (issue 24, item 3).
    events.addEventListener('session_ended', () => { showSignedOut(); $('signin-error').textContent = 'Your session ended: sign in again.'; });
  }

  function fill(id, text) { $(id).textContent = text == null || text === '' ? '-' : String(text); }

  async function open(id) {
    try {
      const d = await api('GET', '/approvals/' + encodeURIComponent(id));
      selected = id;
      const a = d.approval;
      fill('d-id', a.id);
      fill('d-state', a.state + (a.outcome && a.outcome.row_count != null ? ' (' + a.outcome.row_count + ' row(s))' : '') + (a.outcome && a.outcome.error_code ? ' (' + a.outcome.error_code + ')' : ''));
      fill('d-identity', a.identityName + ' (' + a.identityId + ', key ' + (a.keyId || '-') + ')');
      fill('d-source', a.sourceId);
      fill('d-created', time(a.createdAt));
      fill('d-expires', time(a.expiresAt));
      fill('d-relations', d.relations.join(', '));
      fill('d-class', [a.classification.statement, a.classification.kind, a.classification.fingerprint ? 'fingerprint ' + a.classification.fingerprint : ''].filter(Boolean).join(' · '));
      fill('d-requeued', a.requeuedFrom);
      // Issue 27: the requester's attribute values from its token's claims, kept with the write (the record's values win at approval).
      fill('d-claims', a.claimAttributes ? Object.keys(a.claimAttributes).sort().map((k) => k + ' = ' + JSON.stringify(a.claimAttributes[k])).join(', ') : null);
      $('d-failure').hidden = !a.failure;
      if (a.failure) {
        const f = a.failure;
        $('d-failure-text').textContent = (f.sqlstate ? 'SQLSTATE ' + f.sqlstate + ': ' : '') + f.message + (f.detail ? ' — detail: ' + f.detail : '') + (f.hint ? ' — hint: ' + f.hint : '');
      }
      // The requester's key revoked or expired, or its identity disabled: approving will not run it (issue 24, item 4).
      $('d-requester').hidden = !d.requester;
      $('d-requester').textContent = d.requester ? '⚠ ' + d.requester.message : '';
      $('d-comments').hidden = d.statement.comments.length === 0;
      $('d-comments').textContent = '⚠ This statement contains ' + d.statement.comments.length + ' comment(s). Comments do not run: check the statement itself, not the comment. ' + d.statement.comments.join('  ');
      $('d-sql').textContent = d.statement.visible;
      $('d-params').textContent = d.params;
      $('d-destructive').hidden = !d.destructive;
      $('d-invisible').hidden = d.statement.invisible === 0;
      $('d-invisible').textContent = '⚠ This statement holds ' + d.statement.invisible + ' invisible character(s) (control, bidirectional or zero-width), shown as ⟨U+…⟩.';
      $('confirm').hidden = true;
      selectedDetail = d;
      $('d-plan').textContent = d.plan == null ? '(plans are shown for pending approvals)' : d.plan.ok ? (d.plan.rowRules ? "(the statement as approving runs it, with the requester's row rules)\n" : '') + d.plan.lines.join('\n') : 'No plan: ' + d.plan.reason;
      const tbody = $('d-audit');
      tbody.textContent = '';
      for (const e of d.audit) {
        const tr = document.createElement('tr');
        const detail = [e.reasonCode, e.rowCount != null ? e.rowCount + ' row(s)' : '', e.details && e.details.reason ? 'reason: ' + e.details.reason : '', e.details && e.details.requeued_from ? 'from ' + e.details.requeued_from : ''].filter(Boolean).join(' · ');
        for (const v of [time(e.time), e.decision, e.operator || '-', detail || '-']) { const td = document.createElement('td'); td.textContent = v; tr.append(td); }
        tbody.append(tr);
      }
      $('approve').disabled = a.state !== 'pending';
      $('reject').disabled = a.state !== 'pending';
      $('requeue').disabled = a.state !== 'failed';
      $('reason').value = '';
      $('detail').hidden = false;
      $('detail').focus();
      for (const b of document.querySelectorAll('#list button')) b.setAttribute('aria-current', String(b.dataset.id === id));
    } catch (e) { handle(e); }
  }

  // The planner's row estimate as what it is (task nu47fix item 6): an estimate from statistics, not
  // a count; PostgreSQL clamps every row estimate to at least 1, so 1 can mean no row at all (a row
  // the requester's row rules hide estimates 1 and then changes 0).
  function estimateText(n, rowRules) {
    return 'The planner estimates about ' + n + ' row(s) will be changed' + (rowRules ? " (with the requester's row rules)" : '') +
      '. This is an estimate, not a count: the rows changed may differ' + (n <= 1 ? ' (PostgreSQL never estimates fewer than 1 row, so 1 can mean none).' : '.');
  }

  /** The confirmation step of a destructive approval: statement, parameters and the planner's row estimate. */
  function askConfirmation(d) {
    $('confirm-sql').textContent = d.statement.visible;
    $('confirm-params').textContent = d.params;
    $('confirm-estimate').textContent = d.estimate == null ? 'The planner gave no row estimate (see the plan above).' : estimateText(d.estimate, d.plan && d.plan.rowRules);
    $('confirm').hidden = false;
    $('confirm').focus();
  }

  async function decide(action, confirmed) {
    if (!selected) return;
    if (action === 'approve' && selectedDetail && selectedDetail.destructive && !confirmed) { askConfirmation(selectedDetail); return; }
    const reason = $('reason').value.trim();
    const body = reason ? { reason } : {};
    if (confirmed) body.confirm = true;
    try {
      const r = await api('POST', '/approvals/' + encodeURIComponent(selected) + '/' + action, body);
      if (action === 'approve') say(r.state === 'executed' ? 'Approved and executed: ' + r.rowCount + ' row(s) affected.' : 'Approved, but the write failed: ' + r.errorCode + (r.failure ? ' — ' + r.failure.message : ''));
      else if (action === 'reject') say('Rejected ' + selected + '.');
      else say('Requeued as ' + r.id + ' (pending).');
      const next = action === 'requeue' ? r.id : selected;
      await refresh();
      await open(next);
    } catch (e) { handle(e); }
  }

  // A request with two session cookies is signed out (red team rt48a L2): say why, since signing in again alone does not help.
  function severalCookies(e) { return !!(e && e.status === 401 && /^More than one console session cookie/.test(e.message || '')); }

  function handle(e) {
    if (e && e.status === 401) { showSignedOut(); $('signin-error').textContent = severalCookies(e) ? e.message : 'Your session ended: sign in again.'; return; }
    say('Error: ' + (e && e.message ? e.message : String(e)));
  }

  $('signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    $('signin-error').textContent = '';
    try {
      const r = await api('POST', '/session', { token: $('token').value });
      $('token').value = '';
      csrf = r.csrfToken;
      showSignedIn(r.operator);
    } catch (e) {
      $('signin-error').textContent = e.message;
    }
  });
  $('signout').addEventListener('click', async () => { try { await api('DELETE', '/session'); } catch (e) { /* already gone */ } showSignedOut(); });
  const refilter = () => { page = 1; refresh(); };
  $('filter').addEventListener('change', refilter);
  $('f-age').addEventListener('change', refilter);
  $('filters').addEventListener('submit', (ev) => { ev.preventDefault(); refilter(); });
  $('prev').addEventListener('click', () => { if (page > 1) { page--; refresh(); } });
  $('next').addEventListener('click', () => { if (page < pages) { page++; refresh(); } });
  $('confirm-approve').addEventListener('click', () => { $('confirm').hidden = true; decide('approve', true); });
  $('confirm-cancel').addEventListener('click', () => { $('confirm').hidden = true; say('Not approved.'); $('approve').focus(); });
  $('approve').addEventListener('click', () => decide('approve'));
  $('reject').addEventListener('click', () => decide('reject'));
  $('requeue').addEventListener('click', () => decide('requeue'));

  api('GET', '/session').then((r) => { csrf = r.csrfToken; showSignedIn(r.operator); }, (e) => { showSignedOut(); if (severalCookies(e)) $('signin-error').textContent = e.message; });
})();
