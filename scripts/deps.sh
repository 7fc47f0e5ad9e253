#!/usr/bin/env bash
# Installs every Debian package that building, testing and benchmarking ankusa needs.
# Idempotent: when everything is present it only runs dpkg-query and exits.
set -euo pipefail

PKGS=(
  build-essential pkg-config meson ninja-build
  libuv1-dev libhttp-parser-dev librocksdb-dev libssl-dev libjansson-dev libyaml-dev
  libcurl4-openssl-dev
  libcriterion-dev
  python3 python3-pytest python3-yaml curl openssl
  clang libclang-rt-14-dev
  wrk nginx-light
  e2fsprogs util-linux
  libfuse3-dev fuse3
  prometheus
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
