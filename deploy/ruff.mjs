// Ruff's Python lint through its WebAssembly build, for machines with Node.js
// but no ruff binary (Debian 12 packages none; deploy/lint.sh installs the
// pinned npm package and runs this when `ruff` is not on PATH).
//
//   node deploy/ruff.mjs MODULE_DIR [--line-length N] [--select A,B] [--ignore C,D] FILE...
//
// MODULE_DIR holds node_modules/@astral-sh/ruff-wasm-nodejs. Prints one line
// per finding (path:row:column: CODE message), as `ruff check` does, and
// exits 1 when there is any.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const args = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(args.shift()), "index.js"));
const { Workspace, PositionEncoding } = require("@astral-sh/ruff-wasm-nodejs");

const settings = { "line-length": 88, lint: { select: ["E4", "E7", "E9", "F"], ignore: [] } };
const files = [];
for (let i = 0; i < args.length; i++) {
  const list = () => args[++i].split(",").filter((s) => s);
  if (args[i] === "--line-length") settings["line-length"] = Number(args[++i]);
  else if (args[i] === "--select") settings.lint.select = list();
  else if (args[i] === "--ignore") settings.lint.ignore = list();
  else files.push(args[i]);
}

const workspace = new Workspace(settings, PositionEncoding.Utf16);
let findings = 0;
for (const file of files) {
  for (const d of workspace.check(readFileSync(file, "utf8"))) {
    console.log(`${file}:${d.start_location.row}:${d.start_location.column}: ${d.code ?? "syntax"} ${d.message}`);
    findings++;
  }
}
if (findings > 0) console.log(`ruff: ${findings} finding(s) in ${files.length} files`);
process.exit(findings > 0 ? 1 : 0);
