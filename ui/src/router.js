// A hash router: "#/terminal/abc" → the page whose pattern matches, mounted into the main
// element. A page is `mount(root, params) → cleanup`; the cleanup runs before the next page.
// The main element's `data-page` names the page shown (tests and styles key on it).

const routes = [];
let cleanup = null;
let root = null;
let blocked = null; // a page shown instead of any route (not signed in)

export function route(pattern, mount, name) {
  const names = [];
  const regex = new RegExp(
    "^" +
      pattern.replace(/\//g, "\\/").replace(/:([A-Za-z_]+)/g, (_, name) => {
        names.push(name);
        return "([^/]+)";
      }) +
      "\\/?$"
  );
  routes.push({ regex, names, mount, name });
}

export function currentPath() {
  const hash = location.hash.replace(/^#/, "");
  return hash.startsWith("/") ? hash : "/";
}

export function navigate(path) {
  if (currentPath() === path && location.hash) render();
  else location.hash = `#${path}`;
}

function unmount() {
  if (cleanup) {
    try {
      cleanup();
    } catch (err) {
      console.error(err); // a page's cleanup failing is a bug worth seeing
    }
  }
  cleanup = null;
}

/** Replace everything with a fixed page (e.g. "not signed in") until the next navigation. */
export function block(mount) {
  if (blocked === mount) return;
  blocked = mount;
  unmount();
  root.replaceChildren();
  root.dataset.page = "blocked";
  cleanup = mount(root) || null;
}

export function render() {
  blocked = null;
  unmount();
  root.replaceChildren();
  const path = currentPath();
  for (const r of routes) {
    const m = r.regex.exec(path);
    if (!m) continue;
    const params = {};
    r.names.forEach((name, i) => {
      params[name] = decodeURIComponent(m[i + 1]);
    });
    root.dataset.page = r.name;
    cleanup = r.mount(root, params) || null;
    markNav(path);
    root.focus({ preventScroll: true });
    return;
  }
  root.dataset.page = "none";
  root.textContent = "No such page.";
}

function markNav(path) {
  for (const a of document.querySelectorAll("nav a[href^='#/']")) {
    const target = a.getAttribute("href").slice(1);
    const here = target === "/" ? path === "/" || path.startsWith("/terminal/") : path.startsWith(target);
    if (here) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

export function start(mainElement, renderNow = true) {
  root = mainElement;
  window.addEventListener("hashchange", render);
  if (renderNow) render();
}
