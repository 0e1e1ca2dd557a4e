// Small DOM and formatting helpers shared by the pages.

/**
 * Build an element: h("a", {href: "#/", class: "x", dataset: {id: 1}, onClick: fn}, "text", child).
 * Children may be strings, nodes, arrays, null or false.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2).toLowerCase(), value);
    else if (key === "text") el.textContent = value;
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// --- status and error areas (aria-live) ----------------------------------------------------
let statusTimer = null;

/** A short notice in the polite live region; it fades after a while. */
export function announce(text) {
  const el = document.getElementById("status");
  if (!el) return;
  el.textContent = text;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => {
    el.textContent = "";
  }, 6000);
}

/** Show an error (an ApiError, an Error or text) in the assertive error area until dismissed. */
export function showError(err, context) {
  const el = document.getElementById("error");
  if (!el) return;
  const message = typeof err === "string" ? err : err && err.message ? err.message : String(err);
  clear(el);
  el.append(
    h("p", {}, context ? `${context}: ${message}` : message),
    h("button", { type: "button", class: "link-button", onClick: clearError }, "Dismiss")
  );
  el.hidden = false;
}

export function clearError() {
  const el = document.getElementById("error");
  if (!el) return;
  clear(el);
  el.hidden = true;
}

/** Run an async action from a button: disables it while running and reports failures. */
export async function act(button, label, fn) {
  if (button) button.disabled = true;
  try {
    const result = await fn();
    return result;
  } catch (err) {
    if (!(err && err.unauthorized)) showError(err, label);
    return undefined;
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}

// --- time ---------------------------------------------------------------------------------------
let serverOffsetMs = 0;

/** Remember the difference between the server's clock and this browser's. */
export function setServerNow(iso) {
  const t = Date.parse(iso);
  if (!Number.isNaN(t)) serverOffsetMs = t - Date.now();
}

/** Now on the server's clock, in ms. */
export const serverNow = () => Date.now() + serverOffsetMs;

export function parseTime(iso) {
  if (!iso) return NaN;
  return Date.parse(iso);
}

/** "45s", "3m 05s", "2h 10m", "3d 4h". */
export function formatDuration(ms) {
  if (!Number.isFinite(ms)) return "";
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/** "just now", "5 minutes ago", "in 2 hours" for an ISO time; "" when absent. */
export function relativeTime(iso) {
  const t = parseTime(iso);
  if (Number.isNaN(t)) return iso ? String(iso) : "";
  const diff = t - serverNow();
  const abs = Math.abs(diff);
  if (abs < 10000) return "just now";
  const units = [
    ["day", 86400000],
    ["hour", 3600000],
    ["minute", 60000],
    ["second", 1000],
  ];
  for (const [name, size] of units) {
    if (abs >= size || name === "second") {
      const n = Math.floor(abs / size);
      const word = `${n} ${name}${n === 1 ? "" : "s"}`;
      return diff < 0 ? `${word} ago` : `in ${word}`;
    }
  }
  return "";
}

/** An element showing a relative time with the exact time as its tooltip. */
export function timeEl(iso, fallback = "—") {
  if (!iso) return h("span", { class: "muted" }, fallback);
  const t = parseTime(iso);
  return h(
    "time",
    { datetime: Number.isNaN(t) ? undefined : new Date(t).toISOString(), title: Number.isNaN(t) ? iso : new Date(t).toLocaleString() },
    relativeTime(iso)
  );
}

/** A CSS class for a status word (any string is displayed; unknown ones get a neutral colour). */
export function statusClass(status) {
  const known = ["idle", "processing", "completed", "waiting_user_answer", "error", "unknown", "running", "failed", "cancelled", "halted", "pending", "skipped", "interrupted"];
  return known.includes(status) ? `st st-${status}` : "st st-other";
}

export function setTitle(text) {
  document.title = text ? `${text} · cao` : "cao";
}
