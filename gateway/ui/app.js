// vpq dashboard: reads the public API of the gateway that served it and draws it.
// No libraries, no network beyond this origin. Refreshes every REFRESH_MS.
"use strict";
(function () {
  const REFRESH_MS = 3000;
  const MAX_GROUPS = 40;
  const MAX_QUEUE_ROWS = 100;
  const MAX_DETAILED_QUEUES = 50; // queues whose detail (it names their groups) is read each refresh
  const HISTORY_LIMIT = 20;
  const TOKEN_KEY = "vpq-token";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const authOn = document.documentElement.dataset.auth === "on";
  let timer = null;
  const lastTraffic = {}; // queue -> {t, counts}: the previous refresh's per-vp totals

  // ------------------------------------------------------------------ DOM helpers
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") el.textContent = String(v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  function append(el, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  function fill(id, ...children) {
    const el = document.getElementById(id);
    el.replaceChildren();
    append(el, children);
  }
  function table(headers, rows, cls) {
    const head = h("tr", {}, headers.map((x) => h("th", { class: isNumCol(x) ? "num" : null, text: colName(x) })));
    const body = rows.map((r) => h("tr", r.attrs || {}, r.cells.map((c, i) =>
      c instanceof Node && c.tagName === "TD" ? c : h("td", { class: isNumCol(headers[i]) ? "num" : null }, c))));
    return h("table", { class: cls || null }, h("thead", {}, head), h("tbody", {}, body));
  }
  function isNumCol(x) { return typeof x === "string" && x.startsWith("#"); }
  function colName(x) { return isNumCol(x) ? x.slice(1) : x; }
  function empty(text) { return h("p", { class: "empty", text }); }

  // ------------------------------------------------------------------ units
  function num(n) {
    if (n === null || n === undefined) return "–";
    const a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (n / 1e3).toFixed(0) + "k";
    if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
  }
  function ago(ms) {
    if (ms === null || ms === undefined) return "–";
    const sec = Math.max(0, (Date.now() - ms) / 1000);
    return duration(sec * 1000) + " ago";
  }
  function duration(ms) {
    if (ms === null || ms === undefined) return "–";
    const sec = ms / 1000;
    if (sec < 1) return Math.round(ms) + " ms";
    if (sec < 90) return Math.round(sec) + " s";
    if (sec < 5400) return Math.round(sec / 60) + " min";
    if (sec < 172800) return Math.round(sec / 3600) + " h";
    return Math.round(sec / 86400) + " d";
  }
  function rate(n) { return num(n) + "/s"; }

  // ------------------------------------------------------------------ API
  class AuthNeeded extends Error {}
  async function api(path) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, { headers, cache: "no-store" });
    if (r.status === 401) throw new AuthNeeded("the token was refused");
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const msg = body && body.error ? body.error.code + ": " + body.error.message : "HTTP " + r.status;
      const err = new Error(path + " → " + msg);
      err.status = r.status;
      throw err;
    }
    return body;
  }
  async function maybe(path) {
    try { return { ok: await api(path) }; } catch (e) {
      if (e instanceof AuthNeeded) throw e;
      return { error: e };
    }
  }

  // ------------------------------------------------------------------ cluster
  function renderCluster(c, queues) {
    const pps = c.physical_partitions || [];
    const totalBytes = pps.reduce((a, p) => a + (p.bytes || 0), 0);
    const online = pps.filter((p) => p.online !== false && p.owner !== null).length;
    const card = (k, v, cls) => h("div", { class: "card" }, h("div", { class: "v " + (cls || ""), text: v }), h("div", { class: "k", text: k }));
    fill("cluster-summary",
      card("map epoch", String(c.epoch)),
      card("write nodes", String((c.write_nodes || []).length)),
      card("read nodes", String((c.read_nodes || []).length)),
      card("partitions online", online + " / " + pps.length, online === pps.length ? "ok" : "bad"),
      card("stored", bytes(totalBytes)));
    const disk = (n) => {
      const m = n.meta || {};
      const free = m.disk_free_bytes ?? m.free_bytes ?? (n.disk && n.disk.free_bytes);
      const total = m.disk_total_bytes ?? m.total_bytes ?? (n.disk && n.disk.total_bytes);
      if (free === undefined) return "–";
      return bytes(free) + " free" + (total ? " of " + bytes(total) : "");
    };
    const wn = c.write_nodes || [];
    fill("write-nodes", wn.length ? table(["node", "address", "state", "disk"], wn.map((n) => ({
      attrs: { "data-node": n.id },
      cells: [n.id, n.address, n.reachable === false ? h("span", { class: "bad", text: "unreachable" }) : h("span", { class: "ok", text: "up" }), disk(n)],
    }))) : empty("no write node"));
    const rn = c.read_nodes || [];
    fill("read-nodes", rn.length ? table(["node", "address"], rn.map((n) => ({ attrs: { "data-node": n.id }, cells: [n.id, n.address] })))
      : empty("no read node"));
    const vpsOn = {};
    for (const q of queues) (q.placement || []).forEach((pp) => { vpsOn[pp] = (vpsOn[pp] || 0) + 1; });
    const hasRepl = pps.some((p) => p.replicas !== undefined);
    const headers = ["pp", hasRepl ? "leader" : "owner"].concat(hasRepl ? ["replicas", "in sync"] : [])
      .concat(["#vps", "#end offset", "#stored", "state"]);
    fill("partitions", pps.length ? table(headers, pps.map((p) => ({
      attrs: { "data-pp": p.id },
      cells: [String(p.id), p.leader ?? p.owner ?? "–"]
        .concat(hasRepl ? [(p.replicas || []).join(", "), (p.in_sync_replicas || p.isr || []).join(", ")] : [])
        .concat([num(vpsOn[p.id] || 0), num(p.end_offset), bytes(p.bytes),
          p.online === false || p.owner === null ? h("span", { class: "bad", text: "offline" }) : h("span", { class: "ok", text: "online" })]),
    }))) : empty("no physical partition"));
  }

  // ------------------------------------------------------------------ queues
  function renderQueues(queues) {
    // the busiest first; at most MAX_QUEUE_ROWS rows (the rest are counted)
    const rows = [...queues].sort((a, b) => ((b.traffic || {}).messages_per_s || 0) - ((a.traffic || {}).messages_per_s || 0)
      || a.name.localeCompare(b.name)).slice(0, MAX_QUEUE_ROWS);
    const more = queues.length - rows.length;
    fill("queue-table", queues.length ? table(
      ["queue", "#vps", "#pps", "#msg/s", "#bytes/s", "#messages", "groups"],
      rows.map((q) => {
        const t = q.traffic || {};
        return {
          attrs: { "data-queue": q.name },
          cells: [h("td", { class: "queue-name", text: q.name }), String(vpsOf(q)), String(new Set(q.placement || []).size),
            rate(t.messages_per_s || 0), bytes(Math.round(t.bytes_per_s || 0)) + "/s", num(t.messages_total || 0),
            (q.groups || []).join(", ") || "–"],
        };
      })) : empty("no queue yet: PUT /v1/queues/{name} creates one"), more > 0 ? empty(`and ${more} more (quieter) queue(s)`) : null);
  }

  // The map is the truth about a queue's vps (a remap may have split it since its config).
  function vpsOf(q) { return (q.placement || []).length || q.virtual_partitions || 0; }

  // ------------------------------------------------------------------ groups
  function lagTable(title, by, attr) {
    const entries = Object.entries(by || {}).sort((a, b) => b[1] - a[1]);
    return h("div", {}, h("h4", { text: title }), entries.length ? table(["name", "#lag"], entries.map(([k, v]) => ({
      attrs: { class: "lag-" + attr, ["data-" + attr]: k },
      cells: [k === "" ? h("span", { class: "muted", text: attr === "lane" ? "(backbone)" : "(none)" }) : k, num(v)],
    }))) : empty("none"));
  }
  function vpLagChart(byVp, vps) {
    const n = Math.max(vps || 0, ...Object.keys(byVp || {}).map((k) => Number(k) + 1), 1);
    const values = Array.from({ length: n }, (_, i) => (byVp || {})[String(i)] || 0);
    const max = Math.max(1, ...values);
    const W = 420, H = 90, pad = 22, bw = Math.max(1, (W - pad) / n);
    const svg = s("svg", { class: "vp-lag", width: W, height: H + 16, viewBox: `0 0 ${W} ${H + 16}`, role: "img", "aria-label": "lag by virtual partition" });
    svg.append(s("line", { x1: pad, y1: H, x2: W, y2: H, stroke: "#ccd" }));
    values.forEach((v, i) => {
      const bh = v ? Math.max(2, (H - 4) * v / max) : 0;
      const r = s("rect", { class: "vp-bar", "data-vp": i, "data-lag": v, x: pad + i * bw + 0.5, y: H - bh, width: Math.max(1, bw - 1), height: bh, fill: "#2b7bb9" });
      r.append(s("title", { text: `vp ${i}: lag ${v}` }));
      svg.append(r);
    });
    svg.append(s("text", { x: 0, y: 10, text: num(max) }), s("text", { x: 0, y: H, text: "0" }),
      s("text", { x: pad, y: H + 13, text: "vp 0" }), s("text", { x: W - 40, y: H + 13, text: "vp " + (n - 1) }));
    return h("div", {}, h("h4", { text: "by virtual partition" }), svg);
  }
  function renderGroups(groups, queuesByName) {
    if (!groups.length) { fill("group-list", empty("no consumer group yet")); return; }
    fill("group-list", groups.map(({ queue, group, info, error }) => {
      const head = h("div", { class: "head" }, h("span", { class: "name", text: queue + " / " + group }));
      const card = h("div", { class: "group-card", "data-queue": queue, "data-group": group }, head);
      if (error || !info) { card.append(h("p", { class: "error", text: error ? error.message : "unavailable" })); return card; }
      const lag = info.lag || {};
      const members = info.members || [];
      append(head, [
        h("span", { class: "lag-total", "data-lag": lag.total ?? 0, text: "lag " + num(lag.total ?? 0) }),
        h("span", { class: "muted", text: "oldest unacked " + (lag.oldest_unacked_age_ms == null ? "–" : duration(lag.oldest_unacked_age_ms)) }),
        h("span", { class: "muted", text: members.length + " member(s)" }),
        lag.expired ? h("span", { class: "bad", text: num(lag.expired) + " expired" }) : null,
      ]);
      card.append(members.length ? table(["consumer", "lane", "env", "set", "#vps", "assigned", "#in flight"], members.map((m) => ({
        attrs: { class: "member", "data-consumer": m.consumer_id },
        cells: [m.consumer_id, m.lane || h("span", { class: "muted", text: "(backbone)" }), m.env, m.set || "–",
          String((m.virtual_partitions || []).length), ranges(m.virtual_partitions || []), num(m.in_flight || 0)],
      }))) : empty("no member"));
      const q = queuesByName[queue];
      card.append(h("div", { class: "lag-grid" }, lagTable("lag by lane", lag.by_lane, "lane"), lagTable("lag by env", lag.by_env, "env"),
        lagTable("lag by set", lag.by_set, "set"), vpLagChart(lag.by_virtual_partition, q ? vpsOf(q) : 0)));
      return card;
    }));
  }
  function ranges(list) {
    const xs = [...list].sort((a, b) => a - b);
    const out = [];
    for (let i = 0; i < xs.length; i++) {
      let j = i;
      while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
      out.push(i === j ? String(xs[i]) : xs[i] + "-" + xs[j]);
      i = j;
    }
    const text = out.join(",");
    return text.length > 40 ? text.slice(0, 39) + "…" : text || "–";
  }

  // ------------------------------------------------------------------ heat-map
  function heatColour(t) {
    if (t <= 0) return "#e8eef6";
    const hue = 55 - 55 * t, light = 80 - 38 * t;
    return `hsl(${hue.toFixed(0)}, 90%, ${light.toFixed(0)}%)`;
  }
  // Per-vp heat: messages per second since the previous refresh when there was one (and
  // traffic since), else the totals since the gateway started.
  function vpHeat(q) {
    const counts = (q.traffic && q.traffic.by_virtual_partition) || [];
    const now = Date.now(), prev = lastTraffic[q.name];
    lastTraffic[q.name] = { t: now, counts };
    if (prev && now - prev.t > 500) {
      const dt = (now - prev.t) / 1000;
      const rates = counts.map((n, i) => Math.max(0, n - (prev.counts[i] || 0)) / dt);
      if (rates.some((r) => r > 0)) return { values: rates, counts, unit: "msg/s now" };
    }
    return { values: counts, counts, unit: "messages" };
  }
  function heatmap(q, pps) {
    const V = vpsOf(q), placement = q.placement || [];
    const heat = vpHeat(q);
    const traffic = heat.values;
    const max = Math.max(0, ...traffic);
    const rows = [...new Set(pps.concat(placement))].sort((a, b) => a - b);
    const cw = Math.max(4, Math.min(40, Math.floor(1100 / Math.max(1, V)))), ch = 22, left = 44, top = 16;
    const W = left + V * cw + 4, H = top + rows.length * ch + 4;
    const svg = s("svg", { class: "heatmap", "data-queue": q.name, width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": "placement of " + q.name });
    rows.forEach((pp, r) => {
      svg.append(s("text", { x: 0, y: top + r * ch + 15, text: "pp " + pp }));
      svg.append(s("rect", { x: left, y: top + r * ch, width: V * cw, height: ch - 2, fill: "#f7f8fa" }));
    });
    for (let vp = 0; vp < V; vp++) {
      if (V <= 32 || vp % Math.ceil(V / 16) === 0) svg.append(s("text", { x: left + vp * cw + 2, y: 11, text: String(vp) }));
      const pp = placement[vp];
      const r = rows.indexOf(pp);
      if (r < 0) continue;
      const n = traffic[vp] || 0;
      const cell = s("rect", { class: "hm-cell", "data-vp": vp, "data-pp": pp, "data-messages": heat.counts[vp] || 0,
        x: left + vp * cw + 0.5, y: top + r * ch, width: Math.max(2, cw - 1), height: ch - 2, rx: 2,
        fill: heatColour(max ? n / max : 0), stroke: "#fff" });
      cell.append(s("title", { text: `${q.name} vp ${vp} on pp ${pp}: ${num(n)} ${heat.unit}, ${heat.counts[vp] || 0} message(s) in all` }));
      svg.append(cell);
    }
    const legend = h("span", { class: "muted", text: max ? ` · darkest = ${num(max)} ${heat.unit}` : " · no traffic seen yet" });
    return h("div", { class: "heat" }, h("div", {}, h("span", { class: "title", text: q.name }),
      h("span", { class: "muted", text: ` · ${V} vps on ${new Set(placement).size} pps` }), legend), svg);
  }
  function renderHeatmaps(queues, cluster) {
    const pps = (cluster.physical_partitions || []).map((p) => p.id);
    const shown = queues.filter((q) => (q.placement || []).length).slice(0, 30);
    fill("heatmaps", shown.length ? shown.map((q) => heatmap(q, pps)) : empty("no queue placed yet"));
  }

  // ------------------------------------------------------------------ history
  function renderHistory(epochs) {
    fill("history-table", epochs.length ? table(["#epoch", "when", "what", "changes", "imbalance"], epochs.map((e) => {
      const what = h("span", { class: "tag " + e.kind, text: e.kind + (e.stage ? " · " + e.stage : "") });
      const parts = [];
      for (const c of e.queues || []) parts.push(`${c.queue} ${c.change} (${c.virtual_partitions} vps)`);
      for (const sp of e.splits || []) parts.push(`${sp.queue} split ${sp.from_vps}→${sp.to_vps} vps`);
      if (e.moves_total) {
        const listed = (e.moves || []).slice(0, 4).map((m) => `${m.queue} vp ${m.vp}: pp ${m.from_pp}→${m.to_pp}`);
        parts.push(`${e.moves_total} move(s)` + (listed.length ? ": " + listed.join("; ") + (e.moves_total > listed.length ? "; …" : "") : ""));
      }
      if (e.fenced) parts.push(`fenced ${e.fenced} vp(s) for moving`);
      if (e.rolled_back) parts.push(`${e.rolled_back} rolled back`);
      const imb = e.imbalance_before == null ? "–" : `${e.imbalance_before.toFixed(2)} → ${e.imbalance_after.toFixed(2)}`;
      return { attrs: { "data-epoch": e.epoch }, cells: [String(e.epoch), h("span", { title: new Date(e.time_ms).toISOString(), text: ago(e.time_ms) }),
        what, parts.join(" · ") || "–", imb] };
    })) : empty("no map epoch recorded yet"));
  }

  // ------------------------------------------------------------------ refresh loop
  function status(text, isError) {
    const el = document.getElementById("status");
    el.textContent = text;
    el.className = "status" + (isError ? " error" : "");
  }
  async function refresh() {
    const [cluster, qlist, hist] = await Promise.all([maybe("/v1/cluster"), maybe("/v1/queues"), maybe("/v1/maps/history?limit=" + HISTORY_LIMIT)]);
    const queues = qlist.ok ? qlist.ok.queues || [] : [];
    const details = await Promise.all(queues.slice(0, MAX_DETAILED_QUEUES).map((q) => maybe("/v1/queues/" + encodeURIComponent(q.name))));
    details.forEach((d, i) => { if (d.ok) queues[i].groups = d.ok.groups || []; });
    const byName = Object.fromEntries(queues.map((q) => [q.name, q]));
    const pairs = [];
    for (const q of queues) for (const g of q.groups || []) if (pairs.length < MAX_GROUPS) pairs.push([q.name, g]);
    const groups = await Promise.all(pairs.map(async ([queue, group]) => {
      const r = await maybe(`/v1/queues/${encodeURIComponent(queue)}/groups/${encodeURIComponent(group)}`);
      return { queue, group, info: r.ok, error: r.error };
    }));
    if (cluster.ok) renderCluster(cluster.ok, queues); else fill("cluster-summary", h("p", { class: "error", text: cluster.error.message }));
    if (qlist.ok) renderQueues(queues); else fill("queue-table", h("p", { class: "error", text: qlist.error.message }));
    renderGroups(groups, byName);
    if (cluster.ok) renderHeatmaps(queues, cluster.ok);
    if (hist.ok) renderHistory(hist.ok.epochs || []); else fill("history-table", h("p", { class: "error", text: hist.error.message }));
    const errors = [cluster, qlist, hist].filter((x) => x.error).length;
    status(`updated ${new Date().toLocaleTimeString()}` + (cluster.ok ? ` · map epoch ${cluster.ok.epoch}` : "") +
      (errors ? ` · ${errors} call(s) failed` : ""), errors > 0);
  }
  function askToken(message) {
    if (timer) { clearTimeout(timer); timer = null; }
    document.getElementById("dashboard").hidden = true;
    document.getElementById("token-form").hidden = false;
    const err = document.getElementById("token-error");
    err.hidden = !message;
    err.textContent = message || "";
    status("waiting for a token", false);
    document.getElementById("token-input").focus();
  }
  async function loop() {
    timer = null;
    try {
      await refresh();
    } catch (e) {
      if (e instanceof AuthNeeded) {
        const had = !!sessionStorage.getItem(TOKEN_KEY);
        sessionStorage.removeItem(TOKEN_KEY);
        askToken(had ? "The gateway refused the token; give another one." : "");
        return;
      }
      status("refresh failed: " + e.message, true);
    }
    timer = setTimeout(loop, REFRESH_MS);
  }
  function start() {
    document.getElementById("dashboard").hidden = false;
    document.getElementById("token-form").hidden = true;
    document.getElementById("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
    loop();
  }
  document.getElementById("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = document.getElementById("token-input").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    document.getElementById("token-input").value = "";
    start();
  });
  document.getElementById("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    askToken("");
  });
  if (authOn && !sessionStorage.getItem(TOKEN_KEY)) askToken("");
  else start();
})();
