// Workflows: the spec catalogue (with lint), the runs, and one run (#/workflows/runs/<id>)
// with its steps, a live timeline, decisions for halted steps, and cancel.
import { get, post, seg, followSse } from "./api.js";
import { h, clear, act, announce, showError, statusClass, setTitle, timeEl } from "./ui.js";

export function workflowsPage(root) {
  setTitle("Workflows");
  let disposed = false;
  const specs = h("div", { id: "workflow-specs" }, h("p", { class: "muted" }, "Loading…"));
  const runs = h("div", { id: "workflow-runs" }, h("p", { class: "muted" }, "Loading…"));
  const refresh = h("button", { type: "button", id: "workflows-refresh" }, "Refresh");
  root.append(
    h("div", { class: "page-head" }, h("h1", {}, "Workflows"), h("div", { class: "head-actions" }, refresh)),
    h("section", { "aria-labelledby": "specs-title" }, h("h2", { id: "specs-title" }, "Specs"), specs),
    h("section", { "aria-labelledby": "runs-title" }, h("h2", { id: "runs-title" }, "Runs"), runs)
  );

  async function loadSpecs() {
    try {
      const list = await get("/workflows");
      if (disposed) return;
      clear(specs);
      if (!list.length) {
        specs.append(h("p", { class: "empty" }, "No workflow specs in the workflow directory."));
        return;
      }
      specs.append(
        h(
          "table",
          { class: "data" },
          h("thead", {}, h("tr", {}, ["Name", "Tier", "Steps", "Description", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, list.map(specRow))
        )
      );
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading workflow specs");
    }
  }

  function specRow(spec) {
    const file = String(spec.source_path || spec.name).split(/[\\/]/).pop();
    const findings = h("div", { class: "findings", dataset: { findingsFor: spec.name }, "aria-live": "polite" });
    const lint = h(
      "button",
      { type: "button", class: "small", dataset: { action: "lint", spec: spec.name } },
      "Lint"
    );
    lint.addEventListener("click", () =>
      act(lint, `Linting ${spec.name}`, async () => {
        const result = await post("/workflows/validate", { path: file });
        showFindings(findings, result);
      })
    );
    return h(
      "tr",
      { dataset: { spec: spec.name } },
      h("td", { dataset: { label: "Name" } }, h("strong", {}, spec.name), h("div", { class: "muted small" }, file)),
      h("td", { dataset: { label: "Tier" } }, [spec.tier, spec.mode && spec.mode !== "script" ? ` (${spec.mode})` : ""].join("")),
      h("td", { dataset: { label: "Steps" } }, spec.step_count ?? "—"),
      h("td", { dataset: { label: "Description" } }, spec.description || ""),
      h("td", { dataset: { label: "Lint" } }, lint, findings)
    );
  }

  async function loadRuns() {
    try {
      const list = await get("/workflows/runs", { query: { limit: 100 } });
      if (disposed) return;
      clear(runs);
      if (!list.length) {
        runs.append(h("p", { class: "empty" }, "No runs yet."));
        return;
      }
      runs.append(
        h(
          "table",
          { class: "data" },
          h("thead", {}, h("tr", {}, ["Run", "Workflow", "State", "Started", "Finished", "Current step"].map((c) => h("th", { scope: "col" }, c)))),
          h(
            "tbody",
            {},
            list.map((r) =>
              h(
                "tr",
                { dataset: { runId: r.run_id } },
                h("td", { dataset: { label: "Run" } }, h("a", { href: `#/workflows/runs/${seg(r.run_id)}` }, r.run_id)),
                h("td", { dataset: { label: "Workflow" } }, r.workflow_name),
                h("td", { dataset: { label: "State" } }, h("span", { class: statusClass(r.state), dataset: { field: "run-state" } }, r.state), r.kind ? ` (${r.kind})` : ""),
                h("td", { dataset: { label: "Started" } }, timeEl(r.started_at)),
                h("td", { dataset: { label: "Finished" } }, timeEl(r.finished_at, "not yet")),
                h("td", { dataset: { label: "Current step" } }, r.current_step_id || "—")
              )
            )
          )
        )
      );
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading workflow runs");
    }
  }

  refresh.addEventListener("click", () => {
    loadSpecs();
    loadRuns();
    announce("Refreshed");
  });
  loadSpecs();
  loadRuns();
  return () => {
    disposed = true;
  };
}

function showFindings(el, result) {
  clear(el);
  const status = result.status || "unknown";
  el.append(h("p", { class: statusClass(status === "pass" ? "completed" : status === "fail" ? "error" : "idle") }, `Lint: ${status}`));
  const items = [];
  for (const f of result.findings || []) {
    items.push(h("li", { class: `finding sev-${f.severity || "info"}` }, `line ${f.line ?? "?"}: [${f.rule_id || f.rule || "?"}] ${f.severity ? `${f.severity}: ` : ""}${f.message}`));
  }
  if (!(result.findings || []).length) for (const e of result.errors || []) items.push(h("li", { class: "finding sev-error" }, String(e)));
  for (const w of result.warnings || []) items.push(h("li", { class: "finding sev-warning" }, typeof w === "string" ? w : JSON.stringify(w)));
  for (const n of result.reserved_notes || []) items.push(h("li", { class: "finding sev-info" }, typeof n === "string" ? n : JSON.stringify(n)));
  el.append(items.length ? h("ul", {}, items) : h("p", { class: "muted small" }, "No findings."));
}

export function workflowRunPage(root, { runId }) {
  setTitle(`Run ${runId}`);
  let disposed = false;
  let follow = null;
  let lastSeq = 0;
  const seen = new Set();
  let statusTimer = null;
  let run = null;

  const head = h("div", { id: "run-summary", class: "run-summary" });
  const halts = h("div", { id: "run-halts" });
  const steps = h("div", { id: "run-steps" }, h("p", { class: "muted" }, "Loading…"));
  const timeline = h("ol", { id: "run-timeline", class: "timeline", "aria-live": "polite", "aria-relevant": "additions" });
  const followState = h("span", { id: "follow-state", class: "muted small" }, "");
  const cancelBtn = h("button", { type: "button", class: "danger", id: "cancel-run", dataset: { action: "cancel-run" } }, "Cancel run");
  const resumeBtn = h("button", { type: "button", id: "resume-run", dataset: { action: "resume-run" }, hidden: true }, "Resume run");

  root.append(
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Run ", h("code", {}, runId)),
      h("div", { class: "head-actions" }, resumeBtn, cancelBtn, h("a", { class: "button", href: "#/workflows" }, "All workflows"))
    ),
    head,
    halts,
    h("section", { "aria-labelledby": "steps-title" }, h("h2", { id: "steps-title" }, "Steps"), steps),
    h("section", { "aria-labelledby": "timeline-title" }, h("h2", { id: "timeline-title" }, "Timeline ", followState), timeline)
  );

  async function loadStatus() {
    try {
      run = await get(`/workflows/runs/${seg(runId)}`);
      if (disposed) return;
      drawStatus();
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading the run");
    }
  }
  function scheduleStatus() {
    clearTimeout(statusTimer);
    statusTimer = setTimeout(loadStatus, 300);
  }

  function drawStatus() {
    clear(head);
    head.append(
      h(
        "dl",
        { class: "facts" },
        fact("Workflow", run.workflow_name),
        fact("State", h("span", { class: statusClass(run.state), dataset: { field: "run-state" } }, run.state)),
        run.kind ? fact("Why", run.kind) : null,
        fact("Tier", run.tier),
        fact("Generation", run.generation),
        fact("Started", timeEl(run.started_at)),
        fact("Finished", timeEl(run.finished_at, "not yet")),
        fact("Being driven", run.driving ? "yes" : "no")
      )
    );
    cancelBtn.hidden = !(run.state === "running" || run.driving);
    resumeBtn.hidden = run.state === "running" || run.state === "completed" || Boolean(run.driving);
    const haltedIds = new Map();
    for (const halt of run.halts || []) haltedIds.set(halt.step_id, halt);
    clear(halts);
    if (haltedIds.size) {
      halts.append(
        h(
          "div",
          { class: "notice-bar" },
          h("strong", {}, "Halted: "),
          [...haltedIds.values()].map((x, i) => [i ? "; " : "", `step ${x.step_id}: ${x.message || x.rule}`]),
          run.driving ? "" : ". Decide below: Rerun gives the step one more attempt, Skip goes past it."
        )
      );
    }
    clear(steps);
    const list = run.steps || [];
    if (!list.length) {
      steps.append(h("p", { class: "muted" }, "No steps have run yet."));
      return;
    }
    steps.append(
      h(
        "table",
        { class: "data" },
        h("thead", {}, h("tr", {}, ["Step", "State", "Attempts", "Reason", "Agent", "Decision"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          list.map((s) => {
            const halt = haltedIds.get(s.id) || (s.halt ? { rule: s.halt.rule, message: s.halt.message } : null);
            const halted = Boolean(halt);
            const reason = halt ? `${halt.message || ""}${halt.rule ? ` (${halt.rule})` : ""}` : s.error ? `${s.error_kind ? `${s.error_kind}: ` : ""}${s.error}` : "";
            const decisions =
              halted && !run.driving
                ? ["rerun", "skip"].map((d) =>
                    h(
                      "button",
                      {
                        type: "button",
                        class: d === "rerun" ? "small primary" : "small",
                        dataset: { stepId: s.id, decision: d },
                        onClick: (e) => decide(e.currentTarget, s.id, d),
                      },
                      d === "rerun" ? "Rerun" : "Skip"
                    )
                  )
                : null;
            return h(
              "tr",
              { dataset: { step: s.id, halted: halted ? "true" : "false" } },
              h("td", { dataset: { label: "Step" } }, h("code", {}, s.id)),
              h("td", { dataset: { label: "State" } }, h("span", { class: statusClass(halted ? "halted" : s.state), dataset: { field: "step-state" } }, s.state), halted ? h("span", { class: "tag" }, "halted") : null),
              h("td", { dataset: { label: "Attempts" } }, String(s.attempts ?? 0)),
              h("td", { dataset: { label: "Reason", field: "step-reason" } }, reason),
              h("td", { dataset: { label: "Agent" } }, s.terminal_id ? h("a", { href: `#/terminal/${seg(s.terminal_id)}` }, s.terminal_id) : "—"),
              h("td", { dataset: { label: "Decision" }, class: "actions" }, decisions)
            );
          })
        )
      )
    );
  }

  async function decide(button, stepId, decision) {
    await act(button, `${decision === "rerun" ? "Rerunning" : "Skipping"} step ${stepId}`, async () => {
      await post(`/workflows/runs/${seg(runId)}/resume`, { decisions: { [stepId]: decision }, wait: false });
      announce(`Resumed the run: step ${stepId} will be ${decision === "rerun" ? "rerun" : "skipped"}`);
      await loadStatus();
      startFollow();
    });
  }

  cancelBtn.addEventListener("click", () => {
    if (!confirm(`Cancel run ${runId}?`)) return;
    act(cancelBtn, "Cancelling the run", async () => {
      await post(`/workflows/runs/${seg(runId)}/cancel`);
      announce("Run cancelled");
      scheduleStatus();
    });
  });

  resumeBtn.addEventListener("click", () =>
    act(resumeBtn, "Resuming the run", async () => {
      await post(`/workflows/runs/${seg(runId)}/resume`, { decisions: {}, wait: false });
      announce("Resumed the run");
      await loadStatus();
      startFollow();
    })
  );

  function addEvent(entry) {
    if (!entry || typeof entry !== "object" || seen.has(entry.seq)) return;
    seen.add(entry.seq);
    lastSeq = Math.max(lastSeq, Number(entry.seq) || 0);
    const data = entry.data && Object.keys(entry.data).length ? JSON.stringify(entry.data) : "";
    timeline.append(
      h(
        "li",
        { dataset: { seq: entry.seq, type: entry.type } },
        h("span", { class: "seq" }, `#${entry.seq}`),
        " ",
        h("strong", {}, entry.type),
        entry.step_id ? [" ", h("code", {}, entry.step_id)] : null,
        " ",
        timeEl(entry.at, ""),
        data ? h("div", { class: "event-data" }, data.length > 400 ? `${data.slice(0, 400)}…` : data) : null
      )
    );
  }

  function startFollow() {
    follow?.close();
    followState.textContent = "(following live)";
    follow = followSse(`/workflows/runs/${seg(runId)}/events?stream=true&after_seq=${lastSeq}`, {
      reconnect: false,
      onEvent: ({ event, data }) => {
        if (event === "run_absent") {
          followState.textContent = "(no such run)";
          return;
        }
        addEvent(data);
        scheduleStatus();
      },
      onEnd: async () => {
        if (disposed) return;
        followState.textContent = "(complete)";
        await loadStatus();
        if (!disposed && run && run.driving) setTimeout(() => !disposed && startFollow(), 1000);
      },
      onError: (err) => {
        if (disposed) return;
        followState.textContent = "(disconnected)";
        showError(err, "Following the timeline");
      },
    });
  }

  loadStatus();
  startFollow();
  return () => {
    disposed = true;
    clearTimeout(statusTimer);
    follow?.close();
  };
}

function fact(label, value) {
  return h("div", {}, h("dt", {}, label), h("dd", {}, value ?? "—"));
}
