"""The trace-driven fleet simulator behind ``neuronfleet simulate``.

It replays a request trace through a model of an Inf2 fleet (replicas with dynamic batching,
cold-start phases, node provisioning) and drives it with the same planning functions the operator
calls (:mod:`neuronfleet.planning.scaling`, :mod:`neuronfleet.planning.warmpool`,
:mod:`neuronfleet.planning.promotion`), next to faithful reimplementations of HPA, KEDA, Knative
KPA, Ray Serve, static provisioning and a clairvoyant oracle.

Method (see :mod:`neuronfleet.sim.engine`): a fluid FIFO queue on 10 ms time bins, advanced
with vectorized numpy between fleet events; every request's latency is its FIFO virtual-time wait
plus its service time, so percentiles and SLO attainment count every request.

The bundled trace ``azure-llm-2023-conv.csv`` is the Azure LLM inference trace (Microsoft,
Azure/AzurePublicDataset, CC-BY 4.0); cite Patel et al., "Splitwise: Efficient generative LLM
inference using phase splitting", ISCA 2024.
"""
