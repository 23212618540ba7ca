"""ldpmarket's mechanisms: pure numpy mathematics of local differential privacy.

Never imports Django.  Every function validates its input and raises
``ValueError`` with a readable message; every random draw comes from a
cryptographically secure source unless a ``numpy.random.Generator`` is passed
as ``rng``.  See docs/mechanisms-reference.md for the contract; the
submodules ``estimators``, ``numeric``, ``rappor`` and ``audit`` hold sections
4 to 7; ``uldp``, ``rr3``, ``private_sampling`` and ``surveys`` the other papers'
mechanisms (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum,
docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp,
docs/mechanisms-reference.md#private-sampling-with-a-public-prior,
docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).  ``exactness`` (gradual
release) and ``exactness_oneshot`` compute, from the integer laws the samplers draw, the privacy level they realise
(docs/mechanisms.md, "Exact sampling").
"""
from . import audit, estimators, exactness, exactness_oneshot, numeric, private_sampling, rappor, rr3, surveys, uldp
from .relaxation import bridge, bridge_matrix, chain, relax, step_matrix, step_probabilities, tighten, tighten_matrix
from .rr import flip_probability, keep_probability, perturb, rr_matrix

__all__ = [
    "audit", "bridge", "bridge_matrix", "chain", "estimators", "exactness", "exactness_oneshot", "flip_probability",
    "keep_probability", "numeric", "perturb", "private_sampling", "rappor", "relax", "rr3", "rr_matrix", "step_matrix",
    "step_probabilities", "surveys", "tighten", "tighten_matrix", "uldp",
]
