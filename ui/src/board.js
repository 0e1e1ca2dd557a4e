// The board (#/): every session and its agents, kept live from /ui/events. Status changes are
// applied to the row in place; the board is refetched (debounced) only when agents or sessions
// come and go, and after the event stream reconnects.
import { get, del, seg } from "./api.js";
import { subscribe } from "./events.js";
import { h, clear, act, announce, showError, formatDuration, serverNow, setServerNow, parseTime, statusClass, setTitle } from "./ui.js";

const REFETCH_EVENTS = new Set([
  "TerminalSpawned",
  "TerminalRemoved",
  "TerminalExited",
  "SessionCreated",
  "SessionKilled",
  "HandoffFinished",
  "AssignFinished",
]);

export function boardPage(root) {
  setTitle("Board");
  const terminals = new Map(); // id → terminal as /ui/board gives it (kept up to date)
  const rows = new Map(); // id → {row, status, source, reason, since, inbox, badge}
  let sessions = [];
  let disposed = false;
  let fetching = false;
  let again = false;
  let refetchTimer = null;
  let loadedOnce = false;

  const live = h("span", { class: "live-state", id: "live-state" }, "Connecting…");
  const content = h("div", { class: "board", id: "board" }, h("p", { class: "muted" }, "Loading…"));
  root.append(
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Agents"),
      h("div", { class: "head-actions" }, live, h("a", { class: "button primary", href: "#/new" }, "New session"))
    ),
    content
  );

  async function load() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      const board = await get("/ui/board");
      if (disposed) return;
      setServerNow(board.now);
      terminals.clear();
      for (const t of board.terminals || []) terminals.set(t.id, t);
      sessions = board.sessions || [];
      draw();
      loadedOnce = true;
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading the board");
    } finally {
      fetching = false;
      if (again && !disposed) {
        again = false;
        load();
      }
    }
  }

  function scheduleLoad(delay = 250) {
    clearTimeout(refetchTimer);
    refetchTimer = setTimeout(load, delay);
  }

  // Keep keyboard focus across a redraw: focusable elements carry a data-focus-key.
  function focusedKey() {
    const el = document.activeElement;
    return el && root.contains(el) ? el.getAttribute("data-focus-key") : null;
  }

  function draw() {
    const keep = focusedKey();
    rows.clear();
    clear(content);
    const bySession = new Map();
    for (const s of sessions) bySession.set(s.name, []);
    for (const t of terminals.values()) {
      if (!bySession.has(t.session_name)) bySession.set(t.session_name, []);
      bySession.get(t.session_name).push(t);
    }
    const workersOf = new Map();
    for (const t of terminals.values()) {
      if (!t.caller_id) continue;
      if (!workersOf.has(t.caller_id)) workersOf.set(t.caller_id, []);
      workersOf.get(t.caller_id).push(t.id);
    }
    if (!bySession.size) {
      content.append(
        h("p", { class: "empty" }, "No agents are running. ", h("a", { href: "#/new" }, "Start a new session"), ".")
      );
    }
    const names = [...bySession.keys()].sort((a, b) => a.localeCompare(b));
    for (const name of names) {
      const list = bySession.get(name).sort((a, b) => String(a.created_at).localeCompare(String(b.created_at)) || a.id.localeCompare(b.id));
      content.append(sessionGroup(name, list, workersOf));
    }
    tick();
    if (keep) content.querySelector(`[data-focus-key="${CSS.escape(keep)}"]`)?.focus();
  }

  function sessionGroup(name, list, workersOf) {
    const headingId = `session-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const table = h(
      "table",
      { class: "agents", "aria-labelledby": headingId },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Agent", "Profile", "Provider", "Status", "In status", "Inbox", "Relations", "Actions"].map((c) => h("th", { scope: "col" }, c))
        )
      ),
      h("tbody", {}, list.map((t) => agentRow(t, workersOf)))
    );
    return h(
      "section",
      { class: "session", dataset: { session: name } },
      h(
        "header",
        { class: "session-head" },
        h("h2", { id: headingId }, name),
        h("span", { class: "muted" }, `${list.length} agent${list.length === 1 ? "" : "s"}`),
        h(
          "button",
          {
            type: "button",
            class: "danger small",
            dataset: { action: "delete-session", focusKey: `delsession:${name}` },
            onClick: (e) => deleteSession(e.currentTarget, name),
          },
          "Delete session"
        )
      ),
      list.length ? table : h("p", { class: "muted" }, "No agents in this session.")
    );
  }

  function agentRow(t, workersOf) {
    const status = h("span", { dataset: { field: "status" } }, t.status);
    const source = h("span", { dataset: { field: "status-source" } }, t.status_source || "");
    const sep = h("span", { class: "sep", "aria-hidden": "true", hidden: !t.status_source }, " · ");
    const badge = h("span", { class: statusClass(t.status) }, status, sep, source);
    const reason = h("div", { class: "reason", dataset: { field: "reason" }, hidden: !t.status_reason }, t.status_reason || "");
    const sinceMs = parseTime(t.status_since);
    const since = h("span", { dataset: { field: "since", since: Number.isNaN(sinceMs) ? "" : String(sinceMs) } }, "");
    const inbox = h("span", { dataset: { field: "pending-inbox" } }, String(t.pending_inbox ?? 0));
    const workers = workersOf.get(t.id) || [];
    const relations = [];
    if (t.caller_id) {
      relations.push(
        h(
          "div",
          { dataset: { field: "caller" } },
          "← from ",
          h("a", { href: `#/terminal/${seg(t.caller_id)}`, dataset: { focusKey: `caller:${t.id}` } }, t.caller_id)
        )
      );
    }
    if (workers.length) {
      relations.push(
        h(
          "div",
          { dataset: { field: "workers" } },
          "workers: ",
          workers.map((w, i) => [i ? ", " : "", h("a", { href: `#/terminal/${seg(w)}`, dataset: { focusKey: `worker:${t.id}:${w}` } }, w)])
        )
      );
    }
    const row = h(
      "tr",
      { class: t.gone ? "agent gone" : "agent", dataset: { terminalId: t.id } },
      h(
        "td",
        { dataset: { label: "Agent" } },
        h("a", { href: `#/terminal/${seg(t.id)}`, class: "tid", dataset: { field: "id", focusKey: `open:${t.id}` } }, t.id),
        t.gone ? h("span", { class: "tag" }, "gone") : null,
        t.name && t.name !== t.id ? h("div", { class: "muted small" }, t.name) : null
      ),
      h(
        "td",
        { dataset: { label: "Profile" } },
        h("span", { dataset: { field: "profile" } }, t.agent_profile),
        // What workers know of each other (description, group): shown as text, never as markup.
        t.description ? h("div", { class: "small description", dataset: { field: "description" } }, t.description) : null,
        t.group && t.group.length
          ? h("div", { class: "muted small", dataset: { field: "group" } }, `group: ${t.group.join(" / ")}`)
          : null
      ),
      h("td", { dataset: { label: "Provider", field: "provider" } }, t.provider),
      h("td", { dataset: { label: "Status" } }, badge, reason),
      h("td", { dataset: { label: "In status" } }, since),
      h("td", { dataset: { label: "Inbox" } }, inbox, h("span", { class: "sr-only" }, " pending")),
      h("td", { dataset: { label: "Relations" } }, relations.length ? relations : h("span", { class: "muted" }, "—")),
      h(
        "td",
        { dataset: { label: "Actions" }, class: "actions" },
        h("a", { href: `#/terminal/${seg(t.id)}`, class: "button small", dataset: { focusKey: `view:${t.id}` } }, "Open"),
        h(
          "button",
          {
            type: "button",
            class: "danger small",
            dataset: { action: "delete-terminal", focusKey: `del:${t.id}` },
            "aria-label": `Delete agent ${t.id}`,
            onClick: (e) => deleteTerminal(e.currentTarget, t.id),
          },
          "Delete"
        )
      )
    );
    rows.set(t.id, { row, status, source, sep, reason, since, inbox, badge });
    return row;
  }

  async function deleteTerminal(button, id) {
    if (!confirm(`Delete agent ${id}? Its CLI is stopped; the scrollback can be restored later from Deleted.`)) return;
    await act(button, `Deleting agent ${id}`, async () => {
      await del(`/terminals/${seg(id)}`);
      announce(`Deleted agent ${id}`);
      scheduleLoad(0);
    });
  }

  async function deleteSession(button, name) {
    if (!confirm(`Delete session ${name} and every agent in it?`)) return;
    await act(button, `Deleting session ${name}`, async () => {
      await del(`/sessions/${seg(name)}`);
      announce(`Deleted session ${name}`);
      scheduleLoad(0);
    });
  }

  function applyStatus(ev) {
    const t = terminals.get(ev.terminal_id);
    const r = rows.get(ev.terminal_id);
    if (!t || !r) {
      scheduleLoad();
      return;
    }
    const now = serverNow();
    t.status = ev.status;
    t.status_source = ev.source || null;
    t.status_reason = ev.reason || null;
    t.status_since = new Date(now).toISOString();
    r.status.textContent = ev.status;
    r.source.textContent = ev.source || "";
    r.sep.hidden = !ev.source;
    r.badge.className = statusClass(ev.status);
    r.reason.textContent = ev.reason || "";
    r.reason.hidden = !ev.reason;
    r.since.dataset.since = String(now);
    r.since.textContent = formatDuration(0);
  }

  function bumpInbox(receiver, delta) {
    const t = terminals.get(receiver);
    const r = rows.get(receiver);
    if (!t || !r) return;
    t.pending_inbox = Math.max(0, (t.pending_inbox || 0) + delta);
    r.inbox.textContent = String(t.pending_inbox);
  }

  function onEvent(ev) {
    if (ev.type === "StatusChanged") applyStatus(ev);
    else if (ev.type === "InboxQueued") bumpInbox(ev.receiver_id, 1);
    else if (ev.type === "InboxDelivered" || ev.type === "InboxFailed") bumpInbox(ev.receiver_id, -1);
    else if (REFETCH_EVENTS.has(ev.type)) scheduleLoad();
  }

  function onConnection(err) {
    if (err) {
      live.textContent = "Reconnecting…";
      live.className = "live-state off";
      return;
    }
    live.textContent = "Live";
    live.className = "live-state on";
    // The first connection loads the board; a reconnect refetches what may have been missed.
    scheduleLoad(loadedOnce ? 250 : 0);
  }

  // One timer for the whole page: "time in current status" of every row.
  function tick() {
    const now = serverNow();
    for (const r of rows.values()) {
      const since = Number(r.since.dataset.since);
      const text = r.since.dataset.since ? formatDuration(now - since) : "—";
      if (r.since.textContent !== text) r.since.textContent = text;
    }
  }
  const timer = setInterval(tick, 1000);
  const unsubscribe = subscribe(onEvent, onConnection);
  load();

  return () => {
    disposed = true;
    clearInterval(timer);
    clearTimeout(refetchTimer);
    unsubscribe();
  };
}

