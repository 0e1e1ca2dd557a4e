// Memories (#/memory): what agents remember. Search (the database's full-text search), read a
// memory's dated entries, forget one. The data is GET /memories, GET /memories/{id}, DELETE /memories/{id}.
import { get, del, seg } from "./api.js";
import { h, clear, act, announce, showError, setTitle, timeEl } from "./ui.js";

const LIMIT = 100;

export function memoryPage(root) {
  setTitle("Memory");
  let disposed = false;
  const query = h("input", { type: "search", id: "memory-query", placeholder: "Search memories", "aria-label": "Search memories" });
  const form = h("form", { class: "head-actions", role: "search" }, query, h("button", { type: "submit" }, "Search"));
  const list = h("div", { id: "memories" }, h("p", { class: "muted" }, "Loading…"));
  root.append(h("div", { class: "page-head" }, h("h1", {}, "Memory"), form), list);

  async function load() {
    const text = query.value.trim();
    try {
      const params = text ? { query: text, sort_by: "score", limit: LIMIT } : { limit: LIMIT };
      const memories = await get("/memories", { query: params });
      if (disposed) return;
      clear(list);
      if (!memories.length) {
        list.append(h("p", { class: "empty" }, text ? "No memory matches." : "No memories yet. Agents add them with memory_store; you with ", h("code", {}, "cao memory add"), "."));
        return;
      }
      list.append(
        h(
          "table",
          { class: "data" },
          h("thead", {}, h("tr", {}, ["Key", "Scope", "Type", "Updated", "Recalled", "Content", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, memories.map(row))
        )
      );
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading memories");
    }
  }

  function row(m) {
    const entries = h("div", { class: "small", hidden: true });
    const view = h("button", { type: "button", class: "small", dataset: { action: "view-memory", memory: String(m.id) }, "aria-expanded": "false" }, "View");
    view.addEventListener("click", () =>
      act(view, `Reading ${m.key}`, async () => {
        const open = entries.hidden;
        if (open) {
          const full = await get(`/memories/${seg(m.id)}`);
          clear(entries);
          entries.append(...full.entries.map((e) => h("div", { class: "memory-entry" }, timeEl(e.at), e.terminal_id ? h("span", { class: "muted" }, ` ${e.terminal_id}`) : null, h("pre", {}, e.text))));
        }
        entries.hidden = !open;
        view.setAttribute("aria-expanded", open ? "true" : "false");
      })
    );
    const forget = h("button", { type: "button", class: "small danger", dataset: { action: "forget-memory", memory: String(m.id) } }, "Forget");
    forget.addEventListener("click", () => {
      if (!window.confirm(`Forget memory "${m.key}"?`)) return;
      return act(forget, `Forgetting ${m.key}`, async () => {
        await del(`/memories/${seg(m.id)}`);
        announce(`Forgot ${m.key}`);
        await load();
      });
    });
    const first = (m.content || "").split("\n")[0];
    return h(
      "tr",
      { dataset: { memory: String(m.id) } },
      h("td", { dataset: { label: "Key" } }, h("strong", {}, m.key), m.tags.length ? h("div", { class: "muted small" }, m.tags.join(", ")) : null),
      h("td", { dataset: { label: "Scope" } }, m.scope, m.scope_id ? h("div", { class: "muted small" }, m.scope_id) : null),
      h("td", { dataset: { label: "Type" } }, m.memory_type),
      h("td", { dataset: { label: "Updated" } }, timeEl(m.updated_at)),
      h("td", { dataset: { label: "Recalled" } }, String(m.recall_count)),
      h("td", { dataset: { label: "Content" } }, first.length > 120 ? `${first.slice(0, 120)}…` : first, entries),
      h("td", { dataset: { label: "Actions" }, class: "actions" }, view, forget)
    );
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load().then(() => announce("Searched"));
  });
  load();
  return () => {
    disposed = true;
  };
}
