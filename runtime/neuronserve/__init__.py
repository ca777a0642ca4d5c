"""neuronserve: compile a PyTorch model for Neuron (or CPU) and serve it with the KServe v2 protocol."""

__version__ = "0.1.0"
