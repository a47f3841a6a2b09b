#!/usr/bin/env bash
# Packs what the GPU machine cannot build into .h200/ (ignored by git), so
# that the whole H200 run is one command there:
#
#   scripts/h200/bundle.sh [build-dir]      # here, after scripts/build.sh
#   scripts/h200/run_all.sh                 # on the GPU machine, with .h200/
#
# .h200/bin/accelpool-device-plugin  the device plugin, for NVML discovery
# .h200/lib/                         the shared libraries it needs beyond
#                                    glibc (gRPC, protobuf, cpprest, ...),
#                                    and a prebuilt libaccelpool-cuda.so,
#                                    used there only if the local build fails
# A GPU image usually has a compiler and CUDA but not the gRPC stack, which
# is why the plugin travels prebuilt. Built on x86-64 against this machine's
# glibc; the target needs the same or a newer glibc.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${repo}/build}"
plugin="${build}/src/cmd/device_plugin/accelpool-device-plugin"
shim="${build}/src/cuda/libaccelpool-cuda.so"
for f in "${plugin}" "${shim}"; do
  [[ -f ${f} ]] || { echo "bundle: ${f} is missing: run scripts/build.sh first" >&2; exit 1; }
done
out="${repo}/.h200"
rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/lib"
cp "${plugin}" "${out}/bin/"
strip --strip-debug "${out}/bin/accelpool-device-plugin"
cp "${shim}" "${out}/lib/"
# Every resolved dependency except the C library's own objects, which must
# come from the target system.
ldd "${plugin}" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "${lib}")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;;
  esac
  cp -L "${lib}" "${out}/lib/"
done
echo "bundle: $(du -sh "${out}" | cut -f1) in ${out} ($(ls "${out}/lib" | wc -l) libraries)"
