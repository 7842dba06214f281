#!/usr/bin/env bash
# Builds Tandem for the GPU machine and packs what runs there into one folder.
#
#   deploy/bundle-gpu.sh                      # everything
#   TARGETS="cuda_kernels_test tandemd" deploy/bundle-gpu.sh   # only these
#   CONFIGURE=0 BUILD_DIR=build TARGETS=... deploy/bundle-gpu.sh  # an existing build as it is
#
# Build: ${BUILD_DIR:-build-gpu}, ${BUILD_TYPE:-Release}, CUDA for the H200
# only: ${CUDA_ARCHITECTURES:-90-real}, machine code for sm_90 without PTX
# (every extra architecture multiplies nvcc time, and the PTX would double
# the kernels' share of every binary), from ${SOURCE_DIR:-the repository}. Bundle: ${BUNDLE_DIR:-.bundle}
# (git-ignored) with
#   bin/   every executable of the build (daemon, tests, examples, benches),
#          stripped;
#   lib/   the non-system shared libraries they load, from ldd (ZeroMQ and
#          what it pulls in, protobuf, abseil, gtest when shared, Tandem's
#          own); never glibc, libstdc++/libgcc_s (the GPU machine's are
#          newer) and never the CUDA/driver libraries (the machine's own);
#   env.sh sets LD_LIBRARY_PATH (lib/, /usr/local/cuda/lib64, the torch
#          venv's cuDNN) and PATH;
#   run-gpu-tests.sh runs the GPU tests and prints a summary.
# On the GPU machine: `. .bundle/env.sh && .bundle/run-gpu-tests.sh`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source_dir=${SOURCE_DIR:-$root}
build=${BUILD_DIR:-$root/build-gpu}
bundle=${BUNDLE_DIR:-$root/.bundle}
jobs=${JOBS:-2}
max_mib=${MAX_BUNDLE_MIB:-60}

if [[ "${CONFIGURE:-1}" != 0 ]]; then
  cmake -S "$source_dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90-real}" \
    -DTANDEM_CUDA=ON -DTANDEM_TESTS=ON >/dev/null
fi
if [[ -n "${TARGETS:-}" ]]; then
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$jobs" --target $TARGETS
else
  cmake --build "$build" -j "$jobs"
fi

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"

# Executables of the build (ELF, not under CMakeFiles); with TARGETS, only
# those targets'.
wanted=" ${TARGETS:-} "
mapfile -t binaries < <(find "$build" -path '*/CMakeFiles' -prune -o -type f -perm -u+x -print |
  while read -r f; do
    [[ -z "${TARGETS:-}" || "$wanted" == *" $(basename "$f") "* ]] || continue
    head -c 4 "$f" | grep -q $'\x7fELF' && echo "$f"
  done | sort)
if [[ ${#binaries[@]} -eq 0 ]]; then
  echo "bundle-gpu: no executables in $build" >&2
  exit 1
fi
for f in "${binaries[@]}"; do
  name=$(basename "$f")
  if [[ -e "$bundle/bin/$name" ]]; then
    echo "bundle-gpu: two executables named $name; keeping the first" >&2
    continue
  fi
  cp "$f" "$bundle/bin/$name"
done

# Libraries the machine provides itself, or must: glibc, the C++ runtime,
# CUDA and the driver.
system_libs='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.|librt\.|libresolv|libutil|libanl|libnsl|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcublasLt|libcudnn|libnvidia|libnvrtc|libnccl|libcufft|libcurand|libcusparse|libcusolver|libnvJitLink)'
declare -A seen=()
for f in "$bundle"/bin/* "${binaries[@]}"; do
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" && -f "$path" ]] || continue
    [[ "$soname" =~ $system_libs ]] && continue
    [[ -n "${seen[$soname]:-}" ]] && continue
    seen[$soname]=1
    cp -L "$path" "$bundle/lib/$soname"
  done < <(ldd "$f" 2>/dev/null || true)
done
# Shared libraries that only Python loads (ctypes): Tandem's own C ABI.
while read -r so; do
  name=$(basename "$so")
  [[ -e "$bundle/lib/$name" ]] || cp -L "$so" "$bundle/lib/$name"
done < <(find "$build" -path '*/CMakeFiles' -prune -o -name 'libtandem*.so*' -type f -print)

# The C ABI under its plain name too, for ctypes (TANDEM_LIB=lib/libtandem.so).
so=$(ls "$bundle"/lib/libtandem.so.* 2>/dev/null | head -n 1 || true)
if [[ -n "$so" && ! -e "$bundle/lib/libtandem.so" ]]; then cp "$so" "$bundle/lib/libtandem.so"; fi
rm -f "$bundle"/bin/libtandem.so*  # a library, not an executable

strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null || true

commit=${TANDEM_GIT_COMMIT:-$(git -C "$source_dir" rev-parse HEAD 2>/dev/null || true)}
cat > "$bundle/env.sh" <<'ENV'
# Source this on the GPU machine: the bundle's libraries first, then the
# machine's CUDA libraries and the cuDNN of its torch environment.
bundle_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cudnn_dir=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -n 1)
export LD_LIBRARY_PATH="$bundle_dir/lib:/usr/local/cuda/lib64${cudnn_dir:+:$cudnn_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bundle_dir/bin:$PATH"
ENV
# The commit the bundle was built from, for the benchmarks' results (the GPU
# machine's copy of the tree may carry another checkout id).
echo "export TANDEM_GIT_COMMIT=\${TANDEM_GIT_COMMIT:-$commit}" >> "$bundle/env.sh"

cat > "$bundle/run-gpu-tests.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test of the bundle (bin/cuda_*_test); extra arguments go to
# each (e.g. --gtest_filter=...). Prints a summary; exits non-zero if any
# test binary failed.
bundle_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$bundle_dir/env.sh"
failed=()
for t in "$bundle_dir"/bin/cuda_*_test; do
  [[ -x "$t" ]] || continue
  echo "=== $(basename "$t")"
  if ! "$t" "$@"; then failed+=("$(basename "$t")"); fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "GPU TESTS FAILED: ${failed[*]}"
  exit 1
fi
echo "GPU TESTS PASSED"
RUN
chmod +x "$bundle/run-gpu-tests.sh"

size_mib=$(( $(du -sb "$bundle" | cut -f1) / 1048576 ))
echo "bundle-gpu: $bundle: ${#binaries[@]} executables, $(ls "$bundle/lib" | wc -l) libraries, ${size_mib} MiB"
if (( size_mib >= max_mib )); then
  echo "bundle-gpu: the bundle is ${size_mib} MiB, over the ${max_mib} MiB limit" >&2
  exit 1
fi
