// Bundles the front end into src/cli_agent_orchestrator/web/assets (run by scripts/build-ui.sh).
// Deterministic: fixed file names, no timestamps, no content hashes in names.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ui = dirname(fileURLToPath(import.meta.url));
const out = join(ui, "..", "src", "cli_agent_orchestrator", "web", "assets");
mkdirSync(out, { recursive: true });

// The xterm packages ship minified code without their licence text: put it at the top.
function licence(pkg) {
  const dir = join(ui, "node_modules", ...pkg.split("/"));
  const { version } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const text = readFileSync(join(dir, "LICENSE"), "utf8").trim().replace(/\*\//g, "* /");
  return `/*! ${pkg} ${version}\n${text}\n*/`;
}
const banner = ["@xterm/xterm", "@xterm/addon-fit"].map(licence).join("\n");

const common = {
  bundle: true,
  minify: true,
  target: "es2020",
  legalComments: "inline",
  logLevel: "warning",
  charset: "utf8",
  sourcemap: false,
};

await build({
  ...common,
  entryPoints: [join(ui, "src", "main.js")],
  outfile: join(out, "app.js"),
  format: "esm",
  banner: { js: banner },
});

await build({
  ...common,
  entryPoints: [join(ui, "src", "app.css")],
  outfile: join(out, "app.css"),
});

copyFileSync(join(ui, "index.html"), join(out, "index.html"));
