"""Native consumers: compiled, Python-free programs that run an artifact from its directory and manifest.

- `section`: the manifest's "native" section, computed at export time by each backend that has one.
- `build`: compiles the programs in `csrc/` on first use, cached per machine.
- `run`: runs an artifact's consumer on named inputs and reads named outputs back; `print_command`
  gives the same run as one command line that works under `env -i`.
"""
