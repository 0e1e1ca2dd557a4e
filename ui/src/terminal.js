// One agent (#/terminal/<id>): its facts and live status, the terminal view over the
// WebSocket (read-only until "Take control"), interrupts, messages, and the waiting prompt.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { get, post, del, seg } from "./api.js";
import { subscribe } from "./events.js";
import { navigate } from "./router.js";
import { h, clear, act, announce, showError, formatDuration, serverNow, setServerNow, parseTime, statusClass, setTitle, timeEl } from "./ui.js";

const MIN_FONT = 9; // smaller is not readable: below it the view scrolls sideways
const MAX_FONT = 15;
const FIT_VIEW_FONT = 13; // the font size "Fit window to view" sizes the pane for
const FONT_FAMILY = 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace';
const CLOSE_WORDS = {
  4401: "Not allowed: you are not signed in. Run `cao ui` to get a login link.",
  4403: "Not allowed: this browser may not view this terminal. Run `cao ui` to sign in again.",
  4004: "There is no such terminal: it was deleted or never existed.",
};

/** Width of one monospace character per pixel of font size, measured once. */
let charRatio = 0;
function measureCharRatio() {
  if (charRatio) return charRatio;
  const probe = h("span", { class: "char-probe", "aria-hidden": "true" }, "W".repeat(40));
  probe.style.fontFamily = FONT_FAMILY;
  document.body.append(probe);
  const width = probe.getBoundingClientRect().width;
  probe.remove();
  charRatio = width > 0 ? width / 40 / 100 : 0.6;
  return charRatio;
}

export function terminalPage(root, { id }) {
  setTitle(`Agent ${id}`);
  let disposed = false;
  let controlled = false;
  let ws = null;
  let wsTimer = null;
  let wsDelay = 1000;
  let stopReconnecting = false;
  let info = null;
  let statusSince = NaN;
  let promptShownFor = null;

  // --- header and facts ------------------------------------------------------------------------
  const statusText = h("span", { dataset: { field: "status" } }, "…");
  const sourceText = h("span", { dataset: { field: "status-source" } }, "");
  const sep = h("span", { class: "sep", "aria-hidden": "true", hidden: true }, " · ");
  const badge = h("span", { class: "st st-other" }, statusText, sep, sourceText);
  const sinceText = h("span", { dataset: { field: "since" } }, "");
  const reasonText = h("span", { class: "reason", dataset: { field: "reason" }, hidden: true }, "");
  const statusBox = h(
    "div",
    { id: "agent-status", class: "agent-status", role: "status", "aria-live": "polite" },
    badge,
    " ",
    h("span", { class: "muted" }, "for "),
    sinceText,
    " ",
    reasonText
  );
  const facts = h("dl", { class: "facts", id: "agent-facts" });
  const notice = h("div", { class: "notice-bar", id: "agent-notice", hidden: true });

  // --- controls --------------------------------------------------------------------------------
  const takeBtn = h("button", { type: "button", id: "take-control", class: "primary", dataset: { action: "take-control" } }, "Take control");
  const releaseBtn = h("button", { type: "button", id: "release-control", class: "warn", dataset: { action: "release-control" }, hidden: true }, "Release control");
  const fitBtn = h("button", { type: "button", id: "fit-window", dataset: { action: "fit-window" }, hidden: true }, "Fit window to view");
  const escBtn = h("button", { type: "button", id: "interrupt-esc", dataset: { action: "interrupt-esc" } }, "Interrupt (Esc)");
  const ctrlcBtn = h("button", { type: "button", id: "interrupt-ctrl-c", dataset: { action: "interrupt-ctrl-c" } }, "Interrupt (Ctrl-C)");
  const wsState = h("span", { id: "ws-state", class: "ws-state", role: "status", "aria-live": "polite" }, "Connecting…");
  const banner = h(
    "div",
    { id: "control-banner", class: "control-banner", hidden: true, role: "status" },
    h("strong", {}, "You are in control — keystrokes go to the agent"),
    h("span", { class: "small" }, " (Tab too; press Release control to stop)")
  );

  // --- waiting prompt --------------------------------------------------------------------------
  const promptQuestion = h("pre", { class: "question", id: "prompt-question" });
  const promptOptions = h("div", { class: "options", id: "prompt-options" });
  const answerInput = h("input", { type: "text", id: "prompt-answer", name: "answer", autocomplete: "off" });
  const answerForm = h(
    "form",
    { class: "inline-form", id: "prompt-answer-form" },
    h("label", { for: "prompt-answer" }, "Or type an answer"),
    answerInput,
    h("button", { type: "submit", dataset: { action: "send-answer" } }, "Send answer")
  );
  const promptPanel = h(
    "section",
    { class: "prompt-panel", id: "prompt-panel", hidden: true, "aria-labelledby": "prompt-title" },
    h("h2", { id: "prompt-title" }, "The agent is waiting for your answer"),
    promptQuestion,
    promptOptions,
    answerForm
  );

  // --- terminal view ---------------------------------------------------------------------------
  const termEl = h("div", { id: "terminal", class: "terminal-host" });
  const termWrap = h("div", { class: "term-wrap", id: "terminal-wrap" }, termEl);

  // --- message box -----------------------------------------------------------------------------
  const messageInput = h("textarea", { id: "message", name: "message", rows: 3 });
  const sendBtn = h("button", { type: "submit", id: "send-now", class: "primary", dataset: { action: "send-now" } }, "Send now");
  const queueBtn = h("button", { type: "button", id: "queue-inbox", dataset: { action: "queue-inbox" } }, "Queue in inbox");
  const messageForm = h(
    "form",
    { class: "message-form", id: "message-form" },
    h("label", { for: "message" }, "Message to the agent"),
    messageInput,
    h(
      "p",
      { class: "muted small" },
      "Send now types it into the agent as a turn; Queue in inbox delivers it when the agent is idle."
    ),
    h("div", { class: "button-row" }, sendBtn, queueBtn)
  );
  const inboxList = h("ul", { class: "inbox-list", id: "inbox-list" });
  const inboxCount = h("span", { dataset: { field: "pending-inbox" } }, "0");
  const deleteBtn = h("button", { type: "button", class: "danger", id: "delete-agent", dataset: { action: "delete-terminal" } }, "Delete agent");

  root.append(
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Agent ", h("code", {}, id)),
      h("div", { class: "head-actions" }, h("a", { href: "#/", class: "button" }, "Back to board"))
    ),
    statusBox,
    notice,
    facts,
    promptPanel,
    h("div", { class: "term-toolbar", role: "toolbar", "aria-label": "Terminal" }, takeBtn, releaseBtn, fitBtn, escBtn, ctrlcBtn, wsState),
    banner,
    termWrap,
    h("div", { class: "columns" }, messageForm, h("section", { class: "inbox" }, h("h2", {}, "Queued in inbox (", inboxCount, ")"), inboxList)),
    h("div", { class: "danger-zone" }, deleteBtn)
  );

  // --- xterm -----------------------------------------------------------------------------------
  const term = new Terminal({
    scrollback: 10000,
    cols: 220,
    rows: 50,
    fontSize: 11,
    fontFamily: FONT_FAMILY,
    cursorBlink: false,
    convertEol: false,
    theme: { background: "#101418", foreground: "#d8dee9" },
    // xterm hands `CSI 8 ; rows ; cols t` to a custom handler only when this is enabled.
    windowOptions: { setWinSizeChars: true },
  });
  const fitAddon = new FitAddon();
  term.loadAddon(fitAddon);
  term.open(termEl);
  // The pane tells its size in-band (ESC [ 8 ; rows ; cols t): show it at that size.
  term.parser.registerCsiHandler({ final: "t" }, (params) => {
    if (params[0] !== 8) return false;
    const rows = Number(params[1]);
    const cols = Number(params[2]);
    if (rows > 0 && cols > 0 && (rows !== term.rows || cols !== term.cols)) {
      term.resize(Math.min(cols, 1000), Math.min(rows, 500));
      scheduleFitFont();
    }
    return true;
  });
  term.attachCustomKeyEventHandler((e) => {
    if (e.type !== "keydown") return true;
    const copy = (e.ctrlKey || e.metaKey) && !e.altKey && (e.key === "c" || e.key === "C");
    if (!controlled) return !(copy || e.key === "Tab"); // let the browser copy / move focus
    if (copy && (e.shiftKey || e.metaKey || term.hasSelection())) return false; // copy the selection
    return true;
  });
  const sendInput = (data) => {
    if (controlled && ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "input", data }));
  };
  term.onData(sendInput);
  term.onBinary(sendInput);

  // Fit the font to the container's width (the agent's pane keeps its size); at the smallest
  // font the view scrolls sideways.
  function fitFont() {
    if (disposed) return;
    const width = termWrap.clientWidth - 16;
    if (width <= 0) return;
    const ratio = measureCharRatio();
    let size = Math.floor((width / term.cols / ratio) * 2) / 2;
    size = Math.max(MIN_FONT, Math.min(MAX_FONT, size));
    if (term.options.fontSize !== size) term.options.fontSize = size;
    // Correct for the renderer's rounding of cell widths.
    const screen = termEl.querySelector(".xterm-screen");
    for (let i = 0; i < 6 && screen && screen.offsetWidth > width && term.options.fontSize > MIN_FONT; i++) {
      term.options.fontSize = Math.max(MIN_FONT, term.options.fontSize - 0.5);
    }
  }
  let fitFrame = 0;
  function scheduleFitFont() {
    cancelAnimationFrame(fitFrame);
    fitFrame = requestAnimationFrame(fitFont);
  }
  const resizeObserver = new ResizeObserver(scheduleFitFont);
  resizeObserver.observe(termWrap);
  scheduleFitFont();

  // --- WebSocket -------------------------------------------------------------------------------
  function setWsState(text, kind = "") {
    wsState.textContent = text;
    wsState.className = `ws-state ${kind}`;
  }

  function connect() {
    if (disposed || stopReconnecting) return;
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/terminals/${seg(id)}/ws`);
    socket.binaryType = "arraybuffer";
    ws = socket;
    setWsState("Connecting…");
    socket.addEventListener("open", () => {
      if (ws !== socket) return;
      wsDelay = 1000;
      term.reset(); // the stream starts again with the scrollback
            updateControlUi();
    });
    socket.addEventListener("message", (e) => {
      if (ws !== socket) return;
      if (typeof e.data === "string") {
        handleTextFrame(e.data);
        return;
      }
      term.write(new Uint8Array(e.data));
    });
    socket.addEventListener("close", (e) => {
      if (ws !== socket || disposed) return;
      ws = null;
      const words = CLOSE_WORDS[e.code];
      if (words) {
        stopReconnecting = true;
        setWsState(words, "off");
        showError(words, "Terminal view");
        updateControlUi();
        return;
      }
      if (e.code === 1000) {
        stopReconnecting = true;
        setWsState(`Closed by the server${e.reason ? `: ${e.reason}` : ""}`, "off");
        updateControlUi();
        return;
      }
      if (stopReconnecting) {
        setWsState("Disconnected", "off");
        updateControlUi();
        return;
      }
      const seconds = Math.round(wsDelay / 1000);
      setWsState(`Disconnected${e.reason ? ` (${e.reason})` : ""}; reconnecting in ${seconds}s…`, "off");
      updateControlUi();
      wsTimer = setTimeout(connect, wsDelay);
      wsDelay = Math.min(wsDelay * 2, 30000);
    });
  }

  function handleTextFrame(text) {
    let msg = null;
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    if (msg && (msg.type === "error" || msg.error || msg.detail)) {
      showError(msg.detail || msg.error || msg.message || text, "Terminal view");
    }
  }

  // --- control ---------------------------------------------------------------------------------
  function updateControlUi() {
    const open = ws && ws.readyState === WebSocket.OPEN;
    takeBtn.hidden = controlled;
    releaseBtn.hidden = !controlled;
    fitBtn.hidden = !controlled;
    takeBtn.disabled = !open;
    banner.hidden = !controlled;
    termWrap.classList.toggle("in-control", controlled);
    if (open) setWsState(controlled ? "Connected — in control" : "Connected (view only)", "on");
  }

  takeBtn.addEventListener("click", () => {
    controlled = true;
    updateControlUi();
    term.focus();
    announce("You are in control: keystrokes go to the agent");
  });
  releaseBtn.addEventListener("click", () => {
    controlled = false;
    updateControlUi();
    takeBtn.focus();
    announce("Control released: the view is read-only");
  });
  fitBtn.addEventListener("click", () => {
    if (!controlled || !ws || ws.readyState !== WebSocket.OPEN) return;
    const previous = term.options.fontSize;
    // The whole window's height: the view is scrolled so that the terminal fills it.
    const available = Math.max(160, window.innerHeight - banner.offsetHeight - 40);
    termEl.style.height = `${available}px`;
    termEl.style.width = `${termWrap.clientWidth - 16}px`;
    term.options.fontSize = FIT_VIEW_FONT;
    const dims = fitAddon.proposeDimensions();
    term.options.fontSize = previous;
    termEl.style.height = "";
    termEl.style.width = "";
    if (!dims || !dims.cols || !dims.rows) {
      showError("Cannot measure the view", "Fit window to view");
      return;
    }
    ws.send(JSON.stringify({ type: "resize", rows: dims.rows, cols: dims.cols }));
    banner.scrollIntoView({ block: "start" });
    announce(`Asked for a ${dims.cols}×${dims.rows} pane`);
  });

  escBtn.addEventListener("click", (e) =>
    act(e.currentTarget, "Interrupt (Esc)", async () => {
      await post(`/terminals/${seg(id)}/key`, { key: "Escape" });
      announce("Sent Esc");
    })
  );
  ctrlcBtn.addEventListener("click", (e) =>
    act(e.currentTarget, "Interrupt (Ctrl-C)", async () => {
      await post(`/terminals/${seg(id)}/key`, { key: "C-c" });
      announce("Sent Ctrl-C");
    })
  );

  // --- messages --------------------------------------------------------------------------------
  messageForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const message = messageInput.value;
    if (!message.trim()) {
      showError("Write a message first", "Send now");
      return;
    }
    act(sendBtn, "Send now", async () => {
      await post(`/terminals/${seg(id)}/input`, { message });
      messageInput.value = "";
      announce("Message sent to the agent");
    });
  });
  queueBtn.addEventListener("click", () => {
    const message = messageInput.value;
    if (!message.trim()) {
      showError("Write a message first", "Queue in inbox");
      return;
    }
    act(queueBtn, "Queue in inbox", async () => {
      await post(`/terminals/${seg(id)}/inbox/messages`, { sender_id: "web-ui", message });
      messageInput.value = "";
      announce("Message queued in the agent's inbox");
      loadInbox();
    });
  });

  async function loadInbox() {
    try {
      const messages = await get(`/terminals/${seg(id)}/inbox/messages`, { query: { status: "pending", limit: 100 } });
      if (disposed) return;
      clear(inboxList);
      inboxCount.textContent = String(messages.length);
      if (!messages.length) inboxList.append(h("li", { class: "muted" }, "Nothing queued."));
      for (const m of messages) {
        inboxList.append(
          h("li", {}, h("span", { class: "muted small" }, `from ${m.sender_id}, `, timeEl(m.created_at)), h("div", { class: "msg" }, m.message))
        );
      }
    } catch (err) {
      if (!disposed && !err.unauthorized && err.status !== 404) showError(err, "Loading the inbox");
    }
  }

  // --- waiting prompt --------------------------------------------------------------------------
  async function showPrompt() {
    promptShownFor = statusSince;
    try {
      const prompt = await get(`/terminals/${seg(id)}/prompt`);
      if (disposed || statusText.textContent !== "waiting_user_answer") return;
      promptQuestion.textContent = prompt.question || "(The agent did not say what it asks.)";
      clear(promptOptions);
      for (const option of prompt.options || []) {
        promptOptions.append(
          h(
            "button",
            {
              type: "button",
              class: "option",
              dataset: { optionKey: option.key },
              onClick: (e) => answer(e.currentTarget, option.key, `Answered ${option.key}. ${option.label}`),
            },
            h("span", { class: "key" }, option.key),
            " ",
            option.label
          )
        );
      }
      promptPanel.hidden = false;
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Reading the agent's question");
    }
  }

  function answer(button, message, done) {
    return act(button, "Answering", async () => {
      await post(`/terminals/${seg(id)}/input`, { message });
      announce(done);
    });
  }
  answerForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = answerInput.value;
    if (!text.trim()) return;
    answer(answerForm.querySelector("button"), text, "Answer sent").then(() => {
      answerInput.value = "";
    });
  });

  // --- status ----------------------------------------------------------------------------------
  function setStatus(status, source, reason, sinceMs) {
    statusText.textContent = status;
    sourceText.textContent = source || "";
    sep.hidden = !source;
    badge.className = statusClass(status);
    reasonText.textContent = reason || "";
    reasonText.hidden = !reason;
    statusSince = sinceMs;
    tick();
    if (status === "waiting_user_answer") {
      if (promptShownFor !== sinceMs || promptPanel.hidden) showPrompt();
    } else {
      promptPanel.hidden = true;
    }
  }

  function tick() {
    sinceText.textContent = Number.isNaN(statusSince) ? "—" : formatDuration(serverNow() - statusSince);
  }
  const timer = setInterval(tick, 1000);

  function showFacts(t) {
    clear(facts);
    const rows = [
      ["Profile", t.agent_profile],
      ["Provider", t.provider],
      ["Session", t.session_name],
      ["Window", t.name],
      ["Directory", t.working_directory],
      ["Model", t.model],
      ["Engine", t.engine],
      [
        "Caller",
        t.caller_id ? h("a", { href: `#/terminal/${seg(t.caller_id)}` }, `← from ${t.caller_id}`) : null,
      ],
      ["Allowed tools", t.allowed_tools ? t.allowed_tools.join(", ") || "(none)" : null],
      ["Worktree", t.worktree ? `${t.worktree.path} (${t.worktree.branch}, ${t.worktree.state})` : null],
      ["Created", t.created_at ? timeEl(t.created_at) : null],
      ["Last active", t.last_active ? timeEl(t.last_active) : null],
    ];
    for (const [label, value] of rows) {
      if (value === null || value === undefined || value === "") continue;
      facts.append(h("div", {}, h("dt", {}, label), h("dd", { dataset: { fact: label.toLowerCase().replace(/ /g, "-") } }, value)));
    }
    if (t.gone) showNotice("The agent's window is gone.");
  }

  function showNotice(text) {
    notice.textContent = text;
    notice.hidden = false;
  }

  async function loadInfo() {
    try {
      const t = await get(`/terminals/${seg(id)}`);
      if (disposed) return;
      const first = !info;
      const changed = first || statusText.textContent !== t.status;
      info = t;
      showFacts(t);
      if (changed) setStatus(t.status, t.status_source, t.status_reason, first ? NaN : serverNow());
    } catch (err) {
      if (disposed || err.unauthorized) return;
      if (err.status === 404) {
        showNotice("There is no such agent: it was deleted or never existed.");
        stopReconnecting = true;
        ws?.close();
      } else showError(err, "Loading the agent");
    }
  }

  // The board knows how long the agent has been in its status; ask once.
  async function loadSince() {
    try {
      const board = await get("/ui/board");
      setServerNow(board.now);
      const t = (board.terminals || []).find((x) => x.id === id);
      if (!t || disposed) return;
      const since = parseTime(t.status_since);
      if (!Number.isNaN(since) && statusText.textContent === t.status) {
        statusSince = since;
        tick();
      }
    } catch {
      /* the status time is a nicety; errors show on the board itself */
    }
  }

  function onEvent(ev) {
    if (ev.type === "StatusChanged" && ev.terminal_id === id) {
      setStatus(ev.status, ev.source, ev.reason, serverNow());
    } else if (ev.type === "TerminalRemoved" && ev.terminal_id === id) {
      showNotice(`This agent was deleted${ev.reason ? ` (${ev.reason})` : ""}.`);
      stopReconnecting = true;
    } else if (ev.type === "TerminalExited" && ev.terminal_id === id) {
      showNotice(`The agent's CLI exited${ev.exit_code !== null && ev.exit_code !== undefined ? ` with code ${ev.exit_code}` : ""}.`);
    } else if ((ev.type === "InboxQueued" || ev.type === "InboxDelivered" || ev.type === "InboxFailed") && ev.receiver_id === id) {
      loadInbox();
    }
  }
  let connectedOnce = false;
  function onConnection(err) {
    if (err) return;
    if (connectedOnce) loadInfo(); // a reconnect: the status may have changed meanwhile
    connectedOnce = true;
  }

  deleteBtn.addEventListener("click", () => {
    if (!confirm(`Delete agent ${id}? Its CLI is stopped; the scrollback can be restored later from Deleted.`)) return;
    act(deleteBtn, "Deleting the agent", async () => {
      await del(`/terminals/${seg(id)}`);
      stopReconnecting = true;
      announce(`Deleted agent ${id}`);
      navigate("/");
    });
  });

  const unsubscribe = subscribe(onEvent, onConnection);
  loadInfo().then(loadSince);
  loadInbox();
  connect();
  updateControlUi();

  return () => {
    disposed = true;
    stopReconnecting = true;
    clearInterval(timer);
    clearTimeout(wsTimer);
    cancelAnimationFrame(fitFrame);
    resizeObserver.disconnect();
    unsubscribe();
    if (ws) {
      const socket = ws;
      ws = null;
      socket.close(1000);
    }
    term.dispose();
  };
}
