"""fxflow's version, in one place (the package, the CLI and the SARIF report read it)."""
__version__ = "0.1.0"
