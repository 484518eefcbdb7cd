"""Native consumers: compiled, Python-free programs that run an artifact from its directory and manifest.

- `build`: compiles our programs on first use, cached per machine: each from its backend's recipe
  (`NativeConsumer.recipe`: its main source in `backends/<name>/csrc/`, its runtime's flags) and the shared
  sources in `csrc/common/`.
- `runtimes`: what every format's runtime lookup shares (`NativeBuildError`, `package_dir`).
- `run`: runs an artifact's consumer on named inputs and reads named outputs back; `print_command`
  gives the same run as one command line that works under `env -i`.
- `bundle` (with `loader`, the dynamic loader's view of a program's libraries): a relocatable folder that runs
  an artifact on a server with no Python.
"""
