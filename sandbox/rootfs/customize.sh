#!/bin/sh
# Runs chrooted in the freshly bootstrapped image (mmdebstrap --customize-hook). Everything per host
# (hostname, machine-id, sshd_config, host key, authorized_keys, the systemctl wrapper, the sglang shims)
# is written into the host's own overlay upper directory at start; this image only holds what all share.
set -eu
# The sandbox users: deploy (passwordless sudo), ops (sudo asks for ops-password).
useradd --create-home --uid 2001 --user-group --shell /bin/bash deploy
useradd --create-home --uid 2002 --user-group --shell /bin/bash ops
echo 'ops:ops-password' | chpasswd
usermod --password '*' deploy  # no password, yet not locked: sshd (UsePAM no) refuses locked accounts
printf '%s\n' 'deploy ALL=(ALL:ALL) NOPASSWD: ALL' 'ops ALL=(ALL:ALL) ALL' > /etc/sudoers.d/sandbox
chmod 0440 /etc/sudoers.d/sandbox
# Nothing inside reaches out or wakes up on its own; no getty on the container's console.
for unit in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
            man-db.timer systemd-tmpfiles-clean.timer console-getty.service getty@.service \
            systemd-networkd-wait-online.service; do
  ln -sf /dev/null "/etc/systemd/system/$unit"
done
systemctl set-default multi-user.target
# The journal in memory, small; kept per boot only.
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n' \
  > /etc/systemd/journald.conf.d/sandbox.conf
# Host keys come per host (ed25519 only); an empty machine-id is filled per host.
rm -f /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
# sshd must never fall back to Debian's 0.0.0.0:22: the per-host sshd_config replaces this one.
printf '# replaced per sandbox host\nListenAddress 127.255.255.254:1\n' > /etc/ssh/sshd_config
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
