"""Files multiexport reads and writes: atomic writes, paths confined to a directory, named arrays on disk.

Everything here treats file contents as hostile: a path from a manifest must stay inside its artifact,
an `.npz` header must fit the bytes that follow it, a safetensors header must describe its own file.
"""

from .atomic import current_umask, write_bytes_atomic, write_text_atomic
from .paths import inside, safe_component

__all__ = ["current_umask", "inside", "safe_component", "write_bytes_atomic", "write_text_atomic"]
