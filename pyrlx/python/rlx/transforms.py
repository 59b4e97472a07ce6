"""Graph transforms (`rlx_autodiff`), each returning a new `rlx.Graph`.

`wrt` entries are input or param names, or nodes. Output layouts follow the Rust API:
`grad` -> `[d/dwrt...]`; `grad_with_loss` -> `[loss, d/dwrt...]`; `vjp` adds inputs
`cotangent_<i>` -> `[outputs..., vjps...]`; `jvp` adds `tangent_<name>` -> `[outputs...,
tangents...]`; `hvp` -> `[loss, grads..., hvps...]`; `vmap` adds a leading batch axis.
"""

from ._rlx import grad, grad_with_loss, hvp, jacfwd, jacrev, jvp, vjp, vmap

__all__ = ["grad", "grad_with_loss", "hvp", "jacfwd", "jacrev", "jvp", "vjp", "vmap"]
