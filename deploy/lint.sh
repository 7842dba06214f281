#!/usr/bin/env bash
# The project's lint, as CI runs it (.ci/run): formatting of every C++ and
# CUDA file (clang-format, .clang-format), Python style (ruff, its binary or
# its WebAssembly build through Node.js; else flake8), and clang-tidy's checks (.clang-tidy) on
# the C++ files the last commit touched, at most LINT_TIDY_MAX (12) of them
# (LINT_TIDY_ALL=1: on every file;
# it needs the build's compile_commands.json, ${BUILD_DIR:-build}).
#   deploy/lint.sh            # check
#   FIX=1 deploy/lint.sh      # reformat in place instead of failing
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
mapfile -t cxx < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${FIX:-0}" == 1 ]]; then
  clang-format -i "${cxx[@]}"
else
  if ! clang-format --dry-run -Werror "${cxx[@]}" 2>/tmp/tandem-lint-format.log; then
    grep -E "^[^ ].*: (error|warning):" /tmp/tandem-lint-format.log | cut -d: -f1 | sort -u | sed 's/^/format: /'
    echo "lint: clang-format would change the files above (FIX=1 deploy/lint.sh reformats them)"
    status=1
  fi
fi

# Python: ruff's pycodestyle and pyflakes rules at 120 columns (E402:
# scripts put the source tree on sys.path before importing from it). The
# ruff binary where it is installed, else its WebAssembly build from npm
# (pinned, installed into build-lint/ once; Debian 12 has no ruff package),
# else flake8 (.flake8, the same rules).
mapfile -t py < <(git ls-files '*.py')
ruff_rules=(--line-length 120 --select E,F,W --ignore E402)
ruff_wasm=build-lint/ruff-wasm
ruff_wasm_version=0.17.4
if [[ ! -d "$ruff_wasm/node_modules/@astral-sh/ruff-wasm-nodejs" ]] && ! command -v ruff >/dev/null 2>&1 &&
  command -v npm >/dev/null 2>&1; then
  mkdir -p "$ruff_wasm" &&
    npm install --prefix "$ruff_wasm" --no-save --silent "@astral-sh/ruff-wasm-nodejs@$ruff_wasm_version" >/dev/null 2>&1 ||
    echo "lint: could not install ruff's npm package; falling back to flake8"
fi
if command -v ruff >/dev/null 2>&1; then
  ruff check "${ruff_rules[@]}" "${py[@]}" || status=1
elif [[ -d "$ruff_wasm/node_modules/@astral-sh/ruff-wasm-nodejs" ]] && command -v node >/dev/null 2>&1; then
  node deploy/ruff.mjs "$ruff_wasm" "${ruff_rules[@]}" "${py[@]}" || status=1
elif command -v flake8 >/dev/null 2>&1; then
  flake8 "${py[@]}" || status=1
else
  echo "lint: none of ruff, Node.js with npm, or flake8 is installed (deploy/install-deps.sh installs flake8)"
  status=1
fi

build=${BUILD_DIR:-build}
if [[ -f "$build/compile_commands.json" ]] && command -v clang-tidy >/dev/null 2>&1; then
  if [[ "${LINT_TIDY_ALL:-0}" == 1 ]]; then
    mapfile -t tidy < <(git ls-files '*.cc' | grep -v '^bench/results/')
  else
    # The last commit's files, at most LINT_TIDY_MAX of them (about 5 s
    # each on two cores; a commit that touches the whole tree is a
    # LINT_TIDY_ALL=1 run, not CI's).
    mapfile -t tidy < <(git diff --name-only --diff-filter=AM HEAD~1 HEAD -- '*.cc' 2>/dev/null | head -n "${LINT_TIDY_MAX:-12}" || true)
  fi
  # Only files the build compiles (its compile commands know them), and no
  # CUDA-only sources (clang-tidy parses them as host C++).
  files=()
  for f in "${tidy[@]}"; do
    [[ -f "$f" && "$f" != kernels/cuda/* && "$f" != tests/gpu/* ]] && grep -q "\"file\": \".*/$f\"" "$build/compile_commands.json" && files+=("$f")
  done
  if [[ ${#files[@]} -gt 0 ]]; then
    # The build's commands are g++'s: without its precompiled header (a .gch
    # clang cannot read), and g++-only warning flags are let be.
    db=$(mktemp -d)
    sed -e 's# -include [^ ]*cmake_pch\.hxx##g' -e 's/ -Winvalid-pch//g' \
      "$build/compile_commands.json" > "$db/compile_commands.json"
    printf '%s\n' "${files[@]}" |
      xargs -P "${JOBS:-2}" -n 4 clang-tidy -p "$db" --quiet --extra-arg=-Wno-unknown-warning-option 2>/dev/null ||
      status=1
    rm -rf "$db"
  fi
else
  echo "lint: no $build/compile_commands.json (build first) or no clang-tidy: clang-tidy skipped"
fi
[[ $status == 0 ]] && echo "lint: clean"
exit $status
