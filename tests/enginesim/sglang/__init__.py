"""Stand-in `sglang` package so that `python -m sglang.launch_server` runs the engine test double.

``__version__`` as the real package has it (the engine stage asks ``sglang.__version__``): the version
of the distribution it was installed as (build_wheel.py --name sglang), else none."""

try:
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("sglang")
    except PackageNotFoundError:
        __version__ = "0+enginesim"
except ImportError:  # pragma: no cover
    __version__ = "0+enginesim"
