"""Process and system machinery at the bottom of the import order: running a child that dies with its parent
(`process`), the exit codes of a process by cause (`exits`), the kernel's OOM-kill count (`oom`).

Imports only `multiexport.errors` and `multiexport.telemetry`: every layer above may use it.
"""
