"""neuronfleet: a Kopf operator for model-serving fleets on AWS Inf2 (Inferentia2)."""

__version__ = "0.2.0"
