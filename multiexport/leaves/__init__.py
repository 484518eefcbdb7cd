"""What to export and how it is named: targets, named leaves, the flat function, lifted weights.

Data flows from here: a `Target` (function + example arguments) becomes a `Signature` (named input and
output leaves, unique and reversible names, aliases, symbolic dims) that every backend exports against.
"""

from .build import build_signature
from .signature import Leaf, Signature, shape_text
from .target import Target, load_target

__all__ = ["Leaf", "Signature", "Target", "build_signature", "load_target", "shape_text"]
