#!/usr/bin/env bash
# Runs the shim tests (ShimTest.*) with the probe on an older glibc, as in a
# container whose image ships that C library: the shim is loaded through
# LD_PRELOAD into a process whose loader, libc, libdl and libpthread are the
# old ones, and must resolve, interpose and enforce exactly as on the build
# machine's glibc (docs/enforcement.md, "Any glibc from 2.17 on").
#
# Usage: old_glibc.sh <version> <root> <cuda_test> <probe>
#   version    2.23, 2.27 or 2.31
#   root       folder to unpack that glibc (and a libstdc++ for the fake
#              driver) into; the probe was linked with its loader as program
#              interpreter and its folders as rpath (src/cuda/CMakeLists.txt)
#   cuda_test  the test binary; probe  that probe build
#
# The packages come from Ubuntu's archive (ACCELPOOL_UBUNTU_MIRROR overrides
# it), checked against the checksums below and kept in <root>/../debs.
# Exits 77 (reported as skipped) when they cannot be fetched, saying so.
set -euo pipefail

version=$1
root=$2
cuda_test=$3
probe=$4
mirror=${ACCELPOOL_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}

# path in the pool, sha256
case $version in
  2.23) # Ubuntu 16.04; the C++ runtime of 18.04, which runs on 2.23
    debs=("g/glibc/libc6_2.23-0ubuntu3_amd64.deb 68d69a0fb2dae7578a2a7054bc0cd5f0994d523f60d540bc6708ff3f2fb33e18"
          "g/gcc-8/libstdc++6_8-20180414-1ubuntu2_amd64.deb 8668c100a679d68520256f9145ef6f9cf3912aa574605884fe866a4962415422"
          "g/gcc-8/libgcc1_8-20180414-1ubuntu2_amd64.deb c5a6df527fdfe0da45ff0538414535a04a6753e93a9f5902689cf1a73265423b") ;;
  2.27) # Ubuntu 18.04
    debs=("g/glibc/libc6_2.27-3ubuntu1_amd64.deb 1e1eb86fd646aa68f7144ec692b837b6b352d215880c6a2d0c92c19d36938427"
          "g/gcc-8/libstdc++6_8-20180414-1ubuntu2_amd64.deb 8668c100a679d68520256f9145ef6f9cf3912aa574605884fe866a4962415422"
          "g/gcc-8/libgcc1_8-20180414-1ubuntu2_amd64.deb c5a6df527fdfe0da45ff0538414535a04a6753e93a9f5902689cf1a73265423b") ;;
  2.31) # Ubuntu 20.04
    debs=("g/glibc/libc6_2.31-0ubuntu9_amd64.deb 847a68e5f1ec2cd4e6fc191c5eaf0547445dd5c473c7617c068ba4441f63b292"
          "g/gcc-10/libstdc++6_10-20200411-0ubuntu1_amd64.deb c27cf8a12f15308b1ae533f1313ccd6800341f77cc6d3fca34061a5e507946aa"
          "g/gcc-10/libgcc-s1_10-20200411-0ubuntu1_amd64.deb fb69f47490d22988ad8a1b3c19d5292e1ccdbd30661eedcd680f9a78b9b55d60") ;;
  *) echo "old_glibc: no packages known for glibc $version (2.23, 2.27 or 2.31)" >&2; exit 2 ;;
esac

cache=$(dirname "$root")/debs
mkdir -p "$cache"
loader=$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
if [[ ! -e $root/.unpacked ]]; then
  for entry in "${debs[@]}"; do
    read -r path sum <<<"$entry"
    file=$cache/$(basename "$path")
    if [[ ! -s $file ]] || ! sha256sum --status -c <<<"$sum  $file"; then
      echo "old_glibc: fetching $mirror/pool/main/$path"
      # A download of its own per run (tests of two versions share packages).
      if ! curl -fsSL --retry 2 --max-time 120 -o "$file.$$" "$mirror/pool/main/$path"; then
        rm -f "$file.$$"
        echo "old_glibc: SKIPPED: could not fetch $mirror/pool/main/$path; the shim was not" \
             "run on glibc $version. Set ACCELPOOL_UBUNTU_MIRROR to a reachable Ubuntu mirror."
        exit 77
      fi
      mv -f "$file.$$" "$file"
    fi
    if ! sha256sum --status -c <<<"$sum  $file"; then
      echo "old_glibc: $file does not match its pinned sha256 $sum; delete it and rerun" >&2
      exit 1
    fi
  done
  rm -rf "$root.tmp"
  mkdir -p "$root.tmp"
  for entry in "${debs[@]}"; do
    read -r path _ <<<"$entry"
    dpkg-deb -x "$cache/$(basename "$path")" "$root.tmp"
  done
  rm -rf "$root"
  mv "$root.tmp" "$root"
  touch "$root/.unpacked"
fi

# The probe must start on that loader, whose libc reports that version.
banner=$("$loader" --library-path "$root/lib/x86_64-linux-gnu" "$root/lib/x86_64-linux-gnu/libc.so.6")
banner=${banner%%$'\n'*}
echo "old_glibc: $banner"
[[ $banner == *"version $version"* ]] || { echo "old_glibc: the unpacked libc is not $version" >&2; exit 1; }
interp=$(readelf -l "$probe" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[[ $interp == "$loader" ]] || { echo "old_glibc: $probe asks for $interp, not $loader" >&2; exit 1; }

echo "old_glibc: ShimTest.* with the probe on glibc $version"
ACCELPOOL_TEST_PROBE=$probe ACCELPOOL_TEST_EXPECT_GLIBC=$version \
  exec "$cuda_test" --gtest_filter='ShimTest.*' --gtest_brief=1
