// HTTP access to cao-server (same origin, cookie auth), and a Server-Sent Events reader
// built on fetch so that the HTTP status (401/403) and every named event are visible.

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
  }
  get unauthorized() {
    return this.status === 401 || this.status === 403;
  }
}

let onUnauthorized = () => {};

/** Called once with a handler for "not signed in" (any 401/403 answer). */
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

/** A readable one-line reason from a cao error body (`detail` is a string, an object or a list). */
export function describeDetail(body, status) {
  const detail = body && typeof body === "object" ? body.detail : undefined;
  if (typeof detail === "string" && detail) return detail;
  if (detail && typeof detail === "object" && !Array.isArray(detail)) {
    return detail.message || JSON.stringify(detail);
  }
  if (Array.isArray(detail) && detail.length) {
    return detail
      .map((d) => {
        const where = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body" && p !== "query").join(".") : "";
        return where ? `${where}: ${d.msg}` : d.msg;
      })
      .join("; ");
  }
  if (typeof body === "string" && body.trim()) return body.trim().slice(0, 300);
  return `The server answered ${status}`;
}

function withQuery(path, query) {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === "") continue;
    params.append(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}${path.includes("?") ? "&" : "?"}${text}` : path;
}

/**
 * One request. Answers the parsed JSON (null for an empty body); throws ApiError with the
 * server's `detail`. A 401/403 also calls the "not signed in" handler unless `quietAuth`.
 */
export async function api(method, path, { json, query, quietAuth = false, signal } = {}) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" }, signal };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  }
  let response;
  try {
    response = await fetch(withQuery(path, query), init);
  } catch (err) {
    if (err && err.name === "AbortError") throw err;
    throw new ApiError(0, "Cannot reach cao-server (is it running?)", null);
  }
  const text = await response.text();
  let body = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  if (!response.ok) {
    const error = new ApiError(response.status, describeDetail(body, response.status), body);
    if (error.unauthorized && !quietAuth) onUnauthorized(error);
    throw error;
  }
  return body;
}

export const get = (path, opts) => api("GET", path, opts);
export const post = (path, json, opts = {}) => api("POST", path, { ...opts, json });
export const del = (path, opts) => api("DELETE", path, opts);

/** Path segment escaping for ids and names. */
export const seg = (value) => encodeURIComponent(String(value));

/**
 * Follow a Server-Sent Events stream. `onEvent({event, data, id})` gets each event with
 * `data` parsed as JSON when it is JSON. Reconnects with backoff after an unexpected end
 * (unless `reconnect` is false) and calls `onOpen()` on every (re)connection, `onEnd()` when
 * the server ends the stream, `onError(err)` on a failure. Returns `{close()}`.
 */
export function followSse(path, { onEvent, onOpen, onEnd, onError, reconnect = true, lastId } = {}) {
  let closed = false;
  let controller = null;
  let delay = 1000;
  let timer = null;
  let lastEventId = lastId ?? null;

  async function connect() {
    if (closed) return;
    controller = new AbortController();
    const headers = { Accept: "text/event-stream" };
    if (lastEventId !== null) headers["Last-Event-ID"] = String(lastEventId);
    let response;
    try {
      response = await fetch(path, { credentials: "same-origin", headers, signal: controller.signal, cache: "no-store" });
    } catch (err) {
      if (closed) return;
      onError?.(new ApiError(0, "Lost the connection to cao-server; retrying", null));
      return retry();
    }
    if (!response.ok) {
      const text = await response.text().catch(() => "");
      let body = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      const error = new ApiError(response.status, describeDetail(body, response.status), body);
      if (error.unauthorized) {
        closed = true;
        onUnauthorized(error);
        return;
      }
      onError?.(error);
      if (response.status === 404 || response.status === 422) return; // retrying cannot help
      return retry();
    }
    delay = 1000;
    onOpen?.();
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let event = { event: "message", data: [], id: null };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let newline;
        while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
          const line = buffer.slice(0, newline);
          const skip = buffer.startsWith("\r\n", newline) ? 2 : 1;
          buffer = buffer.slice(newline + skip);
          if (line === "") {
            if (event.data.length) dispatch(event);
            event = { event: "message", data: [], id: null };
            continue;
          }
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? "" : line.slice(colon + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (field === "event") event.event = val;
          else if (field === "data") event.data.push(val);
          else if (field === "id") event.id = val;
        }
      }
    } catch (err) {
      if (closed) return;
      onError?.(new ApiError(0, "Lost the connection to cao-server; retrying", null));
      return retry();
    }
    if (closed) return;
    onEnd?.();
    if (reconnect) retry();
  }

  function dispatch(raw) {
    if (raw.id !== null) lastEventId = raw.id;
    const text = raw.data.join("\n");
    let data = text;
    try {
      data = JSON.parse(text);
    } catch {
      /* plain text */
    }
    try {
      onEvent?.({ event: raw.event, data, id: raw.id });
    } catch (err) {
      onError?.(err);
    }
  }

  function retry() {
    if (closed || !reconnect) return;
    timer = setTimeout(connect, delay);
    delay = Math.min(delay * 2, 30000);
  }

  connect();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      controller?.abort();
    },
  };
}
