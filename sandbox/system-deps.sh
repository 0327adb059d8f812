#!/usr/bin/env bash
# Install what the sandbox hosts need, once, when missing: the OpenSSH client, util-linux, and for the real-systemd
# hosts systemd-nspawn (systemd-container) and mmdebstrap (which builds their image, sandbox/rootfs).
#
# systemd-container is pinned to the version of the machine's installed systemd, so apt never upgrades the
# machine's systemd/libsystemd0 as a side effect; /etc/nsswitch.conf is restored afterwards (the package's
# postinst adds `mymachines`, which would route every name lookup through a machined that does not run here).
set -euo pipefail
need=()
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ps >/dev/null 2>&1 || need+=(procps)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
[ -x /usr/bin/python3 ] || need+=(python3)
# The Ansible path's tests: promtool checks the shipped Prometheus rules (Debian has it only in `prometheus`);
# ansible-rulebook (tests/e2e/test_ansible_rulebook.py) needs a Java 17 runtime.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if ! command -v systemd-nspawn >/dev/null 2>&1; then
  sysver=$(dpkg-query -W -f='${Version}' systemd 2>/dev/null || true)
  if [ -n "$sysver" ]; then
    need+=("systemd-container=$sysver")
  else
    need+=(systemd-container)
  fi
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "sandbox: missing ${need[*]}; install them as root (apt-get install -y --no-install-recommends ${need[*]})" >&2
    exit 1
  fi
  echo "sandbox: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  nss_backup=$(mktemp)
  cp -p /etc/nsswitch.conf "$nss_backup"
  trap 'cp -p "$nss_backup" /etc/nsswitch.conf; rm -f "$nss_backup"' EXIT
  apt-get update -qq
  # --no-upgrade: never upgrade a package that is already installed (the machine's systemd stays as it is)
  # No service started by a package's postinst (`prometheus` would start a server on :9090): policy-rc.d
  # answers 101, "action forbidden", to invoke-rc.d/deb-systemd-invoke during this install.
  policy_rc=/usr/sbin/policy-rc.d
  if [ ! -e "$policy_rc" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy_rc" && chmod 755 "$policy_rc"
    trap 'cp -p "$nss_backup" /etc/nsswitch.conf; rm -f "$nss_backup" "$policy_rc"' EXIT
  fi
  apt-get install -y -qq --no-install-recommends --no-upgrade "${need[@]}" >/dev/null
fi
