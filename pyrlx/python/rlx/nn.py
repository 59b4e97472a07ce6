"""`rlx.nn`: activations and normalizers in the style of `jax.nn`."""

from .numpy import gelu, log_softmax, logsumexp, relu, sigmoid, silu, softmax, softplus

__all__ = ["gelu", "log_softmax", "logsumexp", "relu", "sigmoid", "silu", "softmax", "softplus"]
