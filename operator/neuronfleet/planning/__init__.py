"""Pure decisions of the operator: no I/O, no Kopf, no Kubernetes client.

The operator's handlers and the fleet simulator call these same functions, so every rule
(placement, scaling, warm pool, fleet actions, status) is written once.
"""
