#!/usr/bin/env bash
# Install what the sandbox hosts need (OpenSSH server, sudo, util-linux), once, when missing.
set -euo pipefail
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v sudo >/dev/null 2>&1 || need+=(sudo)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v ps >/dev/null 2>&1 || need+=(procps)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# fakesystemd and the sglang stand-in run under the hosts' /usr/bin/python3 (/root, pyenv and venvs are hidden)
[ -x /usr/bin/python3 ] || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "sandbox: missing ${need[*]}; install them as root (apt-get install -y ${need[*]})" >&2
    exit 1
  fi
  echo "sandbox: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
