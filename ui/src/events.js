// One shared connection to `/ui/events` for the pages that follow live changes.
import { followSse } from "./api.js";

const listeners = new Set();
const openListeners = new Set();
let stream = null;

function ensure() {
  if (stream) return;
  stream = followSse("/ui/events", {
    onEvent: ({ event, data }) => {
      const body = data && typeof data === "object" ? data : { type: event, data };
      if (!body.type) body.type = event;
      for (const fn of [...listeners]) fn(body);
    },
    onOpen: () => {
      for (const fn of [...openListeners]) fn();
    },
    onError: (err) => {
      for (const fn of [...openListeners]) fn(err);
    },
  });
}

function maybeClose() {
  if (!listeners.size && !openListeners.size && stream) {
    stream.close();
    stream = null;
  }
}

/**
 * Follow cao's events: `onEvent(body)` for each; `onConnection(err?)` on each (re)connection
 * (no argument) and on each failure (the error). Returns an unsubscribe function.
 */
export function subscribe(onEvent, onConnection) {
  listeners.add(onEvent);
  if (onConnection) openListeners.add(onConnection);
  ensure();
  return () => {
    listeners.delete(onEvent);
    if (onConnection) openListeners.delete(onConnection);
    maybeClose();
  };
}
