// Scheduled flows (#/flows): schedule, enabled, next run, last outcome; enable/disable; run now.
import { get, post, seg } from "./api.js";
import { h, clear, act, announce, showError, statusClass, setTitle, timeEl } from "./ui.js";

export function flowsPage(root) {
  setTitle("Flows");
  let disposed = false;
  const list = h("div", { id: "flows" }, h("p", { class: "muted" }, "Loading…"));
  const refresh = h("button", { type: "button", id: "flows-refresh" }, "Refresh");
  root.append(h("div", { class: "page-head" }, h("h1", {}, "Flows"), h("div", { class: "head-actions" }, refresh)), list);

  async function load() {
    try {
      const flows = await get("/flows");
      if (disposed) return;
      const lastRuns = await Promise.all(
        flows.map((f) => get(`/flows/${seg(f.name)}/runs`, { query: { limit: 1 } }).then((r) => r[0] || null, () => null))
      );
      if (disposed) return;
      clear(list);
      if (!flows.length) {
        list.append(h("p", { class: "empty" }, "No flows. Add one with ", h("code", {}, "cao flow add FILE"), "."));
        return;
      }
      list.append(
        h(
          "table",
          { class: "data" },
          h("thead", {}, h("tr", {}, ["Flow", "Schedule", "Enabled", "Next run", "Last outcome", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, flows.map((f, i) => row(f, lastRuns[i])))
        )
      );
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading flows");
    }
  }

  function row(f, last) {
    const toggle = h(
      "button",
      {
        type: "button",
        class: f.enabled ? "small toggle on" : "small toggle",
        "aria-pressed": f.enabled ? "true" : "false",
        dataset: { action: "toggle-flow", flow: f.name },
        "aria-label": `${f.name} enabled`,
      },
      f.enabled ? "Enabled" : "Disabled"
    );
    toggle.addEventListener("click", () =>
      act(toggle, `${f.enabled ? "Disabling" : "Enabling"} ${f.name}`, async () => {
        await post(`/flows/${seg(f.name)}/${f.enabled ? "disable" : "enable"}`);
        announce(`${f.name} ${f.enabled ? "disabled" : "enabled"}`);
        await load();
      })
    );
    const runNow = h("button", { type: "button", class: "small primary", dataset: { action: "run-flow", flow: f.name } }, "Run now");
    const result = h("div", { class: "small", "aria-live": "polite" });
    runNow.addEventListener("click", () =>
      act(runNow, `Running ${f.name}`, async () => {
        const answer = await post(`/flows/${seg(f.name)}/run`);
        const r = answer.run || {};
        const text = answer.executed
          ? `Started: the agent got the prompt${r.terminal_id ? ` (agent ${r.terminal_id})` : ""}.`
          : `Not executed: ${r.state || "skipped"}${r.reason ? ` — ${r.reason}` : ""}.`;
        result.textContent = text;
        announce(`${f.name}: ${text}`);
      })
    );
    const outcome = last
      ? [
          h("span", { class: statusClass(last.state) }, last.state),
          " ",
          timeEl(last.finished_at || last.started_at),
          last.reason ? h("div", { class: "muted small" }, last.reason) : null,
          last.terminal_id ? h("div", { class: "small" }, h("a", { href: `#/terminal/${seg(last.terminal_id)}` }, last.terminal_id)) : null,
        ]
      : h("span", { class: "muted" }, "never run");
    return h(
      "tr",
      { dataset: { flow: f.name } },
      h(
        "td",
        { dataset: { label: "Flow" } },
        h("strong", {}, f.name),
        f.description ? h("div", { class: "muted small" }, f.description) : null,
        f.error ? h("div", { class: "reason" }, f.error) : null
      ),
      h("td", { dataset: { label: "Schedule" } }, h("code", {}, f.schedule), h("div", { class: "muted small" }, f.timezone)),
      h("td", { dataset: { label: "Enabled" } }, toggle),
      h("td", { dataset: { label: "Next run" } }, f.enabled ? timeEl(f.next_run, "—") : h("span", { class: "muted" }, "disabled")),
      h("td", { dataset: { label: "Last outcome" } }, outcome),
      h("td", { dataset: { label: "Run" }, class: "actions" }, runNow, result)
    );
  }

  refresh.addEventListener("click", () => load().then(() => announce("Refreshed")));
  load();
  return () => {
    disposed = true;
  };
}
