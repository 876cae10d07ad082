"""One sample pod recorded by the aet daemon of its node, and shipped to object storage.

    python3 examples/k8s/record_pod.py sample-pod.yaml s3://evals/sweep-2026-12

WRITTEN FROM THE KUBERNETES DOCUMENTATION; NOT RUN ON A CLUSTER (docs/fleet.md, "Kubernetes").
It needs kubectl, the DaemonSet of dist/k8s/aet-daemonset.yaml, and the pod's init container
``aet-gate`` (examples/k8s/sample-pod.yaml). Steps: refuse a gVisor or Kata runtime class; create
the pod; find its node's aet pod and the pod's cgroup; start ``aet monitor --cgroup … --ship …``
there; open the gate (the annotation ``aet.dev/recording=true``); wait for the pod to end; stop
the monitor (SIGINT: the ledger is finished, the run shipped).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

OPAQUE = re.compile(r"runsc|gvisor|kata", re.I)


def kubectl(*args: str, check: bool = True) -> str:
    return subprocess.run(["kubectl", *args], check=check, capture_output=True, text=True).stdout


def refuse_opaque_runtime(pod: dict) -> None:
    """The refusal aet.container applies to Docker and Podman, applied to the runtime class."""
    name = pod["spec"].get("runtimeClassName")
    if not name:
        return
    handler = kubectl("get", "runtimeclass", name, "-o", "jsonpath={.handler}")
    if OPAQUE.search(name) or OPAQUE.search(handler):
        sys.exit(f"runtimeClassName {name} (handler {handler!r}) runs the pod under a kernel of its "
                 "own (gVisor, Kata): the node's eBPF monitor would not see the agent")


def cgroup_candidates(uid: str, qos: str) -> list[str]:
    """The pod's cgroup under the systemd and the cgroupfs drivers of the kubelet."""
    q = qos.lower()
    u = uid.replace("-", "_")
    if q == "guaranteed":
        return [f"/sys/fs/cgroup/kubepods.slice/kubepods-pod{u}.slice",
                f"/sys/fs/cgroup/kubepods/pod{uid}"]
    return [f"/sys/fs/cgroup/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{u}.slice",
            f"/sys/fs/cgroup/kubepods/{q}/pod{uid}"]


def main(manifest: str, ship: str) -> None:
    spec = json.loads(kubectl("create", "--dry-run=client", "-f", manifest, "-o", "json"))
    refuse_opaque_runtime(spec)
    ns, name = spec["metadata"].get("namespace", "default"), spec["metadata"]["name"]
    kubectl("create", "-f", manifest)
    while True:  # the pod's cgroup exists once its sandbox does (the gate then runs, waiting)
        pod = json.loads(kubectl("get", "pod", "-n", ns, name, "-o", "json"))
        if pod["status"].get("initContainerStatuses"):
            break
        time.sleep(0.5)
    node, uid, qos = pod["spec"]["nodeName"], pod["metadata"]["uid"], pod["status"]["qosClass"]
    aet_pod = kubectl("get", "pods", "-n", "aet", "-l", "app.kubernetes.io/name=aet",
                      "--field-selector", f"spec.nodeName={node}",
                      "-o", "jsonpath={.items[0].metadata.name}")
    probe = " ".join(f"[ -d {c} ] && echo {c} && exit 0;" for c in cgroup_candidates(uid, qos))
    cgroup = kubectl("exec", "-n", "aet", aet_pod, "--", "sh", "-c", probe + " exit 1").strip()
    out = f"/var/lib/aet/runs/{ns}-{name}-{uid[:8]}"
    monitor = subprocess.Popen(["kubectl", "exec", "-n", "aet", aet_pod, "--", "aet", "monitor",
                                "--cgroup", cgroup, "--out", out, "--ship", ship])
    while out not in kubectl("exec", "-n", "aet", aet_pod, "--", "aet", "daemon", "status",
                             "--json", check=False):
        time.sleep(0.2)  # recorded from here on: open the gate
    kubectl("annotate", "pod", "-n", ns, name, "aet.dev/recording=true")
    kubectl("wait", "pod", "-n", ns, name, "--for=jsonpath={.status.phase}=Succeeded",
            "--timeout=24h", check=False)
    kubectl("exec", "-n", "aet", aet_pod, "--", "pkill", "-INT", "-f", f"aet monitor --cgroup {cgroup}",
            check=False)
    sys.exit(monitor.wait())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
