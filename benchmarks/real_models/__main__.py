"""`python -m benchmarks.real_models --list | --run quick|all|TAG|NAMES --out DIR [--bench]`: see the package docstring."""

from . import main

raise SystemExit(main())
