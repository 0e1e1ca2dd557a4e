// Deleted agents (#/deleted) whose scrollback can be restored.
import { get, post, seg } from "./api.js";
import { h, clear, act, announce, showError, setTitle, timeEl } from "./ui.js";

export function deletedPage(root) {
  setTitle("Deleted agents");
  let disposed = false;
  const list = h("div", { id: "deleted" }, h("p", { class: "muted" }, "Loading…"));
  root.append(
    h("div", { class: "page-head" }, h("h1", {}, "Deleted agents")),
    h(
      "p",
      { class: "muted" },
      "Show reads a deleted agent's saved scrollback here; Restore opens it in a tmux window (the agent itself does not come back)."
    ),
    list
  );

  async function load() {
    try {
      const items = await get("/ui/deleted");
      if (disposed) return;
      clear(list);
      if (!items.length) {
        list.append(h("p", { class: "empty" }, "No deleted agents with saved scrollback."));
        return;
      }
      list.append(
        h(
          "table",
          { class: "data" },
          h("thead", {}, h("tr", {}, ["Agent", "Session", "Profile", "Provider", "Deleted", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, items.map(row))
        )
      );
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading deleted agents");
    }
  }

  function row(d) {
    const result = h("div", { class: "small", "aria-live": "polite" });
    const text = h("pre", { class: "scrollback", dataset: { scrollbackFor: d.terminal_id }, hidden: true });
    const show = h(
      "button",
      { type: "button", class: "small", dataset: { action: "show-scrollback", terminalId: d.terminal_id } },
      "Show scrollback"
    );
    show.addEventListener("click", () =>
      act(show, `Reading the scrollback of ${d.terminal_id}`, async () => {
        if (!text.hidden) {
          text.hidden = true;
          show.textContent = "Show scrollback";
          return;
        }
        const saved = await get(`/ui/deleted/${seg(d.terminal_id)}/scrollback`);
        text.textContent = typeof saved === "string" ? saved : JSON.stringify(saved);
        text.hidden = false;
        show.textContent = "Hide scrollback";
      })
    );
    const restore = h(
      "button",
      { type: "button", class: "small", dataset: { action: "restore", terminalId: d.terminal_id } },
      "Restore scrollback"
    );
    restore.addEventListener("click", () =>
      act(restore, `Restoring ${d.terminal_id}`, async () => {
        const r = await post(`/terminals/${seg(d.terminal_id)}/restore`);
        clear(result);
        result.append(
          `Restored into session ${r.session_name}, window ${r.window_name}.`,
          r.attach ? h("div", {}, "Attach with ", h("code", {}, Array.isArray(r.attach) ? r.attach.join(" ") : r.attach)) : null
        );
        announce(`Restored the scrollback of ${d.terminal_id}`);
      })
    );
    return h(
      "tr",
      { dataset: { deletedId: d.terminal_id } },
      h("td", { dataset: { label: "Agent" } }, h("code", {}, d.terminal_id)),
      h("td", { dataset: { label: "Session" } }, d.session_name || "—"),
      h("td", { dataset: { label: "Profile" } }, d.agent_profile || "—"),
      h("td", { dataset: { label: "Provider" } }, d.provider || "—"),
      h("td", { dataset: { label: "Deleted" } }, timeEl(d.deleted_at)),
      h("td", { dataset: { label: "Scrollback" }, class: "actions" }, show, " ", restore, result, text)
    );
  }

  load();
  return () => {
    disposed = true;
  };
}
