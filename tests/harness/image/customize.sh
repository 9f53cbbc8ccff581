#!/bin/bash
# Runs inside the bootstrapped rootfs (chroot) once, at image build time.
set -eu
# systemd in a container: no getty, no udev triggers, nothing that waits for hardware.
systemctl mask getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
  systemd-modules-load.service sys-kernel-debug.mount sys-kernel-tracing.mount \
  systemd-remount-fs.service apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service \
  systemd-journald-audit.socket >/dev/null 2>&1 || true
systemctl enable ssh.service >/dev/null 2>&1
# Host keys are generated per container at first boot (distinct keys matter for known_hosts pinning).
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/systemd/system/ssh.service.d
cat >/etc/systemd/system/ssh.service.d/10-hostkeys.conf <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
cat >/etc/ssh/sshd_config.d/10-llmb.conf <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF
mkdir -p /root/.ssh && chmod 700 /root/.ssh
echo 'root:*' | chpasswd -e
# Journal small and volatile.
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n' >/etc/systemd/journald.conf.d/10-small.conf
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /tmp/customize.sh
