#!/usr/bin/env bash
# The Python package as `pip install` makes it: installed from this source
# tree (pyproject.toml) into a scratch folder, imported from there alone
# (tandem and tandem.torch), and talking to a CPU tandemd through libtandem.
#   pip_install_test.sh SOURCE_DIR TANDEMD LIBTANDEM PYTHON
set -euo pipefail
src=$1 tandemd=$2 lib=$3 python=$4
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# A copy of the tree's package sources, so that setuptools' scratch files
# stay out of the source tree.
mkdir -p "$tmp/src/client" "$tmp/src/adaptor/pytorch/tandem"
cp "$src/pyproject.toml" "$tmp/src/"
cp -r "$src/client/python" "$tmp/src/client/"
cp -r "$src/adaptor/pytorch/tandem/torch" "$tmp/src/adaptor/pytorch/tandem/"
"$python" -m pip install --no-build-isolation --no-deps --quiet --target "$tmp/site" "$tmp/src" 2>&1 |
  grep -v "Running pip as the 'root' user" || true
test -f "$tmp/site/tandem/__init__.py" && test -f "$tmp/site/tandem/torch/__init__.py"
"$tandemd" --device=cpu --endpoint="ipc://$tmp/d.sock" >"$tmp/tandemd.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -S "$tmp/d.sock" ] && break; sleep 0.05; done
cd "$tmp"
PYTHONPATH="$tmp/site" TANDEM_LIB="$lib" "$python" - "$tmp" <<'PY'
import sys
tmp = sys.argv[1]
import tandem
import tandem.torch
for module in (tandem, tandem.torch):
    assert module.__file__.startswith(tmp + "/site/"), module.__file__
client = tandem.Client(endpoint=f"ipc://{tmp}/d.sock", name="pip-installed")
stats = client.stats()
assert any("ersion" in key for key in stats), stats  # daemon_version
client.close()
print("pip-installed tandem imported from", tandem.__file__, "and reached tandemd")
PY
