"""The restricted Pod Security Standard, as a check over pod templates.

Hand-written because no maintained Python library evaluates Pod Security levels offline (the
upstream implementation is Go, in k8s.io/pod-security-admission). It follows the "Restricted"
profile of https://kubernetes.io/docs/concepts/security/pod-security-standards/ (which includes
every Baseline control) for Kubernetes 1.34.
"""

from __future__ import annotations

from typing import Any

#: Restricted: the only volume types allowed.
ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
#: Baseline: the sysctls a pod may set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def pod_spec_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a Pod or a workload's template; None for other kinds."""
    if doc.get("kind") == "Pod":
        return dict(doc.get("spec") or {})
    if doc.get("kind") in WORKLOAD_KINDS:
        return dict(((doc.get("spec") or {}).get("template") or {}).get("spec") or {})
    if doc.get("kind") == "CronJob":
        job = ((doc.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
        return dict((job.get("template") or {}).get("spec") or {})
    return None


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Every way ``pod`` (a pod spec) breaks the restricted profile; empty when it complies."""
    problems: list[str] = []
    pod_ctx = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            problems.append(f"{flag} is set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"volume {volume.get('name')!r} has a disallowed type {sorted(kinds - ALLOWED_VOLUMES)}")
    for sysctl in pod_ctx.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"unsafe sysctl {sysctl.get('name')}")
    if pod_ctx.get("runAsUser") == 0:
        problems.append("the pod runs as user 0")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        problems.append(f"pod seccomp profile {pod_seccomp}")
    for kind, containers in (
        ("container", pod.get("containers") or []),
        ("init container", pod.get("initContainers") or []),
        ("ephemeral container", pod.get("ephemeralContainers") or []),
    ):
        for container in containers:
            where = f"{kind} {container.get('name')!r}"
            ctx = container.get("securityContext") or {}
            if ctx.get("privileged"):
                problems.append(f"{where} is privileged")
            if ctx.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where} does not set allowPrivilegeEscalation: false")
            if not (
                ctx.get("runAsNonRoot") is True or (pod_ctx.get("runAsNonRoot") is True and "runAsNonRoot" not in ctx)
            ):
                problems.append(f"{where} may run as root (runAsNonRoot is not true)")
            if ctx.get("runAsUser") == 0:
                problems.append(f"{where} runs as user 0")
            seccomp = (ctx.get("seccompProfile") or {}).get("type") or pod_seccomp
            if seccomp not in ("RuntimeDefault", "Localhost"):
                problems.append(f"{where} has seccomp profile {seccomp} (RuntimeDefault or Localhost required)")
            capabilities = ctx.get("capabilities") or {}
            if "ALL" not in (capabilities.get("drop") or []):
                problems.append(f"{where} does not drop ALL capabilities")
            added = set(capabilities.get("add") or [])
            if not added <= {"NET_BIND_SERVICE"}:
                problems.append(f"{where} adds capabilities {sorted(added - {'NET_BIND_SERVICE'})}")
            if not added <= BASELINE_CAPABILITIES:
                problems.append(f"{where} adds non-baseline capabilities")
            if ctx.get("procMount", "Default") != "Default":
                problems.append(f"{where} has procMount {ctx.get('procMount')}")
            for port in container.get("ports") or []:
                if port.get("hostPort"):
                    problems.append(f"{where} uses hostPort {port['hostPort']}")
            app_armor = (ctx.get("appArmorProfile") or pod_ctx.get("appArmorProfile") or {}).get("type")
            if app_armor == "Unconfined":
                problems.append(f"{where} has an Unconfined AppArmor profile")
            selinux = ctx.get("seLinuxOptions") or pod_ctx.get("seLinuxOptions") or {}
            if selinux.get("user") or selinux.get("role"):
                problems.append(f"{where} sets a SELinux user or role")
            if selinux.get("type") not in (
                None,
                "",
                "container_t",
                "container_init_t",
                "container_kvm_t",
                "container_engine_t",
            ):
                problems.append(f"{where} has SELinux type {selinux.get('type')}")
    return problems
