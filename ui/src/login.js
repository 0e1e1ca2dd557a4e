// The login link (`/login#<ticket>`) and the "not signed in" page.
import { post } from "./api.js";
import { h } from "./ui.js";

/**
 * At `/login`: take the ticket out of the address at once (so it never stays in the URL or
 * the history), trade it for the session cookie, and answer whether that worked.
 */
export async function handleLoginLink() {
  const ticket = decodeURIComponent(location.hash.replace(/^#/, ""));
  history.replaceState(null, "", "/");
  if (!ticket) return false;
  try {
    await post("/ui/login", { ticket }, { quietAuth: true });
    return true;
  } catch {
    return false;
  }
}

export function loginFailedPage(root) {
  root.append(
    h(
      "section",
      { class: "notice", id: "login-failed", "data-page": "login-failed" },
      h("h1", {}, "Sign-in failed"),
      h("p", {}, "This login link was already used or has expired; run ", h("code", {}, "cao ui"), " again."),
    )
  );
}

export function notSignedInPage(root) {
  root.append(
    h(
      "section",
      { class: "notice", id: "not-signed-in", "data-page": "not-signed-in" },
      h("h1", {}, "Not signed in"),
      h("p", {}, "Not signed in — run ", h("code", {}, "cao ui"), " in a terminal to get a login link."),
    )
  );
}
