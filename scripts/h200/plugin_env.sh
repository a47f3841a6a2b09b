# Sourced by the H200 scripts: the library path for the device plugin bundled
# in .h200/ (scripts/h200/bundle.sh).
#
#   plugin_library_path <bundle-dir>
#
# Puts <bundle-dir>/lib first in LD_LIBRARY_PATH. The bundle's C++ runtime
# (libstdc++, libgcc_s, in <bundle-dir>/lib/cxx) is added only when the
# plugin does not start with the system's: a newer system runtime serves the
# plugin as well, and the bundled one may need a newer glibc than the GPU
# image has.
plugin_library_path() {
  local bundle=$1
  export LD_LIBRARY_PATH="${bundle}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
  if ! "${bundle}/bin/accelpool-device-plugin" --help > /dev/null 2>&1 \
      && [[ -d ${bundle}/lib/cxx ]]; then
    export LD_LIBRARY_PATH="${bundle}/lib/cxx:${LD_LIBRARY_PATH}"
    echo "plugin: the system's C++ runtime is older than the plugin's; using the bundled one"
  fi
}
