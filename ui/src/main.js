// Entry point: sign-in handling, the routes, and the global "not signed in" page.
import { post, setUnauthorizedHandler } from "./api.js";
import { route, start, block } from "./router.js";
import { handleLoginLink, loginFailedPage, notSignedInPage } from "./login.js";
import { clearError, showError } from "./ui.js";
import { boardPage } from "./board.js";
import { terminalPage } from "./terminal.js";
import { newSessionPage } from "./new_session.js";
import { workflowsPage, workflowRunPage } from "./workflows.js";
import { flowsPage } from "./flows.js";
import { memoryPage } from "./memory.js";
import { deletedPage } from "./deleted.js";

route("/", boardPage, "board");
route("/terminal/:id", terminalPage, "terminal");
route("/new", newSessionPage, "new");
route("/workflows", workflowsPage, "workflows");
route("/workflows/runs/:runId", workflowRunPage, "workflow-run");
route("/flows", flowsPage, "flows");
route("/memory", memoryPage, "memory");
route("/deleted", deletedPage, "deleted");

setUnauthorizedHandler(() => {
  clearError();
  document.body.classList.add("signed-out");
  block(notSignedInPage);
});

async function boot() {
  const main = document.getElementById("main");
  document.getElementById("logout").addEventListener("click", async () => {
    try {
      await post("/ui/logout", {}, { quietAuth: true });
    } catch (err) {
      if (!err.unauthorized) {
        showError(err, "Sign out");
        return;
      }
    }
    document.body.classList.add("signed-out");
    block(notSignedInPage);
  });
  window.addEventListener("hashchange", () => {
    clearError();
    document.body.classList.remove("signed-out");
  });

  if (location.pathname === "/login") {
    const ok = await handleLoginLink();
    if (!ok) {
      start(main, false);
      block(loginFailedPage);
      return;
    }
    if (location.hash !== "#/") history.replaceState(null, "", "/#/");
    start(main);
    return;
  }
  start(main);
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
else boot();
