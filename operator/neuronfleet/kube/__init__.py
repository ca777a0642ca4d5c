"""The Kubernetes side of the operator: child-object builders and the API adapter.

``builders`` is pure (typed inputs -> plain dicts, pod dicts -> ``PodView``); the adapter that
lists, creates, patches and deletes through a Kubernetes client lives beside it. Decisions stay
in :mod:`neuronfleet.planning`; this package only translates them to and from API objects.
"""
