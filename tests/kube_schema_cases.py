"""Values an InferenceDeployment's schema refuses by a bound or a list of values, with
kube-apiserver's words for each (apiextensions' field errors over kube-openapi's messages): what
``neuronfleet validate`` and the sandbox API server both say. jsonschema's own words ("32 is greater
than the maximum of 24") were said before."""

from __future__ import annotations

#: (spec YAML, indented under ``spec:`` from its second line, and the refusal as ``path: message``)
KUBE_SCHEMA_MESSAGES = [
    (
        "model: {source: s3://acme/bert/, neuronCoresPerReplica: 32}",
        "spec.model.neuronCoresPerReplica: Invalid value: 32: "
        "spec.model.neuronCoresPerReplica in body should be less than or equal to 24",
    ),
    (
        "model: {source: s3://acme/bert/}\n  scaling: {minReplicas: -1}",
        "spec.scaling.minReplicas: Invalid value: -1: "
        "spec.scaling.minReplicas in body should be greater than or equal to 0",
    ),
    (
        "model: {source: s3://acme/bert/}\n  scaling: {targetQueueDepth: 0}",
        "spec.scaling.targetQueueDepth: Invalid value: 0: "
        "spec.scaling.targetQueueDepth in body should be greater than 0",
    ),
    (
        "model: {source: s3://acme/bert/}\n  scaling: {targetUtilization: 0}",
        "spec.scaling.targetUtilization: Invalid value: 0: "
        "spec.scaling.targetUtilization in body should be greater than or equal to 0.01",
    ),
    (
        "model: {source: s3://acme/bert/}\n  warmPool: {coverage: 1.5}",
        "spec.warmPool.coverage: Invalid value: 1.5: "
        "spec.warmPool.coverage in body should be less than or equal to 0.999",
    ),
    (
        "model: {source: s3://acme/bert/}\n  scaling: {mode: Sometimes}",
        'spec.scaling.mode: Unsupported value: "Sometimes": supported values: "Auto", "Manual"',
    ),
    (
        "model: {source: s3://acme/bert/}\n  placement: {instanceTypes: [inf2.xlarge, trn1.2xlarge]}",
        'spec.placement.instanceTypes[1]: Unsupported value: "trn1.2xlarge": supported values: '
        '"inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge"',
    ),
    (
        "model: {source: s3://acme/bert/}\n  runtime: {memory: '" + "1" * 33 + "'}",
        "spec.runtime.memory: Too long: may not be more than 32 bytes",
    ),
    (
        "model: {source: s3://acme/bert/}\n  runtime: {image: ''}",
        'spec.runtime.image: Invalid value: "": spec.runtime.image in body should be at least 1 chars long',
    ),
    (
        "model: {source: s3://acme/bert/, batchBuckets: []}",
        "spec.model.batchBuckets: Invalid value: 0: spec.model.batchBuckets in body should have at least 1 items",
    ),
    (
        "model: {source: s3://acme/bert/, batchBuckets: [" + ", ".join(map(str, range(1, 18))) + "]}",
        "spec.model.batchBuckets: Too many: 17: must have at most 16 items",
    ),
]
