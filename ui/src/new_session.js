// Create a session (#/new): profile, provider, directory, name, tools; like `cao launch`, the
// launch is shown for review ("Proceed?") unless yolo or auto-approve is ticked.
import { get, post } from "./api.js";
import { navigate } from "./router.js";
import { h, clear, announce, showError, setTitle } from "./ui.js";

export function newSessionPage(root) {
  setTitle("New session");
  let disposed = false;

  const profile = h("select", { id: "new-profile", name: "agent_profile", required: true }, h("option", { value: "" }, "Loading profiles…"));
  const provider = h("select", { id: "new-provider", name: "provider" }, h("option", { value: "" }, "Profile default"));
  const directory = h("input", { type: "text", id: "new-directory", name: "working_directory", autocomplete: "off", placeholder: "the server's current directory", spellcheck: false });
  const sessionName = h("input", { type: "text", id: "new-session-name", name: "session_name", autocomplete: "off", placeholder: "generated", spellcheck: false });
  const tools = h("input", { type: "text", id: "new-allowed-tools", name: "allowed_tools", autocomplete: "off", placeholder: "profile default, e.g. fs_read,execute_bash", spellcheck: false });
  const yolo = h("input", { type: "checkbox", id: "new-yolo", name: "yolo" });
  const autoApprove = h("input", { type: "checkbox", id: "new-auto-approve", name: "auto_approve" });
  const profileHelp = h("p", { class: "muted small", id: "new-profile-help" }, "");
  const submit = h("button", { type: "submit", class: "primary", id: "new-review", dataset: { action: "review" } }, "Review");
  const review = h("section", { id: "launch-review", class: "review", hidden: true, "aria-labelledby": "launch-review-title" });
  const progress = h("p", { id: "new-progress", class: "muted", role: "status", "aria-live": "polite" }, "");

  const field = (label, input, hint) =>
    h("div", { class: "field" }, h("label", { for: input.id }, label), input, hint ? h("p", { class: "muted small" }, hint) : null);

  const form = h(
    "form",
    { class: "stack-form", id: "new-session-form", novalidate: true },
    field("Agent profile", profile),
    profileHelp,
    field("Provider", provider),
    field("Working directory", directory, "A directory on the server's machine; empty means the server's own."),
    field("Session name (optional)", sessionName),
    field("Allowed tools (optional, comma separated)", tools),
    h(
      "fieldset",
      {},
      h("legend", {}, "Approval"),
      h("div", { class: "check" }, yolo, h("label", { for: "new-yolo" }, "Yolo: the agent may run every tool without asking")),
      h("div", { class: "check" }, autoApprove, h("label", { for: "new-auto-approve" }, "Auto-approve: launch without the review step"))
    ),
    h("div", { class: "button-row" }, submit),
    progress
  );

  root.append(h("div", { class: "page-head" }, h("h1", {}, "New session")), form, review);

  const updateButton = () => {
    submit.textContent = yolo.checked || autoApprove.checked ? "Launch" : "Review";
  };
  yolo.addEventListener("change", updateButton);
  autoApprove.addEventListener("change", updateButton);
  for (const input of [profile, provider, directory, tools, sessionName, yolo]) {
    input.addEventListener("change", () => {
      review.hidden = true;
    });
  }

  let profiles = [];
  profile.addEventListener("change", () => {
    const p = profiles.find((x) => x.name === profile.value);
    profileHelp.textContent = p ? [p.description, p.provider ? `default provider: ${p.provider}` : ""].filter(Boolean).join(" — ") : "";
  });

  async function loadChoices() {
    try {
      const [ps, providers] = await Promise.all([get("/agents/profiles"), get("/agents/providers")]);
      if (disposed) return;
      profiles = ps || [];
      clear(profile);
      profile.append(h("option", { value: "" }, "Choose a profile…"));
      for (const p of profiles) {
        const label = `${p.name}${p.role && p.role !== p.name ? ` (${p.role})` : ""}${p.loadable === false ? " — cannot be loaded" : ""}`;
        profile.append(h("option", { value: p.name, disabled: p.loadable === false }, label));
      }
      for (const p of providers || []) {
        provider.append(h("option", { value: p.name }, p.installed ? p.name : `${p.name} (not installed)`));
      }
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Loading profiles and providers");
    }
  }

  function params() {
    return {
      agent_profile: profile.value,
      provider: provider.value || undefined,
      working_directory: directory.value.trim() || undefined,
      session_name: sessionName.value.trim() || undefined,
      allowed_tools:
        tools.value
          .split(",")
          .map((t) => t.trim())
          .filter(Boolean)
          .join(",") || undefined,
    };
  }

  async function launch(button) {
    const q = params();
    if (yolo.checked) q.yolo = "true";
    button.disabled = true;
    submit.disabled = true;
    progress.textContent = "Starting the agent… (this waits until its CLI is ready)";
    try {
      const t = await post("/sessions", undefined, { query: q });
      if (disposed) return;
      announce(`Started agent ${t.id} in session ${t.session_name}`);
      navigate(`/terminal/${encodeURIComponent(t.id)}`);
    } catch (err) {
      progress.textContent = "";
      if (!disposed && !err.unauthorized) showError(err, "Starting the session");
    } finally {
      button.disabled = false;
      submit.disabled = false;
    }
  }

  async function showReview() {
    const q = params();
    submit.disabled = true;
    try {
      const preview = await get("/ui/launch-preview", {
        query: { agent_profile: q.agent_profile, provider: q.provider, allowed_tools: q.allowed_tools, working_directory: q.working_directory },
      });
      if (disposed) return;
      clear(review);
      const toolsText = Array.isArray(preview.tools) ? (preview.tools.length ? preview.tools.join(", ") : "(none)") : String(preview.tools ?? "");
      const proceed = h("button", { type: "button", class: "primary", id: "launch-proceed", dataset: { action: "proceed" } }, "Proceed");
      const cancel = h("button", { type: "button", id: "launch-cancel", dataset: { action: "cancel-review" } }, "Change something");
      proceed.addEventListener("click", () => launch(proceed));
      cancel.addEventListener("click", () => {
        review.hidden = true;
        profile.focus();
      });
      review.append(
        h("h2", { id: "launch-review-title" }, "Launch this agent?"),
        h(
          "dl",
          { class: "facts" },
          pair("Profile", `${preview.profile}${preview.profile_source ? ` (${preview.profile_source})` : ""}`, "profile"),
          pair("Provider", preview.provider, "provider"),
          pair("Working directory", preview.working_directory || directory.value || "(the server's)", "working-directory"),
          pair("Tools", `${toolsText}${preview.tools_source ? ` (from ${preview.tools_source})` : ""}`, "tools"),
          q.session_name ? pair("Session name", q.session_name, "session-name") : null
        ),
        h("p", {}, "Proceed?"),
        h("div", { class: "button-row" }, proceed, cancel)
      );
      review.hidden = false;
      proceed.focus();
    } catch (err) {
      if (!disposed && !err.unauthorized) showError(err, "Reviewing the launch");
    } finally {
      submit.disabled = false;
    }
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!profile.value) {
      showError("Choose an agent profile", "New session");
      profile.focus();
      return;
    }
    if (yolo.checked || autoApprove.checked) launch(submit);
    else showReview();
  });

  loadChoices();
  return () => {
    disposed = true;
  };
}

function pair(label, value, key) {
  return h("div", {}, h("dt", {}, label), h("dd", { dataset: { preview: key } }, value ?? ""));
}
