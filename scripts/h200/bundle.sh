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
#                                    and the prebuilt libaccelpool-cuda.so
#                                    the enforcement plan runs
# .h200/lib/cxx/                     the C++ runtime it was built with, used
#                                    only where the image's is older
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
    # The C++ runtime goes apart: plugin_env.sh adds it only where the GPU
    # image's own is too old, since this one may need a newer glibc.
    libstdc++.so.*|libgcc_s.so.*) mkdir -p "${out}/lib/cxx"; cp -L "${lib}" "${out}/lib/cxx/" ;;
    *) cp -L "${lib}" "${out}/lib/" ;;
  esac
done
# The newest glibc symbol version anything in the bundle needs: the GPU
# image's glibc must be at least that.
newest_glibc() {
  xargs objdump -T 2> /dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1
}
need="$(find "${out}/bin" "${out}/lib" -maxdepth 1 -type f | newest_glibc)"
need_cxx="$(find "${out}/lib/cxx" -type f | newest_glibc)"
echo "bundle: $(du -sh "${out}" | cut -f1) in ${out} ($(find "${out}/lib" -type f | wc -l) libraries);" \
  "needs ${need:-?} or newer (${need_cxx:-?} where the image's C++ runtime is older than GLIBCXX" \
  "$(objdump -T "${out}/bin/accelpool-device-plugin" | grep -o 'GLIBCXX_3\.4\.[0-9]*' \
    | sort -t. -k3 -n -u | tail -1))"
