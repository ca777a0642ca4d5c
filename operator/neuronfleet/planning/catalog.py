"""The Inf2 instance catalog: what each Inferentia2 instance type offers and costs.

Figures (checked 2026-11, see shared FACTS.md):
- Chips, NeuronCores and HBM: AWS Neuron docs, ``inf2-arch.html`` and ``inferentia2.html``.
  Each Inferentia2 chip has 2 NeuronCore-v2 and 32 GiB HBM. inf2.48xlarge: 12 chips, 384 GiB.
- Allocatable CPU / memory (what pods can request after kubelet and system reservations):
  Karpenter, aws/karpenter-provider-aws ``website/content/en/docs/reference/instance-types.md``.
- On-demand prices, us-east-1, Linux: Karpenter
  ``pkg/providers/pricing/zz_generated.pricing_aws.go`` (generated 2026-07-20). Re-check before quoting.
"""

from __future__ import annotations

from dataclasses import dataclass

NEURONCORES_PER_CHIP = 2
HBM_GIB_PER_CHIP = 32

#: Kubernetes extended resources advertised by the Neuron device plugin.
RESOURCE_NEURONCORE = "aws.amazon.com/neuroncore"
RESOURCE_NEURON_DEVICE = "aws.amazon.com/neuron"
#: Taint convention on Neuron nodes (NoSchedule).
NEURON_TAINT_KEY = "aws.amazon.com/neuron"

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
#: The node's CPU architecture (the kubelet sets it): the Neuron images are amd64 only.
LABEL_ARCH = "kubernetes.io/arch"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
LABEL_ACCELERATOR_NAME = "karpenter.k8s.aws/instance-accelerator-name"
LABEL_ACCELERATOR_COUNT = "karpenter.k8s.aws/instance-accelerator-count"
LABEL_NODEPOOL = "karpenter.sh/nodepool"
ACCELERATOR_NAME = "inferentia2"


@dataclass(frozen=True)
class InstanceType:
    """One Inf2 instance type: its accelerators, host resources and price."""

    name: str
    chips: int
    vcpu: int
    host_memory_gib: int
    allocatable_cpu_millis: int
    allocatable_memory_mib: int
    usd_per_hour: float

    @property
    def neuroncores(self) -> int:
        return self.chips * NEURONCORES_PER_CHIP

    @property
    def hbm_gib(self) -> int:
        return self.chips * HBM_GIB_PER_CHIP

    @property
    def usd_per_neuroncore_hour(self) -> float:
        return self.usd_per_hour / self.neuroncores


INF2_INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("inf2.xlarge", 1, 4, 16, 3920, 14162, 0.7582),
        InstanceType("inf2.8xlarge", 1, 32, 128, 31850, 118312, 1.96786),
        InstanceType("inf2.24xlarge", 6, 96, 384, 95690, 355262, 6.49063),
        InstanceType("inf2.48xlarge", 12, 192, 768, 191450, 718987, 12.98127),
    )
}


def instance_type(name: str) -> InstanceType:
    """Look up an instance type by name; raise KeyError with the known names otherwise."""
    try:
        return INF2_INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(INF2_INSTANCE_TYPES)
        raise KeyError(f"unknown instance type {name!r}; known Inf2 types: {known}") from None
