"""The InferenceDeployment API (``serving.neuronfleet.dev/v1alpha1``) as typed models.

This package is the single source of truth: the CRD YAML under ``crds/`` is generated from it
(``make crds``), and the operator, the simulator and ``neuronfleet validate`` all read specs
through it.
"""

from neuronfleet.api.v1alpha1 import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Condition,
    InferenceDeployment,
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Condition",
    "InferenceDeployment",
    "InferenceDeploymentSpec",
    "InferenceDeploymentStatus",
]
